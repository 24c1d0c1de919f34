"""A Python model worker: streams generated tokens to whoever asks, through a Rust router.

    python worker.py --connect tcp://127.0.0.1:7700

It joins the router with the option ``role=llm``; a caller anywhere behind the router asks
``generate`` by filter (``zeronode stream --any -f role=llm generate '{"prompt": ...}'``)
and receives one item per token as it is produced, at the pace the caller reads (credit).
The "model" here is a stand-in that echoes the prompt word by word, then counts; replace
``tokens`` with a real one (a `transformers` streamer, an `llama.cpp` callback, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterator

import zeronode


async def tokens(prompt: str, max_tokens: int) -> AsyncIterator[str]:
    """A stand-in model: the prompt back word by word, then numbered tokens."""
    words = prompt.split() or ["..."]
    for i in range(max_tokens):
        await asyncio.sleep(0.02)  # the model's per-token time
        yield words[i] if i < len(words) else f"token{i}"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connect", default="tcp://127.0.0.1:7700")
    parser.add_argument("--id", default="llm-worker-1")
    args = parser.parse_args()

    node = zeronode.Node(id=args.id, options={"role": "llm", "model": "stand-in"})

    async def generate(req: zeronode.Request) -> AsyncIterator[dict[str, object]]:
        data = req.data or {}
        prompt = str(data.get("prompt", ""))
        max_tokens = int(data.get("max_tokens", 16))
        async for i, token in _enumerate(tokens(prompt, max_tokens)):
            # One stream item per token; the caller's credit paces us.
            yield {"i": i, "token": token}

    node.on_stream("generate", generate)
    await node.connect(args.connect)
    print(f"worker {node.id} joined {args.connect}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await node.close()  # drains: streams in flight finish first


async def _enumerate(items: AsyncIterator[str]) -> AsyncIterator[tuple[int, str]]:
    i = 0
    async for item in items:
        yield i, item
        i += 1


if __name__ == "__main__":
    asyncio.run(main())
