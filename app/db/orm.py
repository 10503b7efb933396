"""Tables. Current state is denormalised on the row (run status, step status); history is
append-only (run_events, memory_revisions). Relationships are ``lazy="raise"`` so async
code never loads by accident: load what you need explicitly.

Ids are integers (BIGINT on MySQL, INTEGER PRIMARY KEY on SQLite); clients only ever see
opaque global ids.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    delete,
    event,
    insert,
    inspect,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from app.domain.memory import injection_rank, memory_terms, write_rank

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
}

# BIGINT on MySQL; SQLite only auto-increments a column declared exactly INTEGER.
Id = BigInteger().with_variant(Integer(), "sqlite")
# Memory keys are exact: byte-wise on MySQL/MariaDB (SQLite's default BINARY collation
# already is), so "Plan" and "plan" are two keys on both databases.
MemoryKey = String(255).with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mysql", "mariadb")
# LONGTEXT on MySQL: run results, tool output and memory values can be large.
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python; naive UTC with microseconds in the database.

    Neither MySQL DATETIME nor SQLite keep an offset, so we store UTC and re-attach it.
    """

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Any) -> Any:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime passed to the database; use UTC-aware datetimes")
        from datetime import UTC

        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        from datetime import UTC

        return value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON, list[Any]: JSON}

    if TYPE_CHECKING:
        # SQLAlchemy types it as any FromClause (a class may map a join or a subquery); every
        # model here maps one Table, which Core's insert() and update() ask for.
        __table__: ClassVar[Table]


class Workspace(Base):
    __tablename__ = "workspaces"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime]
    # The workspace-wide emergency stop (docs/concepts/holds.md): set while paused.
    paused_at: Mapped[datetime | None]
    paused_reason: Mapped[str | None] = mapped_column(Text)
    paused_by: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # ``{"url", "secretEnv"}``: every requested approval is POSTed there, signed
    # (docs/concepts/approvals.md); null: no notifications.
    approval_webhook: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    # Operators revoke tokens by name, so a name means one token within its workspace.
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    # sha256 of the token: tokens are 256-bit random, so a slow hash buys nothing.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime]
    # None: never expires. Compared with the API process's clock on every use.
    expires_at: Mapped[datetime | None]
    # Written at most once a minute per token (services.auth), so reads stay reads.
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class Agent(Base):
    __tablename__ = "agents"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    description: Mapped[str | None] = mapped_column(Text)
    instructions: Mapped[str | None] = mapped_column(LongText)
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[dict[str, Any]] = mapped_column(JSON)
    tools: Mapped[list[Any]] = mapped_column(JSON)
    policy: Mapped[dict[str, Any]] = mapped_column(JSON)
    memory_max_items: Mapped[int] = mapped_column(Integer)
    memory_max_chars: Mapped[int] = mapped_column(Integer)
    # Budget limits (docs/concepts/budgets.md), checked by app.domain.budgets.parse_budget.
    budget: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # JSON Schema 2020-12 a run's input must match (app/domain/input_schema.py); None: any.
    input_schema: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The current version's number (``agent_versions``): what a run created now is pinned to.
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class AgentVersion(Base):
    """One immutable configuration of an agent (``app.domain.agent_versions``), written with
    the create or update that made it; runs name the one they are pinned to by number."""

    __tablename__ = "agent_versions"
    __table_args__ = (UniqueConstraint("agent_id", "version"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[int] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    # ``VERSIONED_FIELDS`` -> value: a plain record, so a new field is a new key, not a column.
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    # ``app.domain.actors.Actor.to_json``: who wrote it.
    created_by: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime]


class Memory(Base):
    __tablename__ = "memories"
    __table_args__ = (
        UniqueConstraint("agent_id", "key"),
        Index("ix_memories_workspace_id_agent_id", "workspace_id", "agent_id"),
        # Injection (services.memory_injection) and query-less search: the agent's best
        # memories by importance x recency are the head of this index, read in order.
        Index("ix_memories_agent_id_injection_rank", "agent_id", "injection_rank"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    agent_id: Mapped[int] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(MemoryKey)
    value: Mapped[str] = mapped_column(LongText)
    tags: Mapped[list[Any]] = mapped_column(JSON)
    importance: Mapped[float] = mapped_column(Float)
    source_run_id: Mapped[int | None] = mapped_column(ForeignKey("agent_runs.id", ondelete="SET NULL"))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]
    # ``domain.memory.injection_rank``: importance x recency as a key that does not age.
    injection_rank: Mapped[float] = mapped_column(Double, default=0.0, server_default="0")


@event.listens_for(Memory, "before_insert")
@event.listens_for(Memory, "before_update")
def _keep_injection_rank(_mapper: Any, _connection: Any, memory: Memory) -> None:
    """Every ORM write of a memory re-derives its injection rank from its final state, so no
    write path can forget it. Bulk ``update()`` statements bypass this and must set it
    themselves (see ``services.memory_search.record_use``)."""
    memory.injection_rank = injection_rank(memory.importance, memory.updated_at, memory.last_used_at)


# A term: a folded word (up to 64 characters) or a tag's digest; exact and code-point ordered on
# both databases, so a prefix is one range of the index.
MemoryTermText = String(80).with_variant(mysql.VARCHAR(80, collation="utf8mb4_bin"), "mysql", "mariadb")


class MemoryTerm(Base):
    """The search index the application keeps (``domain.memory.memory_terms``): one row per
    memory and term, written with the memory. Clustered in search order (the primary key;
    WITHOUT ROWID on SQLite): a term's postings best first by write rank, so a common word
    costs a LIMIT and the best postings of every term stay together (services.memory_search).
    ``value_rank`` copies the memory's ``injection_rank`` so ranking needs no memory row."""

    __tablename__ = "memory_terms"
    __table_args__ = (Index("ix_memory_terms_memory_id", "memory_id"), {"sqlite_with_rowid": False})

    agent_id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=False)
    term: Mapped[str] = mapped_column(MemoryTermText, primary_key=True)
    # ``domain.memory.write_rank``: importance x recency as of the memory's last write.
    write_rank: Mapped[float] = mapped_column(Double, primary_key=True)
    memory_id: Mapped[int] = mapped_column(
        ForeignKey("memories.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    frequency: Mapped[int] = mapped_column(Integer)
    value_rank: Mapped[float] = mapped_column(Double)


# What a memory's terms are derived from: a write that changes none of them keeps its rows.
_TERM_SOURCES = ("agent_id", "key", "value", "tags", "importance", "updated_at", "last_used_at")


def memory_term_rows(memory_id: int, agent_id: int, key: str, value: str, tags: Any,
                     importance: float, updated_at: datetime, value_rank: float) -> list[dict[str, Any]]:  # fmt: skip
    """The ``memory_terms`` rows of one memory (also for bulk loads that bypass the ORM)."""
    rank = write_rank(importance, updated_at)
    return [
        {
            "agent_id": agent_id,
            "term": term,
            "write_rank": rank,
            "memory_id": memory_id,
            "frequency": n,
            "value_rank": value_rank,
        }
        for term, n in memory_terms(key, value, tags or []).items()
    ]


@event.listens_for(Memory, "after_insert")
@event.listens_for(Memory, "after_update")
def _keep_terms(_mapper: Any, connection: Any, memory: Memory) -> None:
    """Every ORM write of a memory rewrites its terms in the same transaction (a delete needs
    nothing: the foreign key cascades). Bulk statements bypass this and keep the rows
    themselves (``services.memory_search.record_use`` copies the new injection rank)."""
    state = inspect(memory)
    if not any(state.attrs[name].history.has_changes() for name in _TERM_SOURCES):
        return
    connection.execute(delete(MemoryTerm).where(MemoryTerm.memory_id == memory.id))
    rows = memory_term_rows(memory.id, memory.agent_id, memory.key, memory.value, memory.tags,
                            memory.importance, memory.updated_at, memory.injection_rank)  # fmt: skip
    if rows:
        connection.execute(insert(MemoryTerm), rows)


class MemoryRevision(Base):
    """Every change to a memory, kept after the memory itself is deleted."""

    __tablename__ = "memory_revisions"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    # No foreign key: the history outlives the memory it describes.
    memory_id: Mapped[int] = mapped_column(Id, index=True)
    agent_id: Mapped[int] = mapped_column(Id)
    key: Mapped[str] = mapped_column(MemoryKey)
    action: Mapped[str] = mapped_column(String(16))  # CREATE | UPDATE | DELETE
    run_id: Mapped[int | None] = mapped_column(Id)
    token_id: Mapped[int | None] = mapped_column(Id)
    old_value: Mapped[str | None] = mapped_column(LongText)
    new_value: Mapped[str | None] = mapped_column(LongText)
    # Before and after this change (null where there is no before or after: a create has
    # no old ones, a delete no new ones; revisions written before these were kept have none).
    old_key: Mapped[str | None] = mapped_column(MemoryKey)
    old_tags: Mapped[list[Any] | None] = mapped_column(JSON)
    new_tags: Mapped[list[Any] | None] = mapped_column(JSON)
    old_importance: Mapped[float | None] = mapped_column(Float)
    new_importance: Mapped[float | None] = mapped_column(Float)
    at: Mapped[datetime]


class Run(Base):
    __tablename__ = "agent_runs"
    __table_args__ = (
        Index("ix_agent_runs_workspace_id_status", "workspace_id", "status"),
        Index("ix_agent_runs_status_lease_expires_at", "status", "lease_expires_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    agent_id: Mapped[int] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(20))
    trigger: Mapped[str] = mapped_column(String(16))
    input: Mapped[Any | None] = mapped_column(JSON)
    result: Mapped[Any | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(LongText)
    error_code: Mapped[str | None] = mapped_column(String(64))  # BUDGET_EXCEEDED, ...
    parent_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("agent_runs.id", ondelete="CASCADE"), index=True
    )
    # Set right after insert for a root run (it is its own root); never null afterwards.
    root_run_id: Mapped[int | None] = mapped_column(Id, index=True)
    depth: Mapped[int] = mapped_column(Integer, default=0)
    delegation_task: Mapped[str | None] = mapped_column(LongText)
    parent_step_id: Mapped[int | None] = mapped_column(Id)
    schedule_id: Mapped[int | None] = mapped_column(Id, index=True)
    # [{"agent_id", "agent_name", "policy"}] from the root down to this run's own agent.
    policy_chain: Mapped[list[Any]] = mapped_column(JSON)
    # The version of its agent the run executes with, whatever happened to the agent since.
    agent_version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    injected_memory_ids: Mapped[list[Any] | None] = mapped_column(JSON)
    # The memories as they were injected ([{id, key, value, tags, importance}]): what a
    # resumed run's context holds and what ``Run.injectedMemories`` shows, whatever the
    # memories became since. Null for runs injected before it was kept (read the live rows).
    injected_memories: Mapped[list[Any] | None] = mapped_column(JSON)
    # ``app.domain.actors.Actor.to_json``: who started it (a token, the CLI, a schedule, the
    # parent run) and who cancelled it.
    started_by: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    cancelled_by: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Why a QUEUED run is not being claimed (its agent is paused or archived, its workspace
    # paused); null once released. Held runs get no job until then (docs/concepts/holds.md).
    held_reason: Mapped[str | None] = mapped_column(Text)
    cancel_reason: Mapped[str | None] = mapped_column(Text)
    # Budgets (docs/concepts/budgets.md): the run's own limits, fixed at creation
    # ({key: {limit, imposedBy}}); what it used itself, and its subtree (itself included).
    # Usage is charged under the tree's root lock, to the run and every ancestor.
    budget: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    tree_usage: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # When its maxWallS (or an ancestor's) runs out; the sweeper ends runs past it.
    deadline_at: Mapped[datetime | None] = mapped_column(index=True)

    # Execution bookkeeping. `attempt` is the fencing token: every claim bumps it, and a
    # worker's writes only land while the row still carries the attempt it claimed.
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # Claims abandoned since the run last made progress (lease expired, handed back after an
    # internal error): what ENVERIF_MAX_ATTEMPTS bounds. Wake-ups never count.
    abandoned_claims: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Bumped whenever the run is (re)queued; part of the arq job id so a resumed run is
    # never deduplicated against the job of an earlier wake-up.
    wake_count: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_expires_at: Mapped[datetime | None]
    turns: Mapped[int] = mapped_column(Integer, default=0)
    # Only meaningful on a root run: the last seq handed out for the tree's events.
    last_event_seq: Mapped[int] = mapped_column(Integer, default=0)

    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    queued_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    agent: Mapped[Agent] = relationship(lazy="raise")


class RunStep(Base):
    __tablename__ = "run_steps"
    __table_args__ = (UniqueConstraint("run_id", "seq"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(ForeignKey("agent_runs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    turn: Mapped[int] = mapped_column(Integer)
    # Null for the final answer.
    tool: Mapped[str | None] = mapped_column(String(200))
    arguments: Mapped[Any | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20))
    decision: Mapped[str | None] = mapped_column(String(20))
    decision_reason: Mapped[str | None] = mapped_column(Text)
    result: Mapped[Any | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(LongText)
    error_code: Mapped[str | None] = mapped_column(String(64))  # the code the model saw
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # its turn's, on the turn's first step
    # Which claim executed (or is executing) the tool, for the post-mortem of a retried step.
    executed_attempt: Mapped[int | None] = mapped_column(Integer)
    child_run_id: Mapped[int | None] = mapped_column(Id, index=True)
    approval_id: Mapped[int | None] = mapped_column(Id)
    # An operator's EDIT: ``arguments`` are then the edited ones, these the model's.
    original_arguments: Mapped[Any | None] = mapped_column(JSON)
    edited_by: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # ``Actor.to_json``
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class Approval(Base):
    __tablename__ = "approvals"
    __table_args__ = (Index("ix_approvals_workspace_id_status", "workspace_id", "status"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(ForeignKey("agent_runs.id", ondelete="CASCADE"), index=True)
    root_run_id: Mapped[int] = mapped_column(Id, index=True)
    step_id: Mapped[int] = mapped_column(ForeignKey("run_steps.id", ondelete="CASCADE"), unique=True)
    tool: Mapped[str] = mapped_column(String(200))
    arguments: Mapped[Any | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    decided_by_token_id: Mapped[int | None] = mapped_column(Id)
    # ``app.domain.actors.Actor.to_json``: who decided (a token, the CLI).
    decided_by: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    requested_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]
    # ``app.domain.approvals``: APPROVE | REJECT | EDIT | RESPOND, CALL | RUN; null while pending
    # (and for decisions made before the kinds existed: APPROVE or REJECT, read from status).
    decision: Mapped[str | None] = mapped_column(String(16))
    scope: Mapped[str | None] = mapped_column(String(8))
    response: Mapped[Any | None] = mapped_column(JSON)  # RESPOND: what the model receives
    expires_at: Mapped[datetime | None] = mapped_column(index=True)  # null: waits forever


class ApprovalNotification(Base):
    """One approval's POST to the workspace's approvalWebhook: sent by the sweeper, retried
    with backoff until delivered or out of attempts."""

    __tablename__ = "approval_notifications"
    __table_args__ = (Index("ix_approval_notifications_status_next_at", "status", "next_at"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    approval_id: Mapped[int] = mapped_column(ForeignKey("approvals.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(Text)
    secret_env: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16))  # app.domain.approvals.NotificationStatus
    attempts: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    next_at: Mapped[datetime | None]  # PENDING: when to send it; also pushed ahead while sending
    last_attempt_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)


class Schedule(Base):
    __tablename__ = "schedules"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[int] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    cron: Mapped[str] = mapped_column(String(100))
    timezone: Mapped[str] = mapped_column(String(64))
    input: Mapped[Any | None] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean)
    overlap_policy: Mapped[str] = mapped_column(String(8))
    # What tightens the agent's budget for every run it starts (docs/concepts/budgets.md),
    # and, under overlap ALLOW, how many of its runs may be unfinished at once (null: 3).
    budget: Mapped[Any | None] = mapped_column(JSON)
    max_concurrent_runs: Mapped[int | None] = mapped_column(Integer)
    # Null while disabled. A tick fires a schedule by moving this forward with a
    # compare-and-set in the run's own transaction (``services.schedule_firing``).
    next_fire_at: Mapped[datetime | None] = mapped_column(index=True)
    last_fired_at: Mapped[datetime | None]
    # The last fire time that started no run, and why (overlap SKIP, agent not ACTIVE).
    last_skipped_at: Mapped[datetime | None]
    last_skip_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ScheduleFiring(Base):
    """One row per (schedule, fire time) that a tick served: the run it started, or the skip
    and why. The unique key is the database's word that a fire time is served once, however
    many workers tick at the same moment and however often they restart."""

    __tablename__ = "schedule_firings"
    __table_args__ = (UniqueConstraint("schedule_id", "fire_at"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    schedule_id: Mapped[int] = mapped_column(ForeignKey("schedules.id", ondelete="CASCADE"))
    fire_at: Mapped[datetime]
    # Earlier fire times coalesced into this one (workers were down, or the tick came late).
    missed: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(16))  # FIRED | SKIPPED
    reason: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[int | None] = mapped_column(Id)
    created_at: Mapped[datetime]


class McpServer(Base):
    """A Model Context Protocol server a workspace registered (docs/extending/mcp.md). Its
    ``headers`` map header names to environment variable *names*: no secret is stored."""

    __tablename__ = "mcp_servers"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(32))
    transport: Mapped[str] = mapped_column(String(16))
    url: Mapped[str | None] = mapped_column(Text)
    command: Mapped[list[Any] | None] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean)
    headers: Mapped[dict[str, Any]] = mapped_column(JSON)
    tool_risk: Mapped[dict[str, Any]] = mapped_column(JSON)
    last_synced_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class McpTool(Base):
    """A tool an MCP server listed at its last sync: what an agent is offered as
    ``mcp.<server>.<name>``. Replaced whole by each successful sync."""

    __tablename__ = "mcp_tools"
    __table_args__ = (UniqueConstraint("server_id", "name"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("mcp_servers.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    description: Mapped[str | None] = mapped_column(Text)
    annotations: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    input_schema: Mapped[dict[str, Any]] = mapped_column(JSON)


class AuditHead(Base):
    """Where a workspace's audit chain stands: its last sealed seq and hash. Locked (FOR
    UPDATE) only by the sealer, never by an append, so sealers of a workspace take turns
    while changes never wait on it (``services.audit``)."""

    __tablename__ = "audit_heads"

    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    seq: Mapped[int] = mapped_column(Integer)
    hash: Mapped[str] = mapped_column(String(64))


class AuditEvent(Base):
    """Append-only, hash-chained per workspace (``app.domain.audit``). Inserted unsealed
    (``seq``, ``prev_hash`` and ``hash`` null) by the change's transaction; the sealer numbers
    and chains it soon after and nothing else ever updates it (``services.audit``)."""

    __tablename__ = "audit_events"
    __table_args__ = (
        UniqueConstraint("workspace_id", "seq"),
        Index("ix_audit_events_workspace_id_object_id", "workspace_id", "object_id"),
        Index("ix_audit_events_seq", "seq"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    seq: Mapped[int | None] = mapped_column(Integer)
    at: Mapped[datetime]
    actor_kind: Mapped[str] = mapped_column(String(16))
    actor_id: Mapped[int | None] = mapped_column(Id)
    actor_name: Mapped[str | None] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(40))
    object_type: Mapped[str] = mapped_column(String(40))
    object_id: Mapped[int | None] = mapped_column(Id)
    summary: Mapped[str] = mapped_column(Text)
    diff: Mapped[Any | None] = mapped_column(JSON)
    prev_hash: Mapped[str | None] = mapped_column(String(64))
    hash: Mapped[str | None] = mapped_column(String(64))


class RunEvent(Base):
    """Append-only, numbered by ``seq`` per root run, gap-free: commit order is seq order."""

    __tablename__ = "run_events"
    __table_args__ = (UniqueConstraint("root_run_id", "seq"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    root_run_id: Mapped[int] = mapped_column(Id)
    seq: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[int] = mapped_column(Id)
    parent_run_id: Mapped[int | None] = mapped_column(Id)
    type: Mapped[str] = mapped_column(String(32))
    status: Mapped[str | None] = mapped_column(String(20))
    step_id: Mapped[int | None] = mapped_column(Id)
    payload: Mapped[Any | None] = mapped_column(JSON)
    at: Mapped[datetime]


# SQLite reuses the id of a deleted newest row unless the table says AUTOINCREMENT; a global
# id a client kept (or a revision history keyed by id) must never come to mean another row.
for _table in Base.metadata.tables.values():
    _table.dialect_options["sqlite"]["autoincrement"] = True
