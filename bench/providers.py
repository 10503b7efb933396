"""What a remote provider turn costs the worker: CPU time of the event loop's thread per turn.

    .venv/bin/python bench/providers.py [--n 300] [--baseline REV]

A loopback fake of each vendor (tests/support/vendors.py, in its own thread, so its CPU is
not counted: ``time.thread_time`` of the caller only) answers every turn with the same small
answer. Measured, over one shared guarded client as in a worker:

- ``openai`` on the SDK, a whole answer and a streamed one (SSE, usage included);
- ``anthropic`` on the SDK, the same two;
- the hand-written chat-completions client it replaced, loaded from git at ``--baseline``
  (default ``main``) when that revision still has it: the same turns, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

from app.domain.policy import RiskClass
from app.engine.base import HistoryItem, ToolSpec, TurnContext
from app.engine.net import guarded_client, guarded_sdk_client
from app.engine.providers.anthropic import AnthropicProvider
from app.engine.providers.openai import OpenAIProvider
from app.settings import Settings
from tests.support.servers import serve_in_thread
from tests.support.vendors import (
    FakeVendor,
    anthropic_app,
    anthropic_text,
    openai_app,
    openai_text,
    openai_usage,
)

KEY = "BENCH_PROVIDER_KEY"
ANSWER = '{"summary": "The site answered 200 in 41 ms; nothing changed since yesterday."}'
CTX = TurnContext(
    run_id=1,
    depth=0,
    instructions="You check websites and report briefly.",
    input={"site": "http://127.0.0.1:8080/"},
    memories=[{"key": "owner", "value": "Ada", "tags": ["people"]}],
    tools=[
        ToolSpec(
            "http.get",
            "Fetch a URL",
            {"type": "object", "properties": {"url": {"type": "string"}}},
            RiskClass.READ,
        )
    ],
    history=[
        HistoryItem("http.get", {"url": "http://127.0.0.1:8080/"}, "SUCCEEDED", {"status": 200, "body": "ok"})
    ],
    turn=1,
)


async def _ignore(text: str) -> None:
    return None


STREAMING = TurnContext(**{**{f: getattr(CTX, f) for f in CTX.__dataclass_fields__}, "on_text": _ignore})


def _baseline(rev: str) -> Any | None:
    """The hand-written client's class at ``rev``, or None if that revision has no such client."""
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:app/engine/providers/openai.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    if "import openai" in source:  # that revision is on the SDK already
        return None
    path = Path(tempfile.mkdtemp()) / "handwritten_openai.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("handwritten_openai", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OpenAIProvider


async def _measure(model: Any, ctx: TurnContext, n: int) -> float:
    for _ in range(20):  # warm up: connections, imports, caches
        await model.next_turn(ctx)
    samples = []
    for _ in range(n):
        started = time.thread_time()
        await model.next_turn(ctx)
        samples.append(time.thread_time() - started)
    return statistics.mean(samples) * 1e6


async def main(n: int, rev: str) -> None:
    os.environ[KEY] = "sk-bench"
    oa, an = FakeVendor(), FakeVendor()
    oa.responder = lambda body: openai_text(ANSWER, usage=openai_usage(300, 20, cached=256))
    an.responder = lambda body: anthropic_text(ANSWER)
    with serve_in_thread(openai_app(oa)) as oa_port, serve_in_thread(anthropic_app(an)) as an_port:
        oa_url, an_url = f"http://127.0.0.1:{oa_port}/v1", f"http://127.0.0.1:{an_port}"
        settings = Settings(http_allow_private_networks=True, provider_keys={KEY: (oa_url, an_url)})
        config = {"model": "m", "api_key_env": KEY}
        results: list[tuple[str, float]] = []
        async with guarded_sdk_client(settings, timeout_s=10, user_agent="bench") as sdk_http:
            openai_model = OpenAIProvider(
                {**config, "provider": "openai", "base_url": oa_url}, settings, client=sdk_http
            )
            anthropic_model = AnthropicProvider(
                {**config, "provider": "anthropic", "base_url": an_url}, settings, client=sdk_http
            )
            results.append(("openai SDK, whole answer", await _measure(openai_model, CTX, n)))
            results.append(("openai SDK, streamed (SSE)", await _measure(openai_model, STREAMING, n)))
            results.append(("anthropic SDK, whole answer", await _measure(anthropic_model, CTX, n)))
            results.append(("anthropic SDK, streamed (SSE)", await _measure(anthropic_model, STREAMING, n)))
        baseline = _baseline(rev)
        if baseline is not None:
            async with guarded_client(settings, timeout_s=10, user_agent="bench") as http:
                old = baseline({**config, "provider": "openai", "base_url": oa_url}, settings, client=http)
                results.insert(0, (f"hand-written client ({rev}), whole answer", await _measure(old, CTX, n)))
    print(f"CPU time of the worker's thread per provider turn (mean of {n}):")
    for label, us in results:
        print(f"  {label:<45} {us:8.0f} µs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--baseline", default="main")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.baseline))
