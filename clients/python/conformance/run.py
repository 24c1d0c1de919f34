"""The conformance suite: named cases run across processes in three directions.

- ``py_to_rust``: a Python caller (this process) calls a Rust node (``zeronode node``);
- ``rust_to_py``: a Rust caller (the ``zeronode request|stream|tick`` commands) calls a
  Python node (``python -m zeronode.demo``);
- ``py_router_py``: a Python caller calls a Python node through a Rust router
  (``zeronode node --router``), neither joined to the other.

A case left out of a direction is listed with its reason in ``left_out.json``, which this
runner reads and prints; a case neither run nor listed fails the suite. Usage::

    python clients/python/conformance/run.py [--bin target/debug/zeronode] [CASE ...]

Exit status 0 when every case that is not left out passes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zeronode
from zeronode import errors

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DIRECTIONS = ("py_to_rust", "rust_to_py", "py_router_py")
# Every wait below is bounded; the bounds are generous (a loaded CI machine) and say why.
READY_S = 20.0  # a process printing its address (a debug build starting cold)


class Failure(Exception):
    """A call's failure, normalized: ``kind`` is timeout, peer_left, handler, system or
    connect; ``code`` the error code when there is one."""

    def __init__(
        self, kind: str, code: str = "", text: str = "", fields: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{kind} {code} {text}".strip())
        self.kind = kind
        self.code = code
        self.fields = fields or {}


class Proc:
    """A node process whose stdout lines are collected."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = argv
        self.lines: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.address = ""
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> Proc:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = asyncio.ensure_future(self._read())
        line = await self.wait_for(r"listening on (\S+)", READY_S)
        m = re.search(r"listening on (\S+)", line)
        assert m is not None
        self.address = m.group(1)
        await self.wait_for(r"ready", READY_S)
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip())

    async def wait_for(self, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if re.search(pattern, line):
                    return line
            if self.proc is not None and self.proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name}: no line {pattern!r} in {self.lines[-20:]}")

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)

    async def exit_code(self, timeout: float) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        if self._reader is not None:
            await asyncio.wait([self._reader], timeout=2)


@dataclass
class World:
    """The processes of one case and where to reach them."""

    binary: str
    keydir: str
    procs: list[Proc] = field(default_factory=list)

    def rust(self, name: str, *args: str) -> Proc:
        argv = [self.binary, "node", "--id", name, "--bind", "tcp://127.0.0.1:0", "-v"]
        proc = Proc(name, argv + list(args))
        self.procs.append(proc)
        return proc

    def python(self, name: str, *args: str) -> Proc:
        argv = [sys.executable, "-m", "zeronode.demo", "--id", name, *args]
        proc = Proc(name, argv)
        self.procs.append(proc)
        return proc

    async def close(self) -> None:
        for proc in self.procs:
            await proc.stop()


@dataclass
class Mesh:
    """A case's topology: where the caller connects, the server process and its id."""

    entry: str
    server: Proc
    server_id: str
    role: str  # the server's "role" option
    server_kind: str  # "rust" or "python"
    server_key: str | None = None


async def build(world: World, direction: str, routers: int = 0, curve: bool = False) -> Mesh:
    """Starts the server (and routers) of ``direction``; ``routers`` adds that many Rust
    routers in a chain between the caller and the server."""
    key_args: list[str] = []
    pub: str | None = None
    if curve:
        keyfile = os.path.join(world.keydir, "server.key")
        if not os.path.exists(keyfile):
            await run_cli(world.binary, ["keygen", keyfile])
        key_args, pub = ["--key", keyfile], keyfile + ".pub"
    if direction == "py_router_py":
        routers = max(routers, 1)
    chain: list[Proc] = []
    for i in range(routers):
        args = ["--router", *(key_args if i == 0 else [])]
        if chain:
            args += ["-c", chain[-1].address]
        chain.append(await world.rust(f"router-{'ab'[i]}", *args).start())
    if direction == "py_to_rust":
        server_args = ["-o", "role=rust"]
        if chain:
            server_args += ["-c", chain[-1].address]
        elif curve:
            server_args += key_args
        server = await world.rust("server", *server_args).start()
        kind, role = "rust", "rust"
    else:
        server_args = ["--bind", "tcp://127.0.0.1:0", "-o", "role=py"]
        if chain:
            server_args += ["--connect", chain[-1].address]
            if curve and len(chain) == 1 and pub:
                server_args += ["--server-key", pub]
        elif curve:
            server_args += key_args
        server = await world.python("server", *server_args).start()
        kind, role = "python", "py"
    entry = chain[0].address if chain else server.address
    # A node joined to a router is known to the router once its handshake is done, which
    # `ready` follows: nothing to wait for.
    return Mesh(entry, server, "server", role, kind, pub)


async def run_cli(binary: str, args: list[str], timeout: float = 60.0) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        binary, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode(), err.decode()


# ---- callers ------------------------------------------------------------------------


class PyCaller:
    """The Python package as the caller."""

    def __init__(self) -> None:
        self.node = zeronode.Node(id="caller", heartbeat_ms=500, connect_timeout=3.0)

    async def connect(self, mesh: Mesh, server_key: str | None = None) -> None:
        try:
            await self.node.connect(mesh.entry, server_key=server_key or mesh.server_key)
        except (errors.ZeronodeError, asyncio.TimeoutError) as e:
            raise Failure("connect", text=str(e)) from None

    async def close(self) -> None:
        await self.node.close(grace=1.0)

    @staticmethod
    def _failure(e: BaseException) -> Failure:
        if isinstance(e, errors.Timeout | errors.HopTimeout | errors.DeadlineExceeded):
            return Failure("timeout", getattr(e, "code", ""))
        if isinstance(e, errors.PeerGone | errors.PeerLeft):
            return Failure("peer_left", getattr(e, "code", ""))
        if isinstance(e, errors.RemoteError):
            fields = {"peer": e.peer, "hop": e.hop, "timeout_ms": e.timeout_ms, "limit": e.limit}
            return Failure("system" if e.system else "handler", e.code, e.message, fields)
        return Failure("other", type(e).__name__, str(e))

    async def request(self, event: str, data: Any, **kw: Any) -> tuple[Any, dict[str, Any]]:
        try:
            reply = await self.node.call(event, data, **kw)
        except errors.ZeronodeError as e:
            raise self._failure(e) from None
        return zeronode.unpack(reply.payload), dict(reply.meta)

    async def stream(
        self, event: str, data: Any, stop_after: int | None = None, **kw: Any
    ) -> list[Any]:
        items: list[Any] = []
        try:
            async for item in self.node.stream(event, data, **kw):
                items.append(item)
                if stop_after is not None and len(items) >= stop_after:
                    break
        except errors.ZeronodeError as e:
            raise self._failure(e) from None
        return items

    async def tick_all(self, event: str, data: Any, where: dict[str, Any]) -> None:
        await self.node.tick_all(event, data, where=where)


class RustCaller:
    """The ``zeronode`` command as the caller: one process per call."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.entry = ""
        self.server_key: str | None = None

    async def connect(self, mesh: Mesh, server_key: str | None = None) -> None:
        self.entry = mesh.entry
        self.server_key = server_key or mesh.server_key

    async def close(self) -> None:
        return None

    def _common(self, to: str | None, where: dict[str, Any] | None) -> list[str]:
        args = ["-c", self.entry]
        if self.server_key:
            args += ["--server-key", self.server_key]
        if to is not None:
            args += ["--to", to]
        if where is not None:
            args += ["--any"]
            for k, v in where.items():
                args += ["-f", f"{k}={v}"]
        return args

    @staticmethod
    def _failure(err: str) -> Failure:
        if "timed out" in err:
            return Failure("timeout", text=err)
        if "left before answering" in err:
            return Failure("peer_left", text=err)
        m = re.search(r"remote handler failed: ([A-Z_a-z0-9]+):", err)
        if m:
            return Failure("handler", m.group(1), err)
        m = re.search(r"\(([A-Z_]+)\)", err)
        if m:
            return Failure("system", m.group(1), err)
        return Failure("other", text=err)

    async def request(
        self,
        event: str,
        data: Any,
        to: str | None = None,
        where: dict[str, Any] | None = None,
        timeout: float = 10.0,
        meta: dict[str, str] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        args = ["request", *self._common(to, where), "--timeout", str(int(timeout * 1000))]
        for k, v in (meta or {}).items():
            args += ["-m", f"{k}={v}"]
        rc, out, err = await run_cli(self.binary, [*args, event, json.dumps(data)])
        if rc != 0:
            raise self._failure(err)
        got_meta = dict(
            line[5:].split("=", 1) for line in err.splitlines() if line.startswith("meta ")
        )
        return json.loads(out), got_meta

    async def stream(
        self,
        event: str,
        data: Any,
        to: str | None = None,
        timeout: float = 60.0,
        stop_after: int | None = None,
    ) -> list[Any]:
        args = ["stream", *self._common(to, None), "--timeout", str(int(timeout * 1000))]
        rc, out, err = await run_cli(self.binary, [*args, event, json.dumps(data)])
        items = [json.loads(line) for line in out.splitlines() if line.strip()]
        if rc != 0 and stop_after is None:
            raise self._failure(err)
        return items

    async def tick_all(self, event: str, data: Any, where: dict[str, Any]) -> None:
        args = ["tick", "-c", self.entry, "--all"]
        for k, v in where.items():
            args += ["-f", f"{k}={v}"]
        rc, _, err = await run_cli(self.binary, [*args, event, json.dumps(data)])
        if rc != 0:
            raise self._failure(err)


Caller = PyCaller | RustCaller


# ---- cases ------------------------------------------------------------------------------

Case = Callable[[World, str, Caller], Awaitable[None]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


async def joined(world: World, direction: str, caller: Caller, **kw: Any) -> Mesh:
    mesh = await build(world, direction, **kw)
    await caller.connect(mesh)
    return mesh


@case
async def echo(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    data, meta = await caller.request("echo", "hi", to=mesh.server_id, meta={"k": "v"})
    assert data == "hi", data
    assert meta.get("k") == "v", meta


@case
async def large_payload(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    # Over 4 KiB: a payload frame of its own. The command line bounds one argument to
    # 128 KiB, so the Rust caller sends 100 kB; the Python caller sends 1 MiB.
    size = 100_000 if isinstance(caller, RustCaller) else 1 << 20
    text = "z" * size
    data, _ = await caller.request("echo", text, to=mesh.server_id)
    assert data == text, len(data)


@case
async def by_filter_any(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    data, _ = await caller.request("ping", None, where={"role": mesh.role})
    assert data == "pong", data


@case
async def no_handler(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    try:
        await caller.request("no-such-event", None, to=mesh.server_id)
    except Failure as f:
        assert (f.kind, f.code) == ("system", "NO_HANDLER"), f
    else:
        raise AssertionError("answered")


@case
async def tick_all(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    await caller.tick_all("note", "x", where={"role": mesh.role})
    await mesh.server.wait_for(r"tick note from", 5.0)


@case
async def deadline_exceeded(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    started = time.monotonic()
    try:
        await caller.request("delay", 3000, to=mesh.server_id, timeout=0.5)
    except Failure as f:
        assert f.kind == "timeout", f
    else:
        raise AssertionError("answered")
    # The caller's bound, not the handler's 3 s (generous: a process start for the CLI).
    assert time.monotonic() - started < 2.5


@case
async def handler_error_code(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    data: Any
    if mesh.server_kind == "rust":
        event, data, code = "delay", "not a number", "INVALID_ARGUMENT"
    else:
        event, data, code = "fail", {"code": "E_QUOTA", "message": "over"}, "E_QUOTA"
    try:
        await caller.request(event, data, to=mesh.server_id)
    except Failure as f:
        assert (f.kind, f.code) == ("handler", code), f
    else:
        raise AssertionError("answered")


@case
async def stream_1000_items(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    items = await caller.stream("count", 1000, to=mesh.server_id)
    assert items == list(range(1, 1001)), items[:5]


@case
async def upload_16_mib(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    assert isinstance(caller, PyCaller)
    chunk = bytes(64 * 1024)
    got = await caller.node.upload(
        "upload", "blob", [chunk] * 256, to=mesh.server_id, raw_items=True
    )
    assert got == {"items": 256, "bytes": 16 << 20}, got


@case
async def stream_cancelled_by_caller(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    slow = {"n": 100_000, "every_ms": 5}
    if isinstance(caller, PyCaller):
        items = await caller.stream("count", slow, to=mesh.server_id, stop_after=10)
    else:
        items = await caller.stream("count", slow, to=mesh.server_id, timeout=0.5, stop_after=1)
    assert items[:3] == [1, 2, 3], items[:3]
    if mesh.server_kind == "python":
        await mesh.server.wait_for(r"stream count cancelled", 5.0)
    else:
        assert isinstance(caller, PyCaller)
        deadline = time.monotonic() + 5.0
        while True:
            described = await caller.node.describe(mesh.server_id)
            count = [e for e in described["events"] if e["event"] == "count"]
            if count and count[0]["requests"]["cancelled"] >= 1:
                break
            assert time.monotonic() < deadline, count
            await asyncio.sleep(0.1)


@case
async def peer_killed_mid_request(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    started = time.monotonic()
    call = asyncio.ensure_future(caller.request("delay", 20_000, to=mesh.server_id, timeout=30))
    await asyncio.sleep(0.5)
    mesh.server.signal(signal.SIGKILL)
    try:
        await call
    except Failure as f:
        assert f.kind == "peer_left", f
    else:
        raise AssertionError("answered")
    # Dead after 2.5 heartbeat intervals of 1 s (generous bound: 10 s, not the 30 s timeout).
    assert time.monotonic() - started < 10, time.monotonic() - started


@case
async def drain_on_sigterm(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    call = asyncio.ensure_future(caller.request("delay", 1500, to=mesh.server_id, timeout=10))
    await asyncio.sleep(0.4)
    mesh.server.signal(signal.SIGTERM)
    data, _ = await call
    assert data == 1500, data
    assert await mesh.server.exit_code(10.0) == 0


@case
async def through_two_routers(world: World, direction: str, caller: Caller) -> None:
    mesh = await build(world, direction, routers=2)
    await caller.connect(mesh)
    # The server joined router-b after router-b joined router-a: a request by id finds it.
    data, _ = await caller.request("echo", "far", to=mesh.server_id)
    assert data == "far", data
    if mesh.server_kind == "python":
        seen, _ = await caller.request("whoami", None, to=mesh.server_id)
        assert seen["via"] == ["router-a", "router-b"], seen


@case
async def curve(world: World, direction: str, caller: Caller) -> None:
    mesh = await build(world, direction, curve=True)
    await caller.connect(mesh)
    data, _ = await caller.request("echo", "secret", to=mesh.server_id)
    assert data == "secret", data


@case
async def curve_wrong_key(world: World, direction: str, caller: Caller) -> None:
    mesh = await build(world, direction, curve=True)
    wrong = zeronode.KeyPair.generate().public
    try:
        await caller.connect(mesh, server_key=wrong)
        await caller.request("echo", "secret", to=mesh.server_id, timeout=2.0)
    except Failure as f:
        assert f.kind in ("connect", "other", "timeout"), f
    else:
        raise AssertionError("a wrong server key was let through")


@case
async def deadline_travels_as_budget(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    seen, _ = await caller.request("whoami", None, to=mesh.server_id, timeout=5.0)
    # What the handler has left: under the caller's 5 s, less the way there and a router's
    # margin (at most 50 ms); generous for a process start and a loaded machine.
    assert 3000 <= seen["budget_ms"] <= 5000, seen


@case
async def not_found_through_router(world: World, direction: str, caller: Caller) -> None:
    mesh = await build(world, direction, routers=1)
    await caller.connect(mesh)
    try:
        await caller.request("echo", "x", to="ghost", timeout=3.0)
    except Failure as f:
        if isinstance(caller, PyCaller):
            # The router's error reply, its fields as data.
            assert (f.kind, f.code) == ("system", "NOT_FOUND"), f
            assert f.fields.get("peer") == "ghost", f.fields
            assert f.fields.get("hop") == "router-a", f.fields
        else:
            assert "ghost" in str(f), f
    else:
        raise AssertionError("answered")


@case
async def payload_too_large(world: World, direction: str, caller: Caller) -> None:
    mesh = await joined(world, direction, caller)
    assert isinstance(caller, PyCaller)
    over = bytes((16 << 20) + 1)  # one byte over the default 16 MiB limit
    try:
        await caller.request("echo", over, to=mesh.server_id, raw=True, timeout=20.0)
    except Failure as f:
        assert (f.kind, f.code) == ("system", "PAYLOAD_TOO_LARGE"), f
        limit = f.fields.get("limit")
        assert limit is not None and limit.kind == "Payload", f.fields
        assert limit.numbers["size"] > limit.numbers["max"] == 16 << 20, limit
    else:
        raise AssertionError("a payload over the limit was served")


# ---- the runner ---------------------------------------------------------------------------


async def run_one(binary: str, name: str, direction: str, timeout: float = 90.0) -> str | None:
    """Runs one case in one direction: None when it passes, else why it failed."""
    with tempfile.TemporaryDirectory() as keydir:
        world = World(binary, keydir)
        caller: Caller = PyCaller() if direction != "rust_to_py" else RustCaller(binary)
        try:
            await asyncio.wait_for(CASES[name](world, direction, caller), timeout)
            return None
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        finally:
            await caller.close()
            await world.close()


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=str(ROOT / "target" / "debug" / "zeronode"))
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args(argv)
    left_out: dict[str, dict[str, str]] = json.loads((HERE / "left_out.json").read_text())
    unknown = set(left_out) - set(CASES)
    if unknown:
        print(f"left_out.json names cases that do not exist: {sorted(unknown)}")
        return 2
    names = args.cases or list(CASES)
    failed = 0
    results: list[tuple[str, str, str]] = []
    for name in names:
        for direction in DIRECTIONS:
            reason = left_out.get(name, {}).get(direction)
            if reason is not None:
                results.append((name, direction, f"left out: {reason}"))
                print(f"{name:28} {direction:13} left out: {reason}", flush=True)
                continue
            started = time.monotonic()
            why = await run_one(args.bin, name, direction)
            took = time.monotonic() - started
            verdict = "pass" if why is None else f"FAIL {why}"
            failed += why is not None
            results.append((name, direction, verdict))
            print(f"{name:28} {direction:13} {verdict} ({took:.1f}s)", flush=True)
    ran = sum(1 for r in results if not r[2].startswith("left out"))
    print(f"\n{ran - failed} of {ran} passed, {len(results) - ran} left out (left_out.json)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
