"""What the Python package costs beside raw pyzmq, in the same run and the same process:

- requests of 100 B, 1 and 100 in flight: zeronode ``request`` against a raw asyncio pyzmq
  DEALER -> ROUTER echo (the same sockets the package uses, no envelope, no handshake);
- a stream of 64 KiB items: zeronode ``stream`` (credit, envelope) against raw pyzmq bulk
  (a ROUTER pushing the same items to a DEALER, no flow control).

    python clients/python/bench/bench.py [--rounds 3]

Each figure is the best of ``--rounds``; the ratio is zeronode over raw in the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator

import zmq
import zmq.asyncio

import zeronode

PAYLOAD = bytes(100)
ITEM = bytes(64 * 1024)


async def raw_requests(n: int, in_flight: int) -> float:
    ctx = zmq.asyncio.Context()
    server = ctx.socket(zmq.ROUTER)
    server.bind("tcp://127.0.0.1:0")
    address = server.getsockopt_string(zmq.LAST_ENDPOINT)
    client = ctx.socket(zmq.DEALER)
    client.connect(address)

    async def serve() -> None:
        while True:
            rid, body = await server.recv_multipart()
            await server.send_multipart([rid, body])

    task = asyncio.ensure_future(serve())
    started = time.perf_counter()
    for _ in range(in_flight):
        await client.send(PAYLOAD)
    sent = in_flight
    for _ in range(n):
        await client.recv()
        if sent < n:
            await client.send(PAYLOAD)
            sent += 1
    took = time.perf_counter() - started
    task.cancel()
    ctx.destroy(linger=0)
    return n / took


async def zn_requests(n: int, in_flight: int) -> float:
    server = zeronode.Node(id="bench-server")

    async def echo(req: zeronode.Request) -> zeronode.Response:
        return zeronode.Response(req.payload)

    server.on_request("echo", echo)
    address = await server.bind("tcp://127.0.0.1:0")
    client = zeronode.Node(id="bench-client")
    await client.connect(address)
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await client.request("echo", PAYLOAD, to="bench-server", raw=True)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    took = time.perf_counter() - started
    await client.close(grace=0.1)
    await server.close(grace=0.1)
    return n / took


async def raw_bulk(items: int) -> float:
    ctx = zmq.asyncio.Context()
    receiver = ctx.socket(zmq.ROUTER)
    receiver.bind("tcp://127.0.0.1:0")
    address = receiver.getsockopt_string(zmq.LAST_ENDPOINT)
    sender = ctx.socket(zmq.DEALER)  # a DEALER waits at its high-water mark, never drops
    sender.connect(address)
    await sender.send(b"go")
    await receiver.recv_multipart()
    started = time.perf_counter()

    async def push() -> None:
        for _ in range(items):
            await sender.send(ITEM, copy=False)

    task = asyncio.ensure_future(push())
    for _ in range(items):
        await receiver.recv_multipart(copy=False)
    took = time.perf_counter() - started
    await task
    ctx.destroy(linger=0)
    return items * len(ITEM) / took / 1e6


async def zn_stream(items: int) -> float:
    server = zeronode.Node(id="bench-server")

    async def gen(req: zeronode.Request) -> AsyncIterator[zeronode.Response]:
        for _ in range(items):
            yield zeronode.Response(ITEM)

    server.on_stream("gen", gen)
    address = await server.bind("tcp://127.0.0.1:0")
    client = zeronode.Node(id="bench-client")
    await client.connect(address)
    started = time.perf_counter()
    got = 0
    async for _ in client.stream("gen", None, to="bench-server", raw=True, timeout=600):
        got += 1
    took = time.perf_counter() - started
    assert got == items
    await client.close(grace=0.1)
    await server.close(grace=0.1)
    return items * len(ITEM) / took / 1e6


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--items", type=int, default=4_000)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for in_flight in (1, 100):
            n = args.requests // (10 if in_flight == 1 else 1)
            raw = await raw_requests(n, in_flight)
            zn = await zn_requests(n, in_flight)
            rows.setdefault(f"requests 100 B, {in_flight} in flight (req/s)", []).append((zn, raw))
        raw = await raw_bulk(args.items)
        zn = await zn_stream(args.items)
        rows.setdefault("stream of 64 KiB items (MB/s)", []).append((zn, raw))
    print(f"{'':44} {'zeronode':>10} {'raw pyzmq':>10} {'ratio':>6}")
    for name, results in rows.items():
        zn = max(r[0] for r in results)
        raw = max(r[1] for r in results)
        ratios = ", ".join(f"{z / r:.2f}" for z, r in results)
        print(f"{name:44} {zn:10.0f} {raw:10.0f} {zn / raw:6.2f}   (each round: {ratios})")


if __name__ == "__main__":
    asyncio.run(main())
