"""Memory at scale: injection selection and ``memory.search`` against a primary-key lookup.

    .venv/bin/python bench/memory.py [--agent-memories 100000] [--workspace-memories 500000] [--samples 200]

One agent with ``--agent-memories`` memories among ``--workspace-memories`` in its workspace
(the rest spread over four other agents), on MariaDB (a fresh schema, dropped afterwards).
Reported: p50/p95 of
1. a primary-key lookup of one memory (the baseline),
2. injection selection for a run's first start (the bounded candidate query plus the pure
   ranking within a budget of 20 items / 4000 characters), as the claim does it,
3. ``memory.search`` for two words of the corpus, limit 10 (the tool's and GraphQL's search).
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
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert, select, text

from app.clock import utcnow
from app.db import migrate
from app.db.orm import Agent, Memory
from app.db.session import create_engine, create_read_sessionmaker
from app.domain.memory import select_for_injection
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
    rng: random.Random, *, workspace_id: int, agent_id: int, n: int, now: object
) -> dict[str, object]:
    words = _words(rng, 12)
    tags = rng.sample(["processed", "excluded", "icp", "report", "decision"], k=rng.randint(0, 2))
    key = f"domain:{n}.example"
    value = " ".join(words)
    at = now - timedelta(days=rng.randint(0, 365))  # type: ignore[operator]
    return {"workspace_id": workspace_id, "agent_id": agent_id, "key": key, "value": value, "tags": tags,
            "importance": round(rng.random(), 3), "search_text": " ".join([key, value, *tags]),
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
    args = parser.parse_args()

    db = f"enverif_bench_{uuid.uuid4().hex[:8]}"
    server = create_engine(args.server)
    async with server.begin() as conn:
        await conn.execute(text(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4"))
    url = args.server.rsplit("/", 1)[0] + f"/{db}"
    engine = create_engine(url)
    try:
        await migrate.upgrade(engine)
        from app.db.session import create_sessionmaker

        sessions = create_sessionmaker(engine)
        reads = create_read_sessionmaker(engine)
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
        others = args.workspace_memories - args.agent_memories
        plan = [(agent_ids[0], args.agent_memories)] + [(a, others // 4) for a in agent_ids[1:]]
        started = time.perf_counter()
        n = 0
        for agent_id, count in plan:
            for batch_start in range(0, count, 5_000):
                rows = []
                for _ in range(min(5_000, count - batch_start)):
                    n += 1
                    rows.append(_memory_row(rng, workspace_id=workspace.id, agent_id=agent_id, n=n, now=now))
                async with engine.begin() as conn:
                    await conn.execute(insert(Memory.__table__), rows)
        print(f"loaded {n} memories in {time.perf_counter() - started:.0f} s", flush=True)
        async with engine.begin() as conn:
            await conn.execute(text("ANALYZE TABLE memories"))
        target = agent_ids[0]
        ids = [m for m in (await _ids(reads, target))]

        pk, inject, found = [], [], []
        for _ in range(args.samples):
            async with reads() as session:
                t0 = time.perf_counter()
                await session.scalar(select(Memory).where(Memory.id == rng.choice(ids)))
                pk.append((time.perf_counter() - t0) * 1000)
            async with reads() as session:
                t0 = time.perf_counter()
                candidates = await _bounded_candidates(session, agent_id=target, max_items=20, max_chars=4000)
                select_for_injection(candidates, now=now, max_items=20, max_chars=4000)
                inject.append((time.perf_counter() - t0) * 1000)
            async with reads() as session:
                t0 = time.perf_counter()
                await search(session, workspace_id=workspace.id, agent_id=target,
                             query=" ".join(_words(rng, 2)), tags=None, limit=10, now=now, mark_used=False)  # fmt: skip
                found.append((time.perf_counter() - t0) * 1000)
        report = {
            "database": "mariadb",
            "agent_memories": args.agent_memories,
            "workspace_memories": n,
            "primary_key_lookup": percentiles(pk),
            "injection_selection": percentiles(inject),
            "memory_search": percentiles(found),
            "targets": {"injection_p95_ms": "<= 10", "search_p95_ms": "<= 25"},
        }
        print(json.dumps(report, indent=2))
    finally:
        await engine.dispose()
        if args.keep:
            print(f"kept database {db}")
        else:
            async with server.begin() as conn:
                await conn.execute(text(f"DROP DATABASE IF EXISTS `{db}`"))
        await server.dispose()


async def _ids(reads: object, agent_id: int) -> list[int]:
    async with reads() as session:  # type: ignore[operator]
        return list(await session.scalars(select(Memory.id).where(Memory.agent_id == agent_id).limit(10_000)))


if __name__ == "__main__":
    asyncio.run(main())
