"""Memory at scale: injection selection and ``memory.search`` against a primary-key lookup.

    .venv/bin/python bench/memory.py [--agent-memories 100000] [--workspace-memories 500000] [--samples 200]

One agent with ``--agent-memories`` memories among ``--workspace-memories`` in its workspace
(the rest spread over four other agents), on MariaDB (a fresh schema, dropped afterwards
unless ``--keep``; ``--database NAME`` measures again on a kept one without loading). The
rows are bulk-inserted, 5,000 a statement, into the migrated schema, with their
``memory_terms`` rows. Reported: p50/p95 of
1. a primary-key lookup of one memory (the baseline),
2. injection selection for a run's first start (the bounded candidate query plus the pure
   ranking within a budget of 20 items / 4000 characters), as the claim does it,
3. ``memory.search`` for two words of the corpus, limit 10 (the tool's and GraphQL's search),
   and, reported apart, for the corpus's most frequent word (in ~55% of the agent's
   memories) alone and with the second most frequent (~32%).
Targets: injection p95 <= 10 ms, search p95 <= 25 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.clock import utcnow
from app.db import migrate
from app.db.orm import Agent, Memory, MemoryTerm, memory_term_rows
from app.db.session import create_engine, create_read_sessionmaker, create_sessionmaker
from app.domain.memory import injection_rank, select_for_injection
from app.services import auth
from app.services.memory_injection import _bounded_candidates
from app.services.memory_search import search

WORDS = (
    "fintech saas logistics retail health energy robotics payments lending insurance crypto "
    "analytics security devops marketing sales hiring europe america asia germany france spain "
    "italy nordics series seed growth enterprise startup qualified excluded processed duplicate "
    "partner competitor lead prospect account renewal churn upsell pilot contract invoice report "
    "weekly monthly quarterly preference format summary detail priority urgent backlog archive"
).split()


# Operational notes use a few common words and many rare ones (company names, places): a
# vocabulary of 1,620 made-up words drawn with Zipf-like weights, plus the common ones above.
RARE = [f"{a}{b}{c}" for a in "bcdfgklmnprstvz" for b in ("al", "en", "or", "ix", "um", "ar") for c in
        ("ton", "ica", "ero", "ify", "dex", "ana", "ium", "ora", "ent", "ist", "ova", "ush",
         "ane", "ito", "eka", "uma", "ode", "ari")]  # fmt: skip
WEIGHTS = [1 / (i + 1) for i in range(len(RARE))]


def _words(rng: random.Random, k: int) -> list[str]:
    return rng.choices(WORDS, k=k // 2) + rng.choices(RARE, weights=WEIGHTS, k=k - k // 2)


def _memory_row(
    rng: random.Random, *, workspace_id: int, agent_id: int, n: int, now: datetime
) -> dict[str, Any]:
    words = _words(rng, 12)
    tags = rng.sample(["processed", "excluded", "icp", "report", "decision"], k=rng.randint(0, 2))
    key = f"domain:{n}.example"
    value = " ".join(words)
    at = now - timedelta(days=rng.randint(0, 365))
    importance = round(rng.random(), 3)
    # The ORM's write hooks derive injection_rank and the memory's terms; a bulk
    # insert does it here (explicit ids: the terms refer to them).
    return {"id": n, "workspace_id": workspace_id, "agent_id": agent_id, "key": key, "value": value, "tags": tags,
            "importance": importance, "injection_rank": injection_rank(importance, at, None),
            "created_at": at, "updated_at": at, "last_used_at": None, "source_run_id": None}  # fmt: skip


def percentiles(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(statistics.quantiles(samples, n=20)[-1], 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent-memories", type=int, default=100_000)
    parser.add_argument("--workspace-memories", type=int, default=500_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--server", default="mysql+asyncmy://root@127.0.0.1:3306/test")
    parser.add_argument("--keep", action="store_true", help="keep the database for a post-mortem")
    parser.add_argument("--database", help="measure on this kept database instead of loading one")
    args = parser.parse_args()

    db = args.database or f"enverif_bench_{uuid.uuid4().hex[:8]}"
    server = create_engine(args.server)
    if not args.database:
        async with server.begin() as conn:
            await conn.execute(text(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4"))
    engine = create_engine(args.server.rsplit("/", 1)[0] + f"/{db}")
    try:
        if args.database:
            workspace_id, target = await _loaded(engine)
        else:
            workspace_id, target = await _load(engine, args.agent_memories, args.workspace_memories)
        async with engine.connect() as conn:
            total = await conn.scalar(select(func.count()).select_from(Memory.__table__))
        report = {
            "database": "mariadb",
            "agent_memories": args.agent_memories,
            "workspace_memories": total,
            **await _measure(engine, workspace_id, target, args.samples),
            "targets": {"injection_p95_ms": "<= 10", "search_p95_ms": "<= 25"},
        }
        print(json.dumps(report, indent=2))
    finally:
        await engine.dispose()
        if args.keep or args.database:
            print(f"kept database {db}")
        else:
            async with server.begin() as conn:
                await conn.execute(text(f"DROP DATABASE IF EXISTS `{db}`"))
        await server.dispose()


async def _load(engine: AsyncEngine, agent_memories: int, workspace_memories: int) -> tuple[int, int]:
    """The schema and the memories; returns (workspace id, the measured agent's id)."""
    await migrate.upgrade(engine)
    sessions = create_sessionmaker(engine)
    async with sessions() as session:
        workspace, _ = await auth.create_workspace(session, name="bench")
    now = utcnow()
    agent_ids = []
    async with sessions() as session, session.begin():
        for i in range(5):
            agent = Agent(workspace_id=workspace.id, name=f"agent-{i}", description=None, instructions="",
                          status="ACTIVE", model={"provider": "scripted", "steps": []}, tools=[], policy={},
                          memory_max_items=20, memory_max_chars=4000, created_at=now, updated_at=now)  # fmt: skip
            session.add(agent)
            await session.flush()
            agent_ids.append(agent.id)
    rng = random.Random(7)
    others = workspace_memories - agent_memories
    plan = [(agent_ids[0], agent_memories)] + [(a, others // 4) for a in agent_ids[1:]]
    started = time.perf_counter()
    n = 0
    for agent_id, count in plan:
        for batch_start in range(0, count, 5_000):
            rows = []
            for _ in range(min(5_000, count - batch_start)):
                n += 1
                rows.append(_memory_row(rng, workspace_id=workspace.id, agent_id=agent_id, n=n, now=now))
            terms = [t for r in rows for t in memory_term_rows(
                r["id"], r["agent_id"], r["key"], r["value"], r["tags"], r["importance"], r["updated_at"],
                r["injection_rank"])]  # fmt: skip
            async with engine.begin() as conn:
                await conn.execute(insert(Memory), rows)
                for chunk in range(0, len(terms), 20_000):
                    await conn.execute(insert(MemoryTerm), terms[chunk : chunk + 20_000])
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE TABLE memories, memory_terms"))
    print(f"loaded {n} memories in {time.perf_counter() - started:.0f} s", flush=True)
    return workspace.id, agent_ids[0]


async def _loaded(engine: AsyncEngine) -> tuple[int, int]:
    """(workspace id, agent id) of a kept database: the agent with the most memories."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(Memory.workspace_id, Memory.agent_id)
                .group_by(Memory.workspace_id, Memory.agent_id)
                .order_by(func.count().desc())
                .limit(1)
            )
        ).one()
    return row[0], row[1]


async def _measure(engine: AsyncEngine, workspace_id: int, target: int, samples: int) -> dict[str, object]:
    """p50/p95 of a primary-key lookup, injection selection and search, interleaved."""
    reads = create_read_sessionmaker(engine)
    rng = random.Random(11)
    now = utcnow()
    async with reads() as session:
        ids = list(await session.scalars(select(Memory.id).where(Memory.agent_id == target).limit(10_000)))
    pk, inject = [], []
    # The queries: two words drawn as the text draws them (the figure the target is for),
    # then the hard cases on their own: the most frequent word (in ~55% of the agent's
    # memories, like "the" in English text), and it with the second most frequent (~32%).
    queries: dict[str, Callable[[], str]] = {
        "memory_search": lambda: " ".join(_words(rng, 2)),
        "memory_search_most_frequent_word": lambda: RARE[0],
        "memory_search_two_most_frequent_words": lambda: f"{RARE[0]} {RARE[1]}",
    }
    found: dict[str, list[float]] = {name: [] for name in queries}
    hits: dict[str, list[int]] = {name: [] for name in queries}
    for _ in range(samples):
        async with reads() as session:
            t0 = time.perf_counter()
            await session.scalar(select(Memory).where(Memory.id == rng.choice(ids)))
            pk.append((time.perf_counter() - t0) * 1000)
        async with reads() as session:
            t0 = time.perf_counter()
            candidates = await _bounded_candidates(session, agent_id=target, max_items=20, max_chars=4000)
            select_for_injection(candidates, now=now, max_items=20, max_chars=4000)
            inject.append((time.perf_counter() - t0) * 1000)
        for name, query in queries.items():
            async with reads() as session:
                t0 = time.perf_counter()
                result = await search(session, workspace_id=workspace_id, agent_id=target, query=query(),
                                      tags=None, limit=10, now=now, mark_used=False)  # fmt: skip
                found[name].append((time.perf_counter() - t0) * 1000)
                hits[name].append(len(result))
    return {
        "primary_key_lookup": percentiles(pk),
        "injection_selection": percentiles(inject),
        **{name: percentiles(samples) for name, samples in found.items()},
        # A search that finds nothing is fast for the wrong reason: each query's words occur.
        "results_mean": {name: round(statistics.mean(h), 1) for name, h in hits.items()},
    }


if __name__ == "__main__":
    asyncio.run(main())
