"""The render subprocess of ``templates.TemplatePool``: ``python render_child.py
MAX_OUTPUT_BYTES MEMORY_BYTES CPU_LIMIT_MS``.

Reads length-prefixed JSON requests ``{"items": [[tree, where], ...], "v": variables}`` on
stdin and answers each with one frame: its CPU time so far (8 bytes, µs), then ``O`` + the
rendered list as JSON, or ``E`` + a message. It writes ``R`` (and its CPU time) once when
it is ready, so start-up never counts against a render's
time budget. The parent kills it on overrun; it holds no state worth keeping.

It also stops itself, so it never outlives a parent that died mid-render (a worker killed
with SIGKILL): it asks the kernel for SIGKILL when the parent exits (Linux), and exits when
one render uses ``CPU_LIMIT_MS`` of CPU time (a multiple of the parent's budget, so the
parent normally kills it first and reports the overrun).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
import time
from typing import Any, BinaryIO

if __package__:  # imported as part of the app (tests, type checks)
    from app.engine.providers.sandbox import Renderer, RenderError
else:  # run as a script by the pool: only the sandbox, not the app package's heavy imports
    from sandbox import Renderer, RenderError  # type: ignore[import-not-found,no-redef]

_HEADER = 4


def _cpu_stamp() -> bytes:
    """This process's CPU time so far (µs), sent first in every message: the parent times
    a render from it without reading /proc unless the render is slow."""
    return int(time.process_time() * 1e6).to_bytes(8, "big")


def _answer(job: dict[str, Any], renderer: Renderer) -> bytes:
    try:
        variables = job["v"]
        rendered = [renderer.render_tree(tree, variables, where) for tree, where in job["items"]]
        return b"O" + renderer.encode(rendered).encode()
    except RenderError as exc:
        return b"E" + str(exc).encode()
    except MemoryError:
        return b"E" + b"a template ran out of memory"
    except RecursionError:
        return b"E" + b"a template nested too deeply"


def serve(inp: BinaryIO, out: BinaryIO, renderer: Renderer, *, cpu_limit_s: float = 0.0) -> None:
    out.write(b"R" + _cpu_stamp())
    out.flush()
    while True:
        header = inp.read(_HEADER)
        if len(header) < _HEADER:
            return  # the parent closed our stdin: done
        body = inp.read(int.from_bytes(header, "big"))
        if cpu_limit_s:
            signal.setitimer(signal.ITIMER_PROF, cpu_limit_s)  # CPU time of this process
        reply = _answer(json.loads(body), renderer)
        if cpu_limit_s:
            signal.setitimer(signal.ITIMER_PROF, 0)
        frame = _cpu_stamp() + reply
        out.write(len(frame).to_bytes(_HEADER, "big") + frame)
        out.flush()


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main() -> None:
    max_output_bytes, memory_bytes, cpu_limit_ms = (int(arg) for arg in sys.argv[1:4])
    cpu_limit_s = cpu_limit_ms / 1000
    _die_with_parent()
    signal.signal(signal.SIGPROF, lambda _signum, _frame: os._exit(3))
    # The protocol owns the real stdout; anything printed by accident goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    renderer = Renderer(max_len=max_output_bytes)
    renderer.render_tree("{{ 1 }}", {}, "warm-up")  # import Jinja's lazy bits before the limit
    if memory_bytes:  # 0: no limit
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            memory_bytes = min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, hard))
    serve(sys.stdin.buffer, out, renderer, cpu_limit_s=cpu_limit_s)


if __name__ == "__main__":
    main()
