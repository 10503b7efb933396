"""Which memories a run starts with (docs/concepts/memory.md), in two halves around the claim.

``candidates`` reads, outside the claim's transaction, a bounded set of the agent's most
promising memories: the claim holds the run tree's lock, and an agent may have thousands
of memories. ``inject`` then runs inside the claim: the pure ranking
(``app.domain.memory.select_for_injection``) picks within the agent's budget, the choice is
recorded on the run, the memories are marked used and ``MEMORY_INJECTED`` is appended.

The price of reading first: a memory edited between the read and the claim is injected as it
was read, and one deleted in between is dropped (re-checked inside the claim).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from app.db.orm import Agent, AgentVersion, Memory, Run, Workspace
from app.domain.agent_versions import AgentConfig
from app.domain.errors import EnverifError
from app.domain.holds import hold_reason
from app.domain.memory import MemoryCandidate, select_for_injection
from app.domain.policy import PolicyLink, chain_agent_ids, parse_policy
from app.domain.run_events import EventType
from app.domain.runs import RunStatus
from app.services.memory_search import record_use
from app.services.runtime import Runtime
from app.services.transitions import TreeTx

# Candidates read per item of the budget. They come in the pure ranking's own order
# (``memories.injection_rank``), so the first ``max_items`` that fit are the choice; the
# spares stand in for memories that the character budget skips.
CANDIDATES_PER_ITEM = 2
MIN_CANDIDATES = 16
MAX_CANDIDATES = 400
# What MemoryCandidate holds, in its order: not whole rows.
_CANDIDATE_COLUMNS = (Memory.id, Memory.key, Memory.value, Memory.importance, Memory.updated_at,
                      Memory.last_used_at, Memory.tags)  # fmt: skip


async def candidates(rt: Runtime, run_id: int) -> list[MemoryCandidate] | None:
    """The injection candidates for the run's first start; None when the run has started
    before (its memories were chosen then) or is gone."""
    return (await read_for_claim(rt, run_id)).candidates


@dataclass(frozen=True, slots=True)
class PreClaim:
    """What a claim reads before it takes the tree's lock."""

    # The run's agent as its pinned version configures it (None: the run is gone).
    agent: AgentConfig | None
    # The injection candidates (``candidates``), within the pinned version's memory budget.
    candidates: list[MemoryCandidate] | None
    # Why the run is held (``app.domain.holds``), as read now; None: it may go on.
    held: str | None = None
    # The current policy of every agent on the run's chain, root first (live tightening).
    current_policies: list[PolicyLink] = field(default_factory=list)
    # How many of the run's workspace's runs are RUNNING, read now without a lock (quotas,
    # docs/concepts/budgets.md#quotas): the claim counts again under a lock near the quota.
    workspace_running: int = 0
    # The run's parent (a run's parent never changes): the claim locks it with the root and
    # the run, in one statement, for the budget check of the chain (``TreeTx.chain_ledgers``).
    parent_id: int | None = None


async def read_for_claim(rt: Runtime, run_id: int) -> PreClaim:
    async with rt.read_sessionmaker() as session:
        found = (await session.execute(_FIRST_START, {"b_run": run_id})).first()
        if found is None:
            return PreClaim(None, None)
        (
            injected_ids,
            name,
            status,
            paused,
            policy,
            chain,
            version_id,
            agent_id,
            version,
            has_memories,
            running,
            parent_id,
        ) = found
        agent = await _pinned(rt, session, (version_id, agent_id, version), name=name)
        running = int(running or 0)
        held = hold_reason(agent_name=name, agent_status=status, workspace_paused_reason=paused)
        if chain_agent_ids(chain) == [agent.id]:
            # A root run (or a child of its own agent): its agent's current policy was read
            # with this statement; no second one.
            policies = _links([(name, policy)])
        else:
            policies = await current_policies(session, chain)
        # None: the run started before and its memories were chosen then. Compared in
        # Python: a JSON column stores None as JSON null, which IS NULL misses.
        found_candidates: list[MemoryCandidate] | None = None
        if injected_ids is None:
            max_items, max_chars = agent.memory_max_items, agent.memory_max_chars
            # Most agents have no memories: one statement decides it (an index probe), not three.
            if held is not None or max_items <= 0 or max_chars <= 0 or not has_memories:
                found_candidates = []
            else:
                found_candidates = await _bounded_candidates(
                    session, agent_id=agent.id, max_items=max_items, max_chars=max_chars
                )
        return PreClaim(
            agent, found_candidates, held, policies, workspace_running=running, parent_id=parent_id
        )


async def current_policies(session: AsyncSession, chain_snapshot: object) -> list[PolicyLink]:
    """The policy each agent on a chain snapshot has now, root first (one statement)."""
    ids = chain_agent_ids(chain_snapshot)
    if not ids:
        return []
    rows = {
        agent_id: (agent_name, policy)
        for agent_id, agent_name, policy in await session.execute(_POLICIES, {"b_ids": ids})
    }
    return _links([rows[i] for i in ids if i in rows])


def _links(policies: list[tuple[str, Any]]) -> list[PolicyLink]:
    """Stored policies were validated on the way in; one that no longer parses is left out
    (the run's snapshot still counts for it) rather than failing every claim."""
    links: list[PolicyLink] = []
    for agent_name, policy in policies:
        try:
            links.append(PolicyLink(agent_name, parse_policy(policy)))
        except EnverifError:
            continue
    return links


# Pinned versions kept per runtime (so per database), by (version id, agent id, version
# number): a few hundred bytes each, and a deployment has far fewer versions in use.
PINNED_CACHE_MAX = 4096


async def _pinned(rt: Runtime, session: AsyncSession, key: tuple[int, int, int], *, name: str) -> AgentConfig:
    """The pinned version's configuration: read once per process, since a version row never
    changes (docs/concepts/versions.md); the agent's name is its current one."""
    cache = rt.pinned_versions
    agent = cache.get(key)
    if agent is None:
        version = await session.scalar(select(AgentVersion).where(AgentVersion.id == key[0]))
        assert version is not None  # read in the same snapshot as its id
        agent = pinned_config(version, name=name)
    elif agent.name == name:
        return agent
    else:
        agent = dataclasses.replace(agent, name=name)  # the agent was renamed
    if len(cache) >= PINNED_CACHE_MAX:
        cache.clear()
    cache[key] = agent
    return agent


def pinned_config(version: AgentVersion, *, name: str) -> AgentConfig:
    return AgentConfig.of(
        id=version.agent_id, workspace_id=version.workspace_id, name=name,
        version=version.version, config=version.config,
    )  # fmt: skip


async def read_pinned(session: AsyncSession, run: Run) -> AgentConfig | None:
    """The run's agent as its pinned version configures it (inside a claim, when the read
    before it found nothing); None when that version's row is gone."""
    found = (
        await session.execute(
            select(Agent.name, AgentVersion)
            .join(AgentVersion, AgentVersion.agent_id == Agent.id)
            .where(Agent.id == run.agent_id, AgentVersion.version == run.agent_version)
        )
    ).first()
    return None if found is None else pinned_config(found[1], name=found[0])


# Built once: an IN over a list built per call is traversed for its cache key every time.
_POLICIES = select(Agent.id, Agent.name, Agent.policy).where(Agent.id.in_(bindparam("b_ids", expanding=True)))
_Running = aliased(Run)
# Built once (compiled once, cached): the run's first-start check, what holds it, which
# version of its agent it is pinned to (the configuration itself is cached: ``_pinned``),
# whether the agent has any memory at all, how many of its workspace's runs are running, and
# the run's parent.
_FIRST_START = (
    select(
        Run.injected_memory_ids,
        Agent.name,
        Agent.status,
        Workspace.paused_reason,
        Agent.policy,
        Run.policy_chain,
        AgentVersion.id,
        AgentVersion.agent_id,
        AgentVersion.version,
        exists().where(Memory.agent_id == Run.agent_id),
        # An index range of (workspace_id, status): the workspace's RUNNING runs.
        select(func.count())
        .select_from(_Running)
        .where(_Running.workspace_id == Run.workspace_id, _Running.status == RunStatus.RUNNING.value)
        .scalar_subquery(),
        Run.parent_run_id,
    )
    .join(Agent, Agent.id == Run.agent_id)
    .join(Workspace, Workspace.id == Run.workspace_id)
    .join(AgentVersion, (AgentVersion.agent_id == Run.agent_id) & (AgentVersion.version == Run.agent_version))
    .where(Run.id == bindparam("b_run"))
)


async def _bounded_candidates(
    session: AsyncSession, *, agent_id: int, max_items: int, max_chars: int
) -> list[MemoryCandidate]:
    """One ordered range read of the (agent_id, injection_rank) index: the head of the
    agent's memories by importance x recency, never a sort of all of them."""
    limit = min(max(max_items * CANDIDATES_PER_ITEM, MIN_CANDIDATES), MAX_CANDIDATES)
    length = func.char_length if session.get_bind().dialect.name in ("mysql", "mariadb") else func.length
    rows = await session.execute(
        select(*_CANDIDATE_COLUMNS)
        .where(
            Memory.agent_id == agent_id,
            # A memory larger than the whole budget can never be chosen.
            length(Memory.key) + length(Memory.value) <= max_chars,
        )
        .order_by(Memory.injection_rank.desc(), Memory.id.desc())
        .limit(limit)
    )
    return [
        MemoryCandidate(id, key, value, importance, updated_at, last_used_at, tuple(map(str, tags or [])))
        for id, key, value, importance, updated_at, last_used_at, tags in rows
    ]


async def inject(
    tx: TreeTx, run: Run, agent: AgentConfig, candidates: list[MemoryCandidate]
) -> list[dict[str, Any]]:
    """Inside the claim, on the run's first start: choose, record, mark used, log."""
    chosen = select_for_injection(
        candidates, now=tx.now, max_items=agent.memory_max_items, max_chars=agent.memory_max_chars
    )
    if chosen:
        # The candidates were read before the claim: drop any memory deleted since.
        alive = set(await tx.session.scalars(select(Memory.id).where(Memory.id.in_([m.id for m in chosen]))))
        chosen = [m for m in chosen if m.id in alive]
    run.injected_memory_ids = [m.id for m in chosen]
    # Pinned as injected: a memory edited or deleted later changes neither a resumed run's
    # context nor what the run shows it started with.
    run.injected_memories = [
        {
            "id": m.id,
            "key": m.key,
            "value": m.value,
            "tags": list(m.tags),
            "importance": m.importance,
            "updated_at": m.updated_at.isoformat(),
        }
        for m in chosen
    ]
    if chosen:
        await record_use(tx.session, chosen, now=tx.now)
        tx.emit(run, EventType.MEMORY_INJECTED, payload={"keys": [m.key for m in chosen]})
    return context_memories(run.injected_memories)


def context_memories(pinned: list[Any]) -> list[dict[str, Any]]:
    """The injected memories as the model's context shows them: ``[{key, value, tags}]``."""
    return [{"key": m["key"], "value": m["value"], "tags": list(m.get("tags") or [])} for m in pinned]


async def injected(session: AsyncSession, run: Run) -> list[dict[str, Any]]:
    """A resumed run's memories: exactly as injected at its first start. Runs injected before
    the values were pinned fall back to the ones chosen then that still exist."""
    if run.injected_memories is not None:
        return context_memories(run.injected_memories)
    ids = run.injected_memory_ids or []
    if not ids:
        return []
    rows = {m.id: m for m in await session.scalars(select(Memory).where(Memory.id.in_(ids)))}
    return [{"key": rows[i].key, "value": rows[i].value, "tags": rows[i].tags} for i in ids if i in rows]
