"""Micro-benchmark of one scripted turn's template rendering (the scripted hot path).

    .venv/bin/python bench/templates.py [--n 2000]

Prints the mean cost per ``ScriptedProvider.next_turn`` (wall-clock, and CPU time of the
calling process: what the worker's event loop pays) for three kinds of turn: plain data
(no renderer at all), linear templates (rendered in the worker's process), and templates
with a loop (one round trip to a render subprocess), next to rendering the same linear
templates directly with the sandbox, as the provider did before the pool existed.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from app.engine.base import HistoryItem, TurnContext
from app.engine.providers.sandbox import Renderer
from app.engine.providers.scripted import ScriptedProvider
from app.engine.providers.templates import TemplatePool

HISTORY = [HistoryItem("http.get", {"url": "u"}, "SUCCEEDED", {"status": 200, "body": "x" * 2_000})] * 3
CTX = TurnContext(
    run_id=1,
    depth=0,
    instructions="",
    input={"url": "http://127.0.0.1:8080/site/a", "n": 2, "tags": ["x", "y"]},
    memories=[{"key": "tz", "value": "Europe/Paris", "tags": []}],
    tools=[],
    history=HISTORY,
    turn=0,
)
TURNS: dict[str, dict[str, Any]] = {
    "plain data": {"call": "http.get", "args": {"url": "http://127.0.0.1:8080/site/a"}},
    "linear": {
        "call": "http.get",
        "args": {"url": "{{ input.url }}?n={{ input.n + 1 }}", "s": "{{ results[-1].status }}"},
    },
    "loop (subprocess)": {
        "call": "http.get",
        "args": {"url": "{% for t in input.tags %}{{ t }}{% endfor %}"},
    },
}


async def main(n: int) -> None:
    pool = TemplatePool(size=2, timeout_ms=200, max_output_bytes=1_048_576)
    try:
        for name, turn in TURNS.items():
            provider = ScriptedProvider({"provider": "scripted", "steps": [turn]}, pool)
            for _ in range(20):  # warm: children started, templates compiled and cached
                await provider.next_turn(CTX)
            started, cpu = time.perf_counter(), time.process_time()
            for _ in range(n):
                await provider.next_turn(CTX)
            report(name, started, cpu, n)
    finally:
        await pool.aclose()
    renderer = Renderer()
    variables = {"input": CTX.input, "results": [h.result for h in HISTORY], "memories": [], "run": {}}
    args = TURNS["linear"]["args"]
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        renderer.render_tree(args, variables, "args")
    report("sandbox, in-process", started, cpu, n)


def report(name: str, started: float, cpu: float, n: int) -> None:
    wall_us = (time.perf_counter() - started) / n * 1e6
    cpu_us = (time.process_time() - cpu) / n * 1e6
    print(f"{name:>20}: {wall_us:8.1f} µs per turn (wall), {cpu_us:8.1f} µs of this process's CPU")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2_000)
    asyncio.run(main(parser.parse_args().n))
