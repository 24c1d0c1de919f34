"""Python nodes talking to each other over loopback: the package's own behaviour (the
conformance suite runs the same against Rust nodes). Every wait is bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from zeronode import (
    ConnectFailed,
    HandlerError,
    KeyPair,
    Node,
    NodeNotFound,
    NoNodesMatch,
    PeerGone,
    RemoteError,
    Request,
    Response,
    Timeout,
    errors,
)


async def pair(**server_kw: object) -> tuple[Node, Node]:
    server = Node(id="server", options={"role": "worker", "load": 3}, **server_kw)  # type: ignore[arg-type]
    client = Node(id="client", options={"role": "caller"})
    address = await server.bind("tcp://127.0.0.1:0")
    await client.connect(address)
    return server, client


async def echo(req: Request) -> Response:
    return Response(req.payload, dict(req.meta))


async def test_request_by_id_and_by_filter_with_metadata() -> None:
    server, client = await pair()
    server.on_request("echo", echo)
    try:
        reply = await client.call("echo", {"a": 1}, to="server", meta={"tenant": "acme"})
        assert reply.meta == {"tenant": "acme"}
        assert await client.request("echo", "x", where={"load": {"$lt": 5}}) == "x"
        with pytest.raises(NoNodesMatch):
            await client.request("echo", "x", where={"load": {"$gt": 5}})
        with pytest.raises(NodeNotFound):
            await client.request("echo", "x", to="nobody")
        # The server calls its downstream peer back on the same connection.
        client.on_request("echo", echo)
        assert await server.request("echo", 7, to="client") == 7
    finally:
        await client.close()
        await server.close()


async def test_errors_are_typed_with_their_codes() -> None:
    server, client = await pair()

    async def quota(req: Request) -> None:
        raise HandlerError("E_QUOTA", "over quota")

    async def slow(req: Request) -> None:
        await asyncio.sleep(5)

    server.on_request("quota", quota)
    server.on_request("slow", slow)
    try:
        with pytest.raises(RemoteError) as handler:
            await client.request("quota", to="server")
        assert (handler.value.code, handler.value.system) == ("E_QUOTA", False)
        with pytest.raises(errors.NoHandler) as none:
            await client.request("missing", to="server")
        assert none.value.system
        started = time.monotonic()
        with pytest.raises(Timeout):
            await client.request("slow", to="server", timeout=0.2)
        # The caller's bound, not the handler's 5 s (generous for a loaded machine).
        assert time.monotonic() - started < 2
    finally:
        await client.close(grace=0.1)
        await server.close(grace=0.1)


async def test_ticks_reach_one_or_all() -> None:
    server, client = await pair()
    got: asyncio.Queue[str] = asyncio.Queue()

    async def note(req: Request) -> None:
        await got.put(f"{req.data} from {req.sender}")

    server.on_tick("note", note)
    try:
        await client.tick("note", "one", to="server")
        assert await client.tick_all("note", "all", where={"role": "worker"}) == 1
        assert await asyncio.wait_for(got.get(), 5) == "one from client"
        assert await asyncio.wait_for(got.get(), 5) == "all from client"
    finally:
        await client.close()
        await server.close()


async def test_a_stream_of_many_items_within_a_small_window() -> None:
    server, client = await pair()
    ahead = 0
    most_ahead = 0

    async def count(req: Request) -> AsyncIterator[int]:
        nonlocal ahead, most_ahead
        for i in range(int(req.data)):
            ahead += 1
            most_ahead = max(most_ahead, ahead)
            yield i

    server.on_stream("count", count)
    try:
        items = []
        async for item in client.stream("count", 3000, to="server", window=16):
            ahead -= 1
            items.append(item)
            if len(items) % 500 == 0:
                await asyncio.sleep(0.01)  # a slow reader: the sender must wait for credit
        assert items == list(range(3000))
        # The sender never ran more than the window (plus the one it is yielding) ahead.
        assert most_ahead <= 17, most_ahead
    finally:
        await client.close()
        await server.close()


async def test_an_upload_and_a_stream_cancelled_by_its_caller() -> None:
    server, client = await pair()
    stopped = asyncio.Event()

    async def upload(req: Request) -> int:
        assert req.body is not None
        return sum([len(item) async for item in req.body])

    async def forever(req: Request) -> AsyncIterator[int]:
        try:
            i = 0
            while True:
                yield i
                i += 1
                await asyncio.sleep(0.001)
        finally:
            stopped.set()

    server.on_upload("upload", upload)
    server.on_stream("forever", forever)
    try:
        chunks = [bytes(100_000)] * 40
        assert await client.upload("upload", None, chunks, to="server", raw_items=True) == 4_000_000
        async for item in client.stream("forever", None, to="server"):
            if item == 5:
                break
        await asyncio.wait_for(stopped.wait(), 5)
    finally:
        await client.close()
        await server.close()


async def test_a_silent_peer_is_declared_dead_and_its_calls_fail() -> None:
    server = Node(id="server", heartbeat_ms=100)
    client = Node(id="client", heartbeat_ms=100)
    hang = asyncio.Event()

    async def wait(req: Request) -> None:
        await hang.wait()

    server.on_request("wait", wait)
    address = await server.bind("tcp://127.0.0.1:0")
    await client.connect(address)
    call = asyncio.ensure_future(client.request("wait", to="server", timeout=30))
    await asyncio.sleep(0.2)
    # The server goes silent without a goodbye: its tasks stop, its socket stays open.
    for task in list(server._tasks):
        task.cancel()
    started = time.monotonic()
    with pytest.raises(PeerGone):
        await call
    # 2.5 heartbeats of 100 ms; generous for a loaded machine, far below the 30 s timeout.
    assert time.monotonic() - started < 5
    await client.close(grace=0.1)
    hang.set()
    server._ctx.destroy(linger=0)


async def test_close_drains_what_is_in_flight() -> None:
    server, client = await pair()

    async def work(req: Request) -> str:
        await asyncio.sleep(0.3)
        return "done"

    server.on_request("work", work)
    call = asyncio.ensure_future(client.request("work", to="server"))
    await asyncio.sleep(0.05)
    await server.close(grace=5)
    assert await call == "done"
    # The server said goodbye: the client forgets it as the goodbye arrives, not after
    # heartbeats (2.5 s); the bound is generous for a loaded machine yet below that.
    deadline = time.monotonic() + 2.0
    while any(p.id == "server" for p in client.peers()):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await client.close()


async def test_a_client_joins_again_after_the_server_restarts() -> None:
    server, client = await pair()
    address = server.address
    assert address is not None
    await server.close()
    again = Node(id="server", heartbeat_ms=100)
    again.on_request("echo", echo)
    await again.bind(address)
    try:
        deadline = time.monotonic() + 10  # the backoff reaches 2 s; a generous bound
        # Joined to the new process (the old one's goodbye may still be on its way).
        while not any(p.instance == again.instance for p in client.peers()):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert await client.request("echo", "back", to="server") == "back"
    finally:
        await client.close()
        await again.close()


async def test_curve_with_an_allow_list() -> None:
    keys = KeyPair.generate()
    allowed = KeyPair.generate()
    server = Node(id="server", key=keys)
    server.on_request("echo", echo)
    address = await server.bind("tcp://127.0.0.1:0", allow=[allowed.public])
    good = Node(id="good", key=allowed)
    other = Node(id="other", connect_timeout=0.5)
    try:
        await good.connect(address, server_key=keys.public)
        assert await good.request("echo", "s", to="server") == "s"
        with pytest.raises(ConnectFailed):
            await other.connect(address, server_key=keys.public)
        with pytest.raises(ConnectFailed):
            await other.connect(address, server_key=KeyPair.generate().public)
    finally:
        await good.close()
        await other.close()
        await server.close()


async def test_a_duplicate_id_is_refused() -> None:
    server, client = await pair()
    twin = Node(id="client")
    try:
        assert server.address is not None
        with pytest.raises(errors.DuplicateId):
            await twin.connect(server.address)
    finally:
        await twin.close()
        await client.close()
        await server.close()
