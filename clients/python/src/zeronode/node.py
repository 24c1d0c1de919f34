"""A zeronode node on asyncio and pyzmq: handshake, heartbeats, reconnection, requests,
ticks and streams both ways, routers, the drain (PROTOCOL.md sections 5 to 7).

One task reads each socket (the bound ROUTER, and each upstream DEALER); everything that
arrives goes through :meth:`Node._dispatch`, which never waits: handlers run as tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import msgpack
import zmq
import zmq.asyncio

from . import envelope as env
from . import errors, meta
from .credit import Credit, Violation, Window
from .envelope import Envelope, Kind
from .filter import matches

MetaValue = meta.MetaValue
_meta_mod = meta

PROTOCOL_VERSION = 1
HANDSHAKE = "_system:handshake"
HEARTBEAT = "_system:heartbeat"
OPTIONS = "_system:options"
BYE = "_system:bye"
DRAINING = "_system:draining"
REJOIN = "_system:rejoin"
DESCRIBE = "_system:describe"
FORWARD = "_system:forward"
DEFAULT_MAX_PAYLOAD = 16 * 1024 * 1024
HOP_LIMIT = 8
# Router errors after which nothing ran, so another router may be tried (PROTOCOL.md 6.7).
RETRY_ELSEWHERE = {"NO_MATCH", "NOT_FOUND", "ROUTE_LOOP", "NOT_A_ROUTER"}


def pack(value: Any) -> bytes:
    """MessagePack, as every zeronode node reads it."""
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def unpack(data: bytes) -> Any:
    """MessagePack to a Python value (``None`` for an empty payload)."""
    if not data:
        return None
    return msgpack.unpackb(data, raw=False)


@dataclass(frozen=True)
class KeyPair:
    """A CURVE key pair, both halves in Z85 (40 characters each)."""

    public: str
    secret: str

    @staticmethod
    def generate() -> KeyPair:
        """A fresh pair."""
        public, secret = zmq.curve_keypair()
        return KeyPair(public.decode(), secret.decode())

    @staticmethod
    def load(path: str) -> KeyPair:
        """A pair from a file written by ``zeronode keygen``."""
        fields = _key_file(path)
        return KeyPair(fields["public-key"], fields["secret-key"])


def public_key(key_or_path: str) -> str:
    """A public key given as 40 characters of Z85, or a ``zeronode keygen`` file."""
    if len(key_or_path) == 40:
        return key_or_path
    return _key_file(key_or_path)["public-key"]


def _key_file(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(path) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


class Link:
    """One connection: a DEALER of ours (upstream) or a routing id on our ROUTER."""

    def __init__(self, sock: zmq.asyncio.Socket, routing_id: bytes | None = None) -> None:
        self.sock = sock
        self.routing_id = routing_id

    async def send(self, frames: list[bytes]) -> None:
        prefix = [self.routing_id] if self.routing_id is not None else []
        await self.sock.send_multipart(prefix + frames, copy=len(frames[-1]) < 65536)


@dataclass
class Peer:
    """A joined node."""

    id: str
    instance: str
    options: dict[str, Any]
    router: bool
    heartbeat_ms: int
    max_payload: int
    direction: str  # "up": we connected to it; "down": it connected to us
    link: Link
    heard: float = field(default_factory=time.monotonic)
    draining: bool = False
    ticket: str = ""


@dataclass(frozen=True)
class Route:
    """How a message came through routers: its first sender and the routers, in order."""

    origin: str
    via: list[str]


class Request:
    """What a handler receives."""

    def __init__(
        self,
        event: str,
        sender: str,
        payload: bytes,
        entries: list[tuple[str, MetaValue]],
        deadline: float | None,
        body: AsyncIterator[Any] | None = None,
    ) -> None:
        self.event = event
        self.sender = sender
        self.payload = payload
        self.meta = meta.user_entries(entries)
        self.deadline = deadline
        self.body = body
        self._route: Route | None = None
        for key, value in entries:
            if key == meta.ROUTE and isinstance(value, bytes):
                with contextlib.suppress(Exception):
                    r = unpack(value)
                    self._route = Route(str(r["origin"]), [str(v) for v in r.get("via", [])])

    @property
    def data(self) -> Any:
        """The payload decoded from MessagePack."""
        return unpack(self.payload)

    @property
    def route(self) -> Route | None:
        """For a message that came through routers: the origin and the routers."""
        return self._route

    @property
    def origin(self) -> str:
        """The node that sent the message first (``sender`` is then the last router)."""
        return self._route.origin if self._route else self.sender

    def remaining(self) -> float | None:
        """Seconds left before the caller stops waiting (None: it did not say)."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())


@dataclass
class Response:
    """A handler's answer with metadata, or a raw payload (not MessagePack)."""

    payload: bytes = b""
    meta: dict[str, MetaValue] = field(default_factory=dict)

    @staticmethod
    def of(value: Any, meta: dict[str, MetaValue] | None = None) -> Response:
        """``value`` encoded as MessagePack."""
        return Response(pack(value), dict(meta or {}))


RequestHandler = Callable[[Request], Awaitable[Any]]
TickHandler = Callable[[Request], Awaitable[None]]
StreamHandler = Callable[[Request], AsyncIterator[Any]]

_END = object()


class _Call:
    """A request of ours waiting for its answer (and its items, for a stream)."""

    def __init__(self, link: Link, stream: bool) -> None:
        self.link = link
        self.answer: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self.items: asyncio.Queue[bytes | object] | None = asyncio.Queue() if stream else None
        self.window: Window | None = None
        self.send_credit: Credit | None = None
        self.credit_changed = asyncio.Event()
        self.peer_id = ""


class _Serving:
    """A streamed request we serve: the caller's credit, and the body's items."""

    def __init__(self) -> None:
        self.credit = Credit()
        self.credit_changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.body: asyncio.Queue[bytes | object] = asyncio.Queue()
        self.window: Window | None = None
        self.failed: str | None = None


class Node:
    """A zeronode node.

    ::

        node = Node(id="py-worker", options={"role": "worker"})
        node.on_request("echo", echo)
        await node.bind("tcp://127.0.0.1:0")
        await node.connect("tcp://127.0.0.1:7000")
        print(await node.request("ping", to="rust-node"))
        await node.close()
    """

    def __init__(
        self,
        id: str | None = None,
        options: dict[str, Any] | None = None,
        *,
        heartbeat_ms: int = 1000,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        key: KeyPair | None = None,
        connect_timeout: float = 3.0,
        request_timeout: float = 10.0,
        max_handlers: int = 1024,
        max_streams: int = 1024,
    ) -> None:
        self.id = id or f"py-{secrets.token_hex(6)}"
        self.options: dict[str, Any] = dict(options or {})
        self.heartbeat_ms = heartbeat_ms
        self.max_payload = max_payload
        self.key = key
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.instance = secrets.token_hex(8)
        self._ctx = zmq.asyncio.Context()
        self._router: zmq.asyncio.Socket | None = None
        self._down_links: dict[bytes, Link] = {}
        self._peers: dict[int, Peer] = {}  # by id(link)
        self._upstreams: list[_Upstream] = []
        self._next_id = 0
        self._calls: dict[int, _Call] = {}
        self._serving: dict[tuple[int, int], _Serving] = {}
        self._requests: dict[str, RequestHandler] = {}
        self._ticks: dict[str, TickHandler] = {}
        self._streams: dict[str, StreamHandler] = {}
        self._uploads: dict[str, RequestHandler] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._closed = False
        self._heartbeat_task: asyncio.Task[None] | None = None
        self.address: str | None = None
        self._authenticator: Any = None
        self.max_handlers = max_handlers
        self.max_streams = max_streams
        #: Messages dropped because they could not be read (counted, never fatal).
        self.dropped = 0

    # ---- handlers -------------------------------------------------------------------

    def on_request(self, event: str, handler: RequestHandler) -> None:
        """Serves requests for ``event``: the handler's return value is the reply
        (MessagePack), a :class:`Response`, or it raises :class:`errors.HandlerError`."""
        self._requests[event] = handler

    def on_tick(self, event: str, handler: TickHandler) -> None:
        """Handles ticks for ``event`` (``"*"``: every event without a handler)."""
        self._ticks[event] = handler

    def on_stream(self, event: str, handler: StreamHandler) -> None:
        """Serves streamed requests: the handler is an async generator of items, each sent
        as the caller grants credit."""
        self._streams[event] = handler

    def on_upload(self, event: str, handler: RequestHandler) -> None:
        """Serves requests whose body is streamed: ``req.body`` iterates its items."""
        self._uploads[event] = handler

    # ---- lifecycle ------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any], handler: bool = False) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        bucket = self._handlers if handler else self._tasks
        bucket.add(task)
        task.add_done_callback(bucket.discard)
        return task

    def _start_heartbeats(self) -> None:
        if self._heartbeat_task is None:
            self._heartbeat_task = self._spawn(self._heartbeats())

    async def bind(self, address: str, *, allow: Iterable[str] | None = None) -> str:
        """Serves on ``address`` (port 0 picks one); returns the real address. With a key
        pair the address takes CURVE connections only; ``allow`` limits them to these
        client public keys."""
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.LINGER, 1000)
        if self.key is not None:
            if allow is not None:
                await self._start_auth(list(allow))
            sock.curve_server = True
            sock.curve_secretkey = self.key.secret.encode()
            sock.curve_publickey = self.key.public.encode()
        sock.bind(address)
        endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
        self.address = endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)
        self._router = sock
        self._spawn(self._read_router(sock))
        self._start_heartbeats()
        return self.address

    async def _start_auth(self, allow: list[str]) -> None:
        import zmq.auth
        from zmq.auth.asyncio import AsyncioAuthenticator

        auth = AsyncioAuthenticator(self._ctx)
        auth.start()
        auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
        allowed = {k.encode() for k in allow}

        class _Allow:
            def callback(self, domain: str, key: bytes) -> bool:
                return key in allowed

        auth.configure_curve_callback(domain="*", credentials_provider=_Allow())
        self._authenticator = auth

    async def connect(self, address: str, *, server_key: str | None = None) -> str:
        """Joins the node at ``address`` (handshake); returns its id. The connection is
        kept: a peer that leaves is joined again with backoff."""
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 1000)
        if server_key is not None:
            mine = self.key or KeyPair.generate()
            sock.curve_serverkey = public_key(server_key).encode()
            sock.curve_publickey = mine.public.encode()
            sock.curve_secretkey = mine.secret.encode()
        sock.connect(address)
        up = _Upstream(self, address, Link(sock))
        self._upstreams.append(up)
        self._spawn(self._read_dealer(up))
        self._start_heartbeats()
        try:
            peer = await up.handshake(self.connect_timeout)
        except BaseException as e:
            self._upstreams.remove(up)
            up.stop()
            sock.close(linger=0)
            if isinstance(e, asyncio.TimeoutError):
                raise errors.ConnectFailed(
                    f"no handshake from {address} within {self.connect_timeout}s"
                ) from None
            raise
        up.supervisor = self._spawn(up.supervise())
        return peer.id

    async def close(self, grace: float = 5.0) -> None:
        """Closes gracefully: tells every peer it is draining, finishes the handlers in
        flight (at most ``grace`` seconds), refuses new ones, says goodbye, closes."""
        if self._closed:
            return
        peers = list(self._peers.values())
        drained = [self._system_request(p.link, DRAINING, b"", 1.0) for p in peers]
        await asyncio.gather(*drained, return_exceptions=True)
        self._closing = True
        if self._handlers:
            _, pending = await asyncio.wait(list(self._handlers), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for p in list(self._peers.values()):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._tick_link(p.link, BYE, b""), 0.5)
        self._closed = True
        for up in self._upstreams:
            up.stop()
        for call in list(self._calls.values()):
            if not call.answer.done():
                call.answer.set_exception(errors.Closed("the node closed"))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._router is not None:
            self._router.close(linger=1000)
        for up in self._upstreams:
            up.link.sock.close(linger=1000)
        if self._authenticator is not None:
            self._authenticator.stop()
        self._ctx.term()

    def peers(self) -> list[Peer]:
        """The joined peers."""
        return list(self._peers.values())

    async def set_options(self, options: dict[str, Any]) -> None:
        """Replaces this node's options and tells every peer."""
        self.options = dict(options)
        for p in list(self._peers.values()):
            await self._tick_link(p.link, OPTIONS, pack(self.options))

    # ---- reading --------------------------------------------------------------------

    async def _read_router(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            try:
                frames = await sock.recv_multipart(copy=True)
            except zmq.ZMQError:
                return  # the socket closed
            if len(frames) < 2:
                continue
            rid = frames[0]
            # Only joined connections keep a link (a stranger's messages cost nothing kept).
            link = self._down_links.get(rid) or Link(sock, rid)
            self._guarded(link, frames[1:], "down")

    async def _read_dealer(self, up: _Upstream) -> None:
        while not up.stopped:
            try:
                frames = await up.link.sock.recv_multipart(copy=True)
            except zmq.ZMQError:
                return  # the socket closed (a failed connect, or the node's close)
            self._guarded(up.link, frames, "up", up)

    def _guarded(
        self, link: Link, frames: list[bytes], direction: str, up: _Upstream | None = None
    ) -> None:
        # Whatever a peer sends, the reader goes on: a payload that does not decode where
        # the node itself reads one (options, a hello, a route) drops that message only.
        try:
            self._dispatch(link, frames, direction, up)
        except Exception:
            self.dropped += 1

    def _dispatch(
        self, link: Link, frames: list[bytes], direction: str, up: _Upstream | None = None
    ) -> None:
        try:
            msg = env.decode(frames, self.max_payload)
        except env.DecodeError as e:
            self._refused(link, frames, e)
            return
        peer = self._peers.get(id(link))
        if peer is not None:
            peer.heard = time.monotonic()
        kind = msg.kind
        if kind in (Kind.REPLY, Kind.ERROR):
            call = self._calls.get(msg.id)
            if call is not None and call.link is link and not call.answer.done():
                call.answer.set_result(msg)
                if call.items is not None:
                    call.items.put_nowait(_END)
            return
        if kind == Kind.STREAM_ITEM:
            self._on_item(link, msg)
            return
        if kind == Kind.CREDIT:
            self._on_credit(link, msg)
            return
        if kind == Kind.CANCEL:
            serving = self._serving.get((id(link), msg.id))
            if serving is not None and serving.task is not None:
                serving.failed = "cancelled"
                serving.task.cancel()
            return
        if kind == Kind.TICK:
            self._on_tick(link, msg, peer, direction, up)
            return
        # A request.
        if msg.event == HANDSHAKE and direction == "down":
            self._answer(link, msg.id, self._handshake_downstream(link, msg))
            return
        if peer is None:
            self._answer(link, msg.id, errors.system_error("NOT_JOINED", "handshake first"))
            return
        if msg.event == DRAINING:
            peer.draining = True
            self._answer(link, msg.id, Response())
            return
        if self._closing:
            self._answer(link, msg.id, errors.system_error("SHUTTING_DOWN", "the node is closing"))
            return
        if msg.event == DESCRIBE:
            self._answer(link, msg.id, Response.of(self._description()))
            return
        if msg.event == FORWARD:
            self._answer(link, msg.id, errors.system_error("NOT_A_ROUTER", self.id))
            return
        if msg.system:
            self._answer(link, msg.id, errors.system_error("NO_HANDLER", f"no {msg.event!r}"))
            return
        self._serve(link, peer, msg)

    def _refused(self, link: Link, frames: list[bytes], e: env.DecodeError) -> None:
        # A request whose header reads but whose payload is over the limit is answered.
        if e.name == "TooLarge" and frames and len(frames[0]) >= 14 and frames[0][2] == 1:
            rid = int.from_bytes(frames[0][4:12], "big")
            limit = errors.Limit("Payload", {"size": e.fields["size"], "max": e.fields["max"]})
            self._answer(link, rid, errors.system_error("PAYLOAD_TOO_LARGE", str(e), limit=limit))

    def _on_tick(
        self, link: Link, msg: Envelope, peer: Peer | None, direction: str, up: _Upstream | None
    ) -> None:
        if peer is None:
            if msg.event == HEARTBEAT and direction == "down":
                self._spawn(self._tick_link(link, REJOIN, b""))
            elif msg.event == REJOIN and up is not None:
                up.rejoin.set()
            return
        if msg.system:
            if msg.event == OPTIONS:
                options = unpack(msg.payload)
                if isinstance(options, dict):
                    peer.options = options
            elif msg.event == BYE:
                self._peer_left(peer, "bye")
            elif msg.event == REJOIN and up is not None:
                up.rejoin.set()
            return
        if self._closing:
            return
        handler = self._ticks.get(msg.event) or self._ticks.get("*")
        if handler is None:
            return
        try:
            entries = meta.parse(msg.metadata)
        except meta.MetaError:
            return
        req = Request(msg.event, peer.id, msg.payload, entries, None)
        self._spawn(self._run_tick(handler, req), handler=True)

    async def _run_tick(self, handler: TickHandler, req: Request) -> None:
        with contextlib.suppress(Exception):
            await handler(req)

    # ---- handshake ------------------------------------------------------------------

    def _hello(self, token: str = "") -> bytes:
        return pack(
            {
                "id": self.id,
                "instance": self.instance,
                "version": PROTOCOL_VERSION,
                "options": self.options,
                "router": False,
                "heartbeat_ms": self.heartbeat_ms,
                "max_payload": self.max_payload,
                "token": token,
            }
        )

    def _handshake_downstream(self, link: Link, msg: Envelope) -> Response | errors.RemoteError:
        try:
            hello = unpack(msg.payload)
            theirs = str(hello["id"])
            instance = str(hello["instance"])
            version = int(hello["version"])
        except Exception as e:
            return errors.system_error("BAD_HANDSHAKE", str(e))
        if version != PROTOCOL_VERSION:
            return errors.system_error("VERSION_MISMATCH", str(PROTOCOL_VERSION))
        if theirs == self.id:
            return errors.system_error("DUPLICATE_ID", theirs)
        joined = self._peers.get(id(link))
        if joined is not None and joined.id != theirs:
            return errors.system_error("ALREADY_JOINED", theirs)
        for other in list(self._peers.values()):
            if other.id != theirs or other.link is link or other.direction != "down":
                continue
            token = str(hello.get("token", ""))
            same = (
                other.instance == instance and token and secrets.compare_digest(token, other.ticket)
            )
            if not same:
                return errors.system_error("DUPLICATE_ID", theirs)
            self._peer_left(other, "replaced")
        ticket = secrets.token_hex(16)
        if link.routing_id is not None:
            self._down_links[link.routing_id] = link
        self._peers[id(link)] = self._peer_of(hello, "down", link, ticket)
        return Response(self._hello(ticket))

    def _peer_of(self, hello: dict[str, Any], direction: str, link: Link, ticket: str) -> Peer:
        options = hello.get("options") or {}
        return Peer(
            id=str(hello["id"]),
            instance=str(hello.get("instance", "")),
            options=options if isinstance(options, dict) else {},
            router=bool(hello.get("router", False)),
            heartbeat_ms=int(hello.get("heartbeat_ms") or 0),
            max_payload=int(hello.get("max_payload") or 0) or DEFAULT_MAX_PAYLOAD,
            direction=direction,
            link=link,
            ticket=ticket,
        )

    def _peer_left(self, peer: Peer, why: str) -> None:
        if self._peers.get(id(peer.link)) is peer:
            del self._peers[id(peer.link)]
            if peer.link.routing_id is not None:
                self._down_links.pop(peer.link.routing_id, None)
        for call in list(self._calls.values()):
            if call.link is peer.link and not call.answer.done():
                call.answer.set_exception(errors.PeerGone(peer.id))
                if call.items is not None:
                    call.items.put_nowait(_END)
        for (link_id, _), serving in list(self._serving.items()):
            if link_id == id(peer.link) and serving.task is not None:
                serving.failed = "peer left"
                serving.task.cancel()
        for up in self._upstreams:
            if up.link is peer.link:
                up.left.set()

    async def _heartbeats(self) -> None:
        interval = self.heartbeat_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if self._closed:
                return
            now = time.monotonic()
            for peer in list(self._peers.values()):
                dead_after = 2.5 * max(interval, peer.heartbeat_ms / 1000)
                if now - peer.heard > dead_after:
                    self._peer_left(peer, "dead")
                    continue
                with contextlib.suppress(Exception):
                    await self._tick_link(peer.link, HEARTBEAT, b"", wait=False)

    def _description(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "instance": self.instance,
            "version": "zeronode-python 0.1.0",
            "protocol": PROTOCOL_VERSION,
            "engine": "pyzmq",
            "curve": self.key is not None,
            "router": False,
            "address": self.address,
            "options": self.options,
            "requests": sorted(self._requests),
            "streams": sorted(self._streams),
            "uploads": sorted(self._uploads),
            "ticks": sorted(self._ticks),
        }

    # ---- sending --------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def _tick_link(self, link: Link, event: str, payload: bytes, wait: bool = True) -> None:
        frames = env.encode(Kind.TICK, self._new_id(), event, b"", payload)
        if wait:
            await link.send(frames)
        else:
            prefix = [link.routing_id] if link.routing_id is not None else []
            with contextlib.suppress(zmq.Again, zmq.ZMQError):
                link.sock.send_multipart(prefix + frames, flags=zmq.NOBLOCK)

    def _answer(self, link: Link, rid: int, outcome: Response | errors.RemoteError) -> None:
        if isinstance(outcome, errors.RemoteError):
            frames = env.encode(Kind.ERROR, rid, "", b"", outcome.encode())
        else:
            metadata = meta.encode(outcome.meta) if outcome.meta else b""
            frames = env.encode(Kind.REPLY, rid, "", metadata, outcome.payload)
        # No task per answer: the socket's send future is left to complete on its own
        # (at once when the socket has room), its error, if any, retrieved and dropped.
        prefix = [link.routing_id] if link.routing_id is not None else []
        try:
            sent = link.sock.send_multipart(prefix + frames, copy=len(frames[-1]) < 65536)
        except zmq.ZMQError:
            return
        cast("asyncio.Future[Any]", sent).add_done_callback(_retrieve)

    async def _send_quietly(self, link: Link, frames: list[bytes]) -> None:
        with contextlib.suppress(zmq.ZMQError):
            await link.send(frames)

    async def _system_request(
        self, link: Link, event: str, payload: bytes, timeout: float
    ) -> Envelope:
        rid = self._new_id()
        call = _Call(link, False)
        self._calls[rid] = call
        try:
            budget = int(timeout * 1e6)
            await link.send(env.encode(Kind.REQUEST, rid, event, meta.encode({}, budget), payload))
            return await asyncio.wait_for(asyncio.shield(call.answer), timeout)
        finally:
            self._calls.pop(rid, None)

    # ---- picking a peer ---------------------------------------------------------------

    def _pick(self, to: str | None, where: dict[str, Any] | None) -> Peer | None:
        if to is not None:
            for p in self._peers.values():
                if p.id == to:
                    return p
            return None
        found = [
            p for p in self._peers.values() if not p.draining and matches(where or {}, p.options)
        ]
        return random.choice(found) if found else None

    def _routers(self) -> list[Peer]:
        return [p for p in self._peers.values() if p.router]

    def _forward_meta(
        self,
        action: str,
        to: str | None,
        where: dict[str, Any] | None,
        event: str,
        timeout: float,
        user: dict[str, MetaValue],
    ) -> bytes:
        dest: dict[str, Any] = {"Id": to} if to is not None else {"Filter": [where or {}, "Both"]}
        header = {
            "id": random.getrandbits(64),
            "action": action,
            "to": dest,
            "event": event,
            "remaining_ms": int(timeout * 1000),
            "hops_left": HOP_LIMIT,
            "origin": self.id,
            "visited": [],
            "groups": None,
            "skip": [],
            "served": [],
        }
        entries: list[tuple[str, MetaValue]] = [
            (meta.BUDGET, int(timeout * 1e6).to_bytes(8, "big"))
        ]
        entries += list(user.items())
        entries.append((meta.FORWARD, pack(header)))
        return meta.encode_framework(entries)

    def _targets(
        self, to: str | None, where: dict[str, Any] | None
    ) -> tuple[Peer | None, list[Peer]]:
        """The peer to send to directly, else the routers to try in turn."""
        if self._closed:
            raise errors.Closed("the node is closed")
        peer = self._pick(to, where)
        if peer is not None:
            return peer, []
        routers = self._routers()
        if not routers:
            if to is not None:
                raise errors.NodeNotFound(to)
            raise errors.NoNodesMatch(f"no node matches {where}")
        random.shuffle(routers)
        return None, routers

    # ---- calls ----------------------------------------------------------------------

    async def request(
        self,
        event: str,
        data: Any = None,
        *,
        to: str | None = None,
        where: dict[str, Any] | None = None,
        timeout: float | None = None,
        meta: dict[str, MetaValue] | None = None,
        raw: bool = False,
    ) -> Any:
        """Sends a request to the node ``to``, or to one node whose options match the filter
        ``where`` (any node without either), directly or through a router; returns the
        reply decoded (``raw=True``: its bytes, and ``data`` is sent as bytes)."""
        reply = await self.call(
            event, data, to=to, where=where, timeout=timeout, meta=meta, raw=raw
        )
        return reply.payload if raw else unpack(reply.payload)

    async def call(
        self,
        event: str,
        data: Any = None,
        *,
        to: str | None = None,
        where: dict[str, Any] | None = None,
        timeout: float | None = None,
        meta: dict[str, MetaValue] | None = None,
        raw: bool = False,
    ) -> Response:
        """As :meth:`request`, returning the reply's payload and metadata."""
        timeout = self.request_timeout if timeout is None else timeout
        payload = (b"" if data is None else bytes(data)) if raw else pack(data)
        user = dict(meta or {})
        deadline = time.monotonic() + timeout
        peer, routers = self._targets(to, where)
        if peer is not None:
            metadata = _meta_mod.encode(user, int(timeout * 1e6))
            return await self._round_trip(peer.link, peer.id, event, metadata, payload, deadline)
        last: BaseException | None = None
        for router in routers:
            left = max(0.0, deadline - time.monotonic())
            metadata = self._forward_meta("Request", to, where, event, left, user)
            try:
                return await self._round_trip(
                    router.link, router.id, FORWARD, metadata, payload, deadline, event
                )
            except errors.RemoteError as e:
                if e.system and e.code in RETRY_ELSEWHERE:
                    last = e
                    continue
                raise
        assert last is not None
        raise last

    async def _round_trip(
        self,
        link: Link,
        peer_id: str,
        event: str,
        metadata: bytes,
        payload: bytes,
        deadline: float,
        name: str | None = None,
    ) -> Response:
        rid = self._new_id()
        call = _Call(link, False)
        call.peer_id = peer_id
        self._calls[rid] = call
        timeout = max(0.0, deadline - time.monotonic())
        try:
            await link.send(env.encode(Kind.REQUEST, rid, event, metadata, payload))
            try:
                msg = await asyncio.wait_for(asyncio.shield(call.answer), timeout)
            except asyncio.TimeoutError:
                raise errors.Timeout(name or event, timeout) from None
        finally:
            self._calls.pop(rid, None)
        if msg.kind == Kind.ERROR:
            raise errors.from_payload(msg.payload)
        entries = _meta_mod.parse(msg.metadata) if msg.metadata else []
        return Response(msg.payload, _meta_mod.user_entries(entries))

    async def tick(
        self,
        event: str,
        data: Any = None,
        *,
        to: str | None = None,
        where: dict[str, Any] | None = None,
        meta: dict[str, MetaValue] | None = None,
    ) -> None:
        """Sends a tick to one node (by id, or by filter), directly or through a router."""
        payload = pack(data)
        peer, routers = self._targets(to, where)
        if peer is not None:
            metadata = _meta_mod.encode(dict(meta or {}))
            await peer.link.send(env.encode(Kind.TICK, self._new_id(), event, metadata, payload))
            return
        await self._forward_tick("Tick", routers, to, where, event, payload, dict(meta or {}))

    async def tick_all(
        self,
        event: str,
        data: Any = None,
        *,
        where: dict[str, Any] | None = None,
        meta: dict[str, MetaValue] | None = None,
    ) -> int:
        """Sends a tick to every joined node matching ``where`` (through routers when none
        is joined); returns how many nodes it reached."""
        payload = pack(data)
        found = [
            p for p in self._peers.values() if not p.draining and matches(where or {}, p.options)
        ]
        if found:
            metadata = _meta_mod.encode(dict(meta or {}))
            for p in found:
                await p.link.send(env.encode(Kind.TICK, self._new_id(), event, metadata, payload))
            return len(found)
        routers = self._routers()
        if not routers:
            raise errors.NoNodesMatch(f"no node matches {where}")
        return await self._forward_tick(
            "TickAll", routers, None, where, event, payload, dict(meta or {})
        )

    async def _forward_tick(
        self,
        action: str,
        routers: list[Peer],
        to: str | None,
        where: dict[str, Any] | None,
        event: str,
        payload: bytes,
        user: dict[str, MetaValue],
    ) -> int:
        reached = 0
        for router in routers:
            timeout = self.request_timeout
            metadata = self._forward_meta(action, to, where, event, timeout, user)
            deadline = time.monotonic() + timeout
            try:
                reply = await self._round_trip(
                    router.link, router.id, FORWARD, metadata, payload, deadline, event
                )
            except errors.RemoteError as e:
                if e.system and e.code in RETRY_ELSEWHERE:
                    continue
                raise
            reached += int(unpack(reply.payload) or 0)
            if action == "Tick" and reached:
                break
        if not reached:
            if to is not None:
                raise errors.NodeNotFound(to)
            raise errors.NoNodesMatch(f"no node matches {where}")
        return reached

    async def stream(
        self,
        event: str,
        data: Any = None,
        *,
        to: str | None = None,
        where: dict[str, Any] | None = None,
        timeout: float = 60.0,
        meta: dict[str, MetaValue] | None = None,
        window: int = 1024,
        raw: bool = False,
    ) -> AsyncIterator[Any]:
        """Asks for a streamed reply and yields its items as they come (decoded, or bytes
        with ``raw``), granting credit as they are consumed. Leaving the loop early cancels
        the stream at the sender."""
        payload = (b"" if data is None else bytes(data)) if raw else pack(data)
        user = dict(meta or {})
        peer, routers = self._targets(to, where)
        if peer is not None:
            link, target = peer.link, event
            metadata = _meta_mod.encode(user, int(timeout * 1e6))
        else:
            router = routers[0]
            link, target = router.link, FORWARD
            metadata = self._forward_meta("Request", to, where, event, timeout, user)
        rid = self._new_id()
        call = _Call(link, True)
        call.window = Window(window)
        self._calls[rid] = call
        deadline = time.monotonic() + timeout
        finished = False
        try:
            await link.send(
                env.encode(Kind.REQUEST, rid, target, metadata, payload, env.FLAG_REPLY_STREAMED)
            )
            await link.send(env.encode(Kind.CREDIT, rid, "", b"", call.window.open()))
            assert call.items is not None
            while True:
                left = deadline - time.monotonic()
                try:
                    item = await asyncio.wait_for(call.items.get(), max(0.0, left))
                except asyncio.TimeoutError:
                    raise errors.Timeout(event, timeout) from None
                if item is _END:
                    finished = True
                    msg = call.answer.result()
                    if msg.kind == Kind.ERROR:
                        raise errors.from_payload(msg.payload)
                    return
                assert isinstance(item, bytes)
                yield item if raw else unpack(item)
                grant = call.window.consume()
                if grant is not None:
                    await link.send(env.encode(Kind.CREDIT, rid, "", b"", grant))
        finally:
            self._calls.pop(rid, None)
            if not finished and not self._closed:
                self._spawn(self._send_quietly(link, env.encode(Kind.CANCEL, rid)))

    async def upload(
        self,
        event: str,
        data: Any,
        items: AsyncIterable[Any] | Iterable[Any],
        *,
        to: str | None = None,
        where: dict[str, Any] | None = None,
        timeout: float = 60.0,
        meta: dict[str, MetaValue] | None = None,
        raw_items: bool = False,
    ) -> Any:
        """Sends a request whose body is the stream ``items`` (each MessagePack, or bytes
        with ``raw_items``), one per credit the receiver grants; returns the reply."""
        payload = pack(data)
        user = dict(meta or {})
        peer, routers = self._targets(to, where)
        if peer is not None:
            link, target = peer.link, event
            metadata = _meta_mod.encode(user, int(timeout * 1e6))
        else:
            link, target = routers[0].link, FORWARD
            metadata = self._forward_meta("Request", to, where, event, timeout, user)
        rid = self._new_id()
        call = _Call(link, False)
        call.send_credit = Credit()
        self._calls[rid] = call
        deadline = time.monotonic() + timeout

        async def send_body() -> None:
            assert call.send_credit is not None
            async for item in _aiter(items):
                while not call.send_credit.take():
                    call.credit_changed.clear()
                    await call.credit_changed.wait()
                body = bytes(item) if raw_items else pack(item)
                await link.send(
                    env.encode(Kind.STREAM_ITEM, rid, "", b"", body, env.FLAG_BODY_STREAMED)
                )
            await link.send(
                env.encode(
                    Kind.STREAM_ITEM, rid, "", b"", b"", env.FLAG_BODY_STREAMED | env.FLAG_END
                )
            )

        try:
            await link.send(
                env.encode(Kind.REQUEST, rid, target, metadata, payload, env.FLAG_BODY_STREAMED)
            )
            sender = asyncio.ensure_future(send_body())
            try:
                done, _ = await asyncio.wait(
                    [cast("asyncio.Future[Any]", sender), cast("asyncio.Future[Any]", call.answer)],
                    timeout=max(0.0, deadline - time.monotonic()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not call.answer.done():
                    if sender in done:
                        sender.result()
                    await asyncio.wait_for(
                        asyncio.shield(call.answer), max(0.0, deadline - time.monotonic())
                    )
            except asyncio.TimeoutError:
                raise errors.Timeout(event, timeout) from None
            finally:
                sender.cancel()
            msg = call.answer.result()
        finally:
            self._calls.pop(rid, None)
        if msg.kind == Kind.ERROR:
            raise errors.from_payload(msg.payload)
        return unpack(msg.payload)

    async def describe(self, to: str, timeout: float = 5.0) -> dict[str, Any]:
        """Asks a joined node (or, through a router, any node) to describe itself."""
        peer, routers = self._targets(to, None)
        if peer is None:
            metadata = self._forward_meta("Request", to, None, DESCRIBE, timeout, {})
            reply = await self._round_trip(
                routers[0].link,
                routers[0].id,
                FORWARD,
                metadata,
                b"",
                time.monotonic() + timeout,
            )
        else:
            reply = await self._round_trip(
                peer.link,
                peer.id,
                DESCRIBE,
                _meta_mod.encode({}, int(timeout * 1e6)),
                b"",
                time.monotonic() + timeout,
            )
        value: dict[str, Any] = unpack(reply.payload)
        return value

    # ---- stream messages ------------------------------------------------------------------

    def _on_item(self, link: Link, msg: Envelope) -> None:
        if msg.body_streamed:
            serving = self._serving.get((id(link), msg.id))
            if serving is None or serving.window is None:
                return
            if msg.end:
                serving.body.put_nowait(_END)
                return
            try:
                serving.window.arrive(len(msg.payload))
            except Violation as v:
                serving.failed = str(v)
                serving.body.put_nowait(_END)
                return
            serving.body.put_nowait(msg.payload)
            return
        call = self._calls.get(msg.id)
        if call is None or call.link is not link or call.items is None or call.window is None:
            return
        try:
            call.window.arrive(len(msg.payload))
        except Violation as v:
            if not call.answer.done():
                call.answer.set_exception(errors.StreamViolation(str(v)))
            call.items.put_nowait(_END)
            return
        call.items.put_nowait(msg.payload)

    def _on_credit(self, link: Link, msg: Envelope) -> None:
        if msg.body_streamed:
            call = self._calls.get(msg.id)
            if call is None or call.link is not link or call.send_credit is None:
                return
            try:
                call.send_credit.receive(msg.payload)
            except Violation as v:
                if not call.answer.done():
                    call.answer.set_exception(errors.StreamViolation(str(v)))
            call.credit_changed.set()
            return
        serving = self._serving.get((id(link), msg.id))
        if serving is None:
            return
        try:
            serving.credit.receive(msg.payload)
        except Violation as v:
            serving.failed = str(v)
            if serving.task is not None:
                serving.task.cancel()
        serving.credit_changed.set()

    # ---- serving --------------------------------------------------------------------

    def _serve(self, link: Link, peer: Peer, msg: Envelope) -> None:
        arrived = time.monotonic()
        try:
            entries = _meta_mod.parse(msg.metadata)
        except _meta_mod.MetaError as e:
            limit = None
            if e.name == "TooLarge":
                limit = errors.Limit("Metadata", dict(e.numbers))
            self._answer(link, msg.id, errors.system_error("BAD_METADATA", str(e), limit=limit))
            return
        budget = _meta_mod.budget_us(entries)
        deadline = arrived + budget / 1e6 if budget is not None else None
        if len(self._handlers) >= self.max_handlers:
            limit = errors.Limit("Handlers", {"max": self.max_handlers, "per_peer": False})
            self._answer(link, msg.id, errors.system_error("BUSY", "handlers busy", limit=limit))
            return
        if (msg.reply_streamed or msg.body_streamed) and len(self._serving) >= self.max_streams:
            limit = errors.Limit("Streams", {"max": self.max_streams})
            self._answer(
                link, msg.id, errors.system_error("TOO_MANY_STREAMS", "streams open", limit=limit)
            )
            return
        if msg.reply_streamed:
            handler_s = self._streams.get(msg.event)
            if handler_s is None:
                self._refuse_unknown(link, msg)
                return
            serving = _Serving()
            key = (id(link), msg.id)
            self._serving[key] = serving
            req = Request(msg.event, peer.id, msg.payload, entries, deadline)
            serving.task = self._spawn(
                self._run_stream(link, msg.id, key, serving, handler_s, req, budget),
                handler=True,
            )
            return
        if msg.body_streamed:
            handler_u = self._uploads.get(msg.event)
            if handler_u is None:
                self._refuse_unknown(link, msg)
                return
            serving = _Serving()
            serving.window = Window()
            key = (id(link), msg.id)
            self._serving[key] = serving
            req = Request(msg.event, peer.id, msg.payload, entries, deadline)
            req.body = self._body(link, msg.id, serving)
            self._spawn(
                self._send_quietly(
                    link,
                    env.encode(
                        Kind.CREDIT, msg.id, "", b"", serving.window.open(), env.FLAG_BODY_STREAMED
                    ),
                )
            )
            serving.task = self._spawn(
                self._run_request(link, msg.id, handler_u, req, budget, key), handler=True
            )
            return
        handler = self._requests.get(msg.event)
        if handler is None:
            self._refuse_unknown(link, msg)
            return
        req = Request(msg.event, peer.id, msg.payload, entries, deadline)
        self._spawn(self._run_request(link, msg.id, handler, req, budget), handler=True)

    def _refuse_unknown(self, link: Link, msg: Envelope) -> None:
        if msg.event in self._requests or msg.event in self._streams or msg.event in self._uploads:
            self._answer(
                link,
                msg.id,
                errors.system_error("NOT_STREAMED", f"{msg.event!r} is served otherwise"),
            )
        else:
            self._answer(
                link, msg.id, errors.system_error("NO_HANDLER", f"no handler for {msg.event!r}")
            )

    async def _body(self, link: Link, rid: int, serving: _Serving) -> AsyncIterator[Any]:
        assert serving.window is not None
        while True:
            item = await serving.body.get()
            if item is _END:
                if serving.failed:
                    raise errors.StreamViolation(serving.failed)
                return
            assert isinstance(item, bytes)
            yield item
            grant = serving.window.consume()
            if grant is not None:
                await link.send(
                    env.encode(Kind.CREDIT, rid, "", b"", grant, env.FLAG_BODY_STREAMED)
                )

    async def _run_request(
        self,
        link: Link,
        rid: int,
        handler: RequestHandler,
        req: Request,
        budget: int | None,
        key: tuple[int, int] | None = None,
    ) -> None:
        try:
            outcome = await self._outcome(handler(req), req, budget)
        except asyncio.CancelledError:
            outcome = errors.system_error("CANCELLED", "the handler was stopped")
        finally:
            if key is not None:
                self._serving.pop(key, None)
        self._answer(link, rid, outcome)

    async def _outcome(
        self, work: Awaitable[Any], req: Request, budget: int | None
    ) -> Response | errors.RemoteError:
        left = req.remaining()
        if left is not None and left <= 0:
            if asyncio.iscoroutine(work):
                work.close()
            return errors.system_error(
                "DEADLINE_EXCEEDED",
                "the budget ran out before the handler ran",
                timeout_ms=(budget or 0) // 1000,
            )
        try:
            result = await asyncio.wait_for(work, left)
        except asyncio.TimeoutError:
            return errors.system_error(
                "DEADLINE_EXCEEDED",
                "the handler ran past the caller's budget",
                timeout_ms=(budget or 0) // 1000,
            )
        except errors.RemoteError as e:
            return e
        except asyncio.CancelledError:
            raise
        except Exception as e:
            return errors.RemoteError("HANDLER_ERROR", f"{type(e).__name__}: {e}")
        if isinstance(result, Response):
            return result
        return Response.of(result)

    async def _run_stream(
        self,
        link: Link,
        rid: int,
        key: tuple[int, int],
        serving: _Serving,
        handler: StreamHandler,
        req: Request,
        budget: int | None,
    ) -> None:
        async def pump() -> None:
            async for item in handler(req):
                while not serving.credit.take():
                    serving.credit_changed.clear()
                    await serving.credit_changed.wait()
                data = item.payload if isinstance(item, Response) else pack(item)
                await link.send(env.encode(Kind.STREAM_ITEM, rid, "", b"", data))
            return None

        outcome: Response | errors.RemoteError
        try:
            outcome = await self._outcome(pump(), req, budget)
        except asyncio.CancelledError:
            outcome = errors.system_error("CANCELLED", serving.failed or "the stream was stopped")
        finally:
            self._serving.pop(key, None)
        if isinstance(outcome, Response):
            outcome = Response()
        if serving.failed == "cancelled":
            return  # the caller gave up: nothing more for it
        self._answer(link, rid, outcome)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Reads a finished send's outcome so that a failed one is not reported as unread
    (a peer that left before its answer: nothing more to do)."""
    if not future.cancelled():
        future.exception()


async def _aiter(items: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[Any]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


class _Upstream:
    """A connection we made: its handshake, and joining again when the peer leaves."""

    def __init__(self, node: Node, address: str, link: Link) -> None:
        self.node = node
        self.address = address
        self.link = link
        self.ticket = ""
        self.left = asyncio.Event()
        self.rejoin = asyncio.Event()
        self.supervisor: asyncio.Task[Any] | None = None
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        if self.supervisor is not None:
            self.supervisor.cancel()

    async def handshake(self, timeout: float) -> Peer:
        node = self.node
        msg = await node._system_request(self.link, HANDSHAKE, node._hello(self.ticket), timeout)
        if msg.kind == Kind.ERROR:
            raise errors.from_payload(msg.payload)
        hello = unpack(msg.payload)
        if int(hello.get("version", 0)) != PROTOCOL_VERSION or hello.get("id") == node.id:
            raise errors.ConnectFailed(f"refused the hello of {hello.get('id')}")
        self.ticket = str(hello.get("token", ""))
        peer = node._peer_of(hello, "up", self.link, self.ticket)
        node._peers[id(self.link)] = peer
        self.left.clear()
        self.rejoin.clear()
        return peer

    async def supervise(self) -> None:
        backoff = 0.1
        while not self.stopped:
            left = asyncio.ensure_future(self.left.wait())
            rejoin = asyncio.ensure_future(self.rejoin.wait())
            try:
                await asyncio.wait([left, rejoin], return_when=asyncio.FIRST_COMPLETED)
            finally:
                left.cancel()
                rejoin.cancel()
                await asyncio.gather(left, rejoin, return_exceptions=True)
            while not self.stopped and not self.node._closing:
                try:
                    await self.handshake(self.node.connect_timeout)
                    backoff = 0.1
                    break
                except (errors.ZeronodeError, asyncio.TimeoutError, zmq.ZMQError):
                    await asyncio.sleep(backoff * (1 + random.random() * 0.2))
                    backoff = min(backoff * 2, 2.0)
            if self.node._closing:
                return
