"""Rendering scripted templates off the worker's event loop, under a time budget.

A template can burn CPU in C (a huge ``format``, a big ``pow``) or in a tight Jinja loop, and
Python cannot interrupt either inside the process. So every render goes to a small pool of
subprocesses (``render_child.py``): the worker's event loop only writes a request and awaits
the answer, so other runs keep going, and a child that overruns
``settings.template_timeout_ms`` is killed and a fresh one takes its place. The sandbox
(``sandbox.py``) stops allocation bombs early; the child also runs under an address-space
limit, so what slips past the sandbox ends in ``MemoryError``, not in the OOM killer.

Requests and answers are length-prefixed JSON frames on the child's stdin/stdout. Compiled
templates are cached in each child, so the steady-state cost of a render is one round trip
(see README "Scripted templates" for the measured figure). Children are started lazily:
a worker whose agents never use templates never starts one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.engine.base import ProviderError
from app.engine.providers.sandbox import Renderer, RenderError

# The child's address-space limit: room for the interpreter and the imports (about 100 MiB
# of mappings) plus many times the output cap, far below what could hurt the machine.
MIN_CHILD_MEMORY_BYTES = 512 * 1024 * 1024
CHILD_START_TIMEOUT_S = 60.0
# The budget is CPU time; a render may take this many times the budget in wall-clock time
# (waiting for a core on a busy machine), and at least MIN_WALL_S, but never longer.
WALL_FACTOR = 10
MIN_WALL_S = 2.0
_HEADER = 4
_STAMP = 8  # every message from the child starts with its CPU time so far, in µs
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used, from /proc; None where unavailable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (fields 14, 15)


def _cpu_used_s(pid: int, since: float) -> float | None:
    now = _cpu_s(pid)
    return None if now is None else now - since


def child_memory_bytes(max_output_bytes: int) -> int:
    return max(MIN_CHILD_MEMORY_BYTES, 64 * max_output_bytes)


@dataclass
class _Child:
    proc: asyncio.subprocess.Process
    renders: int = 0
    cpu_s: float = 0.0  # CPU time the child reported with its last message


@dataclass
class TemplatePool:
    """Renders scripted templates for one worker (bound to the event loop that uses it)."""

    size: int
    timeout_ms: int
    max_output_bytes: int
    # Render linear-time templates in this process (sandbox.is_linear); off only in tests
    # that check both paths agree.
    inline_linear: bool = True
    _inline: Renderer | None = None
    _idle: list[_Child] = field(default_factory=list)
    _slots: asyncio.Semaphore | None = None
    _live: int = 0  # children started and not yet discarded (idle or busy)
    _spawning: int = 0
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _closed: bool = False
    # Counters for tests and logs: children started, and renders killed for overrunning.
    started: int = 0
    killed: int = 0

    async def render(self, items: list[tuple[Any, str]], variables: dict[str, Any]) -> list[Any]:
        """Render each (template tree, where) with ``variables``; raises ``ProviderError``."""
        if self._closed:
            raise ProviderError("the template renderer is shut down")
        if self._inline is None:
            self._inline = Renderer(max_len=self.max_output_bytes)
        inline = self._inline
        if self.inline_linear and all(inline.all_linear(tree) for tree, _ in items):
            try:
                rendered = [inline.render_tree(tree, variables, where) for tree, where in items]
                inline.encode(rendered, streaming=False)  # the output cap, as in the subprocess
            except RenderError as exc:
                raise ProviderError(str(exc)) from None
            return rendered
        try:
            payload = json.dumps({"items": items, "v": variables}, ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            raise ProviderError(f"template variables are not JSON: {exc}") from exc
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        async with self._slots:
            child = await self._acquire()
            healthy = False
            try:
                reply = await self._exchange(child, payload, items)
                healthy = True
            finally:
                if healthy and not self._closed and len(self._idle) < self.size:
                    self._idle.append(child)
                else:  # overrun, crash, or cancelled mid-render: its state is unknown
                    self._discard(child)
                    self._fill_soon()
        kind, body = reply[:1], reply[1:]
        if kind == b"O":
            result: list[Any] = json.loads(body)
            return result
        raise ProviderError(body.decode("utf-8", "replace"))

    async def _exchange(self, child: _Child, payload: bytes, items: list[tuple[Any, str]]) -> bytes:
        assert child.proc.stdin is not None and child.proc.stdout is not None
        where = items[0][1] if items else "template"
        budget_s = self.timeout_ms / 1000
        # The budget starts once a started child has the request: start-up never counts.
        # Its CPU time then is what it reported with its last answer (it has been idle since).
        cpu_at_start = child.cpu_s
        started = time.monotonic()
        wall_deadline = started + max(WALL_FACTOR * budget_s, MIN_WALL_S)
        reply = asyncio.ensure_future(self._send_and_read(child, payload))
        try:
            done, _ = await asyncio.wait({reply}, timeout=budget_s)  # most renders end here
            while not done:
                # Judged by the child's CPU time where /proc has it (else by the clock), so a
                # render that is only waiting for a core on a busy machine is not killed; the
                # wall-clock ceiling still bounds how long anyone waits.
                now = time.monotonic()
                used_s = _cpu_used_s(child.proc.pid, cpu_at_start)
                left_s = budget_s - (now - started if used_s is None else used_s)
                if left_s <= 0 or now >= wall_deadline:
                    self.killed += 1
                    raise ProviderError(
                        f"{where}: rendering took longer than the template budget of {self.timeout_ms} ms"
                    )
                done, _ = await asyncio.wait({reply}, timeout=min(max(left_s, 0.005), wall_deadline - now))
            frame = reply.result()
            child.cpu_s = int.from_bytes(frame[:_STAMP], "big") / 1e6
            child.renders += 1
            return frame[_STAMP:]
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise ProviderError(
                f"{where}: the template renderer died ({type(exc).__name__}; out of memory?)"
            ) from None
        finally:
            # Not awaited: that would swallow a cancellation of this task. The child is
            # discarded by the caller, so the half-done exchange has nothing left to touch.
            if not reply.cancel() and not reply.cancelled():
                reply.exception()  # mark a late failure as seen (no "never retrieved" log)

    @staticmethod
    async def _send_and_read(child: _Child, payload: bytes) -> bytes:
        assert child.proc.stdin is not None and child.proc.stdout is not None
        child.proc.stdin.write(len(payload).to_bytes(_HEADER, "big") + payload)
        await child.proc.stdin.drain()
        size = int.from_bytes(await child.proc.stdout.readexactly(_HEADER), "big")
        return await child.proc.stdout.readexactly(size)

    # -- children -----------------------------------------------------------------------

    async def _acquire(self) -> _Child:
        self._fill_soon()  # the first render warms up the whole pool
        while not self._idle:
            if not self._spawning:
                return await self._spawn()  # none on the way (a start failed): try here
            await asyncio.sleep(0.005)  # one is starting in the background: take that one
        return self._idle.pop()

    async def _spawn(self) -> _Child:
        self._spawning += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                # Run as a script, next to sandbox.py: importing it through the app package
                # would pull in httpx and pydantic and triple the start-up time.
                str(Path(__file__).with_name("render_child.py")),
                str(self.max_output_bytes),
                str(child_memory_bytes(self.max_output_bytes)),
                # The child's own limit, for when we are gone: well past our budget.
                str(self.timeout_ms * WALL_FACTOR),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            child = _Child(proc)
            self._live += 1
            assert proc.stdout is not None
            try:
                async with asyncio.timeout(CHILD_START_TIMEOUT_S):
                    ready = await proc.stdout.readexactly(1 + _STAMP)
            except (TimeoutError, asyncio.IncompleteReadError):
                ready = b""
            if ready[:1] == b"R":
                child.cpu_s = int.from_bytes(ready[1:], "big") / 1e6
            else:
                self._discard(child)
                raise ProviderError("the template renderer did not start")
        finally:
            self._spawning -= 1
        self.started += 1
        return child

    def _fill_soon(self) -> None:
        """Start children in the background up to ``size``, so none is started mid-render."""
        for _ in range(self.size - self._live - self._spawning):
            self._track(self._spawn_idle())

    async def _spawn_idle(self) -> None:
        try:
            child = await self._spawn()
        except ProviderError:
            return  # the next render tries again, and reports it
        if self._closed or len(self._idle) >= self.size:
            self._discard(child)
        else:
            self._idle.append(child)

    def _discard(self, child: _Child) -> None:
        self._live -= 1
        with contextlib.suppress(ProcessLookupError):
            child.proc.kill()
        self._track(self._reap(child))

    def _track(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _reap(child: _Child) -> None:
        if child.proc.stdin is not None:
            child.proc.stdin.close()
        with contextlib.suppress(Exception):
            await child.proc.wait()

    async def aclose(self) -> None:
        """Stop every child; renders still in flight fail."""
        self._closed = True
        while self._idle or self._tasks:
            idle, self._idle = self._idle, []
            for child in idle:
                self._discard(child)
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
