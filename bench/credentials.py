"""The credential guard's cost per memory write (it runs on every one), against a baseline.

    .venv/bin/python bench/credentials.py [--n 2000]

Prints the mean and p95 CPU time per ``check_credentials`` call on typical memory writes (a short
operational note, a 1,000-character paragraph, a value at the default 16,384-character cap,
and a write that holds a token, refused), next to the baseline measured in the same run:
``strict_json`` of the same ``memory.remember`` arguments, which every step pays anyway.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.domain.credentials import check_credentials
from app.domain.jsonvalue import strict_json

WORDS = (
    "fintech saas logistics retail payments lending insurance analytics security marketing sales "
    "europe germany france nordics series seed growth enterprise qualified excluded processed "
    "partner competitor lead prospect account renewal churn pilot contract invoice report weekly "
    "the a of to in and for with on at from by is are was not every decision customer team"
).split()


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def _paragraph(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < chars:
        parts.append(_sentence(rng, rng.randint(6, 16)))
        if rng.random() < 0.2:
            parts.append(
                f"Ticket OPS-{rng.randint(1, 9999)}, score {rng.random():.2f}, {rng.randint(1, 28)}.11.2026."
            )
    return " ".join(parts)[:chars]


def _writes(rng: random.Random) -> dict[str, tuple[str, str, list[str]]]:
    token = (
        "gh"
        + "p_"
        + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789") for _ in range(36))
    )
    return {
        "short note (~150 chars)": (
            "icp-decision",
            "ICP decision: B2B SaaS in DACH, 50-500 employees, ARR above $5M; skip agencies. "
            "Owner jane.doe@acme-widgets.localhost, reviewed 2026-11-30.",
            ["icp", "decision"],
        ),
        "paragraph (1,000 chars)": ("research-notes", _paragraph(rng, 1_000), ["research"]),
        "value at the cap (16,384 chars)": ("archive", _paragraph(rng, 16_384), ["archive", "2026-q4"]),
        "holds a token (refused)": ("crm", f"CRM sync uses {token} until rotation", ["crm"]),
    }


def _time_us(fn: Callable[[], object], n: int) -> list[float]:
    """CPU time per call (the thread's own: on a shared machine, wall-clock time measures the
    neighbours), in batches of 10 calls to stay well above the clock's resolution."""
    fn()  # warm caches (compiled patterns, the word list)
    samples = []
    for _ in range(max(n // 10, 5)):
        started = time.thread_time()
        for _ in range(10):
            fn()
        samples.append((time.thread_time() - started) * 1e5)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2_000)
    args = parser.parse_args()
    report: dict[str, object] = {}
    for name, (key, value, tags) in _writes(random.Random(7)).items():
        n = max(args.n // (10 if len(value) > 10_000 else 1), 20)
        call = {"key": key, "value": value, "tags": tags, "importance": 0.5}
        guard = _time_us(lambda: check_credentials(key, value, tags), n)  # noqa: B023 (called at once)
        baseline = _time_us(lambda: strict_json(call, max_bytes=1 << 20, what="x"), n)  # noqa: B023
        report[name] = {
            "guard_mean_us": round(statistics.fmean(guard), 1),
            "guard_p95_us": round(statistics.quantiles(guard, n=20)[-1], 1),
            "baseline_strict_json_mean_us": round(statistics.fmean(baseline), 1),
            "ratio_to_baseline": round(statistics.fmean(guard) / statistics.fmean(baseline), 1),
            "refused": check_credentials(key, value, tags) is not None,
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
