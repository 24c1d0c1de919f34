"""A Python node serving demo handlers, the counterpart of ``zeronode node``:
``python -m zeronode.demo --bind tcp://127.0.0.1:0 --id py-node``.

Handlers: ``echo`` (the payload and metadata back, untouched), ``ping`` (``"pong"``),
``delay`` (waits N ms, returns N), ``fail`` (answers the handler error ``{"code",
"message"}`` it is given), ``count`` (streams 1..N, or ``{"n", "every_ms", "size"}``),
``upload`` (counts a streamed body's items and bytes), ``whoami`` (the caller's id and
route); every tick is printed as ``tick EVENT from ORIGIN``. Prints ``listening on
ADDR``, and closes gracefully on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

from . import HandlerError, KeyPair, Node, Request, Response


def _option(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    parsed: Any = value
    if value in ("true", "false"):
        parsed = value == "true"
    else:
        try:
            parsed = int(value)
        except ValueError:
            try:
                parsed = float(value)
            except ValueError:
                parsed = value
    return key, parsed


def register(node: Node) -> None:
    """Registers the demo handlers on ``node``."""

    async def echo(req: Request) -> Response:
        return Response(req.payload, dict(req.meta))

    async def ping(req: Request) -> str:
        return "pong"

    async def delay(req: Request) -> Any:
        await asyncio.sleep(float(req.data) / 1000)
        return req.data

    async def fail(req: Request) -> None:
        data = req.data or {}
        raise HandlerError(str(data.get("code", "HANDLER_ERROR")), str(data.get("message", "")))

    async def count(req: Request) -> AsyncIterator[Any]:
        data = req.data
        n, every, size = (
            (data, 0, 0)
            if isinstance(data, int)
            else (
                int(data.get("n", 0)),
                float(data.get("every_ms", 0)),
                int(data.get("size", 0)),
            )
        )
        sent = 0
        try:
            for i in range(1, n + 1):
                if every:
                    await asyncio.sleep(every / 1000)
                yield bytes(size) if size else i
                sent += 1
        except (asyncio.CancelledError, GeneratorExit):
            # What the conformance suite reads: the caller's cancel reached the handler.
            print(f"stream count cancelled after {sent}", flush=True)
            raise

    async def upload(req: Request) -> dict[str, int]:
        items, size = 0, 0
        assert req.body is not None
        async for item in req.body:
            items += 1
            size += len(item)
        return {"items": items, "bytes": size}

    async def whoami(req: Request) -> dict[str, Any]:
        route = req.route
        return {
            "sender": req.sender,
            "origin": req.origin,
            "via": route.via if route else [],
            "budget_ms": None if req.remaining() is None else int((req.remaining() or 0) * 1000),
        }

    async def tick(req: Request) -> None:
        print(f"tick {req.event} from {req.origin}", flush=True)

    node.on_tick("*", tick)
    node.on_request("echo", echo)
    node.on_request("ping", ping)
    node.on_request("delay", delay)
    node.on_request("fail", fail)
    node.on_request("whoami", whoami)
    node.on_stream("count", count)
    node.on_upload("upload", upload)


async def main(argv: list[str]) -> None:
    """Runs the demo node until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m zeronode.demo")
    parser.add_argument("--id")
    parser.add_argument("--bind")
    parser.add_argument("--connect", action="append", default=[])
    parser.add_argument("--server-key")
    parser.add_argument("--key", help="a key file written by `zeronode keygen`")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    args = parser.parse_args(argv)
    key = KeyPair.load(args.key) if args.key else None
    node = Node(
        id=args.id,
        options=dict(_option(o) for o in args.option),
        key=key,
        heartbeat_ms=args.heartbeat_ms,
    )
    register(node)
    if args.bind:
        address = await node.bind(args.bind)
        print(f"listening on {address}", flush=True)
    for address in args.connect:
        peer = await node.connect(address, server_key=args.server_key)
        print(f"joined {peer}", flush=True)
    print(f"node {node.id} ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await node.close(grace=args.grace)
    print("closed", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
