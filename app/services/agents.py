"""Agent use cases: create and update (admin only). Agents are never deleted: archiving keeps
their runs, memories and history meaningful.

Everything is validated before the transaction opens, and the name check and the write share
one transaction; the unique constraint on (workspace_id, name) settles a race between two
creators, which we report as the same CONFLICT a sequential duplicate gets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db import orm
from app.db.session import retry_deadlocks
from app.domain.actors import Actor
from app.domain.agent_versions import VERSIONED_FIELDS, changes_configuration, config_of
from app.domain.agents import DEFAULT_MEMORY_MAX_CHARS, DEFAULT_MEMORY_MAX_ITEMS, AgentStatus, Role
from app.domain.audit import diff as audit_diff
from app.domain.budgets import parse_budget
from app.domain.errors import Conflict, NotFound, ValidationFailed
from app.domain.input_schema import check_schema
from app.domain.jsonvalue import depth_error
from app.domain.mcp import PREFIX as MCP_PREFIX
from app.domain.policy import tool_key, validate_policy
from app.engine.providers import validate_model_config
from app.engine.tools.registry import registered_tool_names
from app.events.stops import publish_stop
from app.services import audit
from app.services.auth import Principal
from app.services.reads import get_owned
from app.services.runtime import Runtime
from app.services.transitions import Released, release_held
from app.services.transitions.usage import check_budget
from app.services.validation import KEEP, Keep, check_int_range, check_string_list, check_text
from app.settings import Settings

NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
MAX_TOOL_PATTERNS = 100
MAX_TOOL_PATTERN_CHARS = 200
MEMORY_MAX_ITEMS_LIMIT = 200
MEMORY_MAX_CHARS_LIMIT = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentDraft:
    name: str
    model: Any
    description: str | None = None
    instructions: str | None = None
    tools: list[str] | None = None
    policy: Any = None
    memory_max_items: int | None = None
    memory_max_chars: int | None = None
    status: AgentStatus | None = None
    budget: Any = None  # docs/concepts/budgets.md
    input_schema: Any = None  # app/domain/input_schema.py


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentPatch:
    """``KEEP`` leaves a field alone; ``None`` clears the nullable text fields."""

    name: str | Keep = KEEP
    description: str | Keep | None = KEEP
    instructions: str | Keep | None = KEEP
    model: Any = KEEP
    tools: list[str] | Keep = KEEP
    policy: Any = KEEP
    memory_max_items: int | Keep = KEEP
    memory_max_chars: int | Keep = KEEP
    status: AgentStatus | Keep = KEEP
    budget: Any = KEEP
    input_schema: Any = KEEP


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ValidationFailed(
            "name must be 1-100 characters of letters, digits, '_', '.' and '-'", field="name"
        )
    return name


def _check_tools(tools: list[str]) -> list[str]:
    checked = check_string_list(
        tools, field="tools", max_items=MAX_TOOL_PATTERNS, max_chars=MAX_TOOL_PATTERN_CHARS
    )
    # Compared trimmed and case-folded (as policy rules are): stored so, duplicates dropped.
    return list(dict.fromkeys(tool_key(pattern) for pattern in checked))


async def _check_policy(rt: Runtime, policy: Any) -> dict[str, Any]:
    if rt.tool_names is None:
        rt.tool_names = await registered_tool_names(rt.settings)
    return validate_policy(policy, tool_names=rt.tool_names, open_prefixes=(MCP_PREFIX,))


def _check_model(model: Any, settings: Settings) -> dict[str, Any]:
    if not isinstance(model, dict):
        raise ValidationFailed("model must be a JSON object with a 'provider'", field="model")
    too_deep = depth_error(model, max_depth=settings.max_json_depth, what="model")
    if too_deep is not None:
        raise ValidationFailed(too_deep, field="model")
    # With the settings: which API key variables an agent may name is the deployment's call.
    checked = validate_model_config(model, settings)
    # The provider layer may normalise the config; store what it accepted.
    return checked if isinstance(checked, dict) else model


def _check_budget_items(value: int) -> int:
    return check_int_range(value, field="memoryBudget.maxItems", low=0, high=MEMORY_MAX_ITEMS_LIMIT)


def _check_budget_chars(value: int) -> int:
    return check_int_range(value, field="memoryBudget.maxChars", low=0, high=MEMORY_MAX_CHARS_LIMIT)


async def create_agent(rt: Runtime, principal: Principal, draft: AgentDraft) -> orm.Agent:
    principal.require(Role.ADMIN)
    max_chars = rt.settings.max_text_chars
    now = utcnow()
    row = orm.Agent(
        workspace_id=principal.workspace_id,
        name=check_name(draft.name),
        description=_opt_text(draft.description, "description", max_chars),
        instructions=_opt_text(draft.instructions, "instructions", max_chars),
        status=(draft.status or AgentStatus.ACTIVE).value,
        model=_check_model(draft.model, rt.settings),
        tools=_check_tools(draft.tools or []),
        policy=await _check_policy(rt, draft.policy),
        memory_max_items=_check_budget_items(
            DEFAULT_MEMORY_MAX_ITEMS if draft.memory_max_items is None else draft.memory_max_items
        ),
        memory_max_chars=_check_budget_chars(
            DEFAULT_MEMORY_MAX_CHARS if draft.memory_max_chars is None else draft.memory_max_chars
        ),
        budget=parse_budget(draft.budget),
        input_schema=_check_input_schema(draft.input_schema, rt.settings),
        created_at=now,
        updated_at=now,
    )
    _check_agent_budget(row, rt.settings)
    row.version = 1
    async with rt.sessionmaker() as session, session.begin():
        await _ensure_name_free(session, workspace_id=principal.workspace_id, name=row.name, agent_id=None)
        session.add(row)
        await _flush_unique_name(session, row.name)
        session.add(version_row(row, principal.actor, now))
        await audit.append(
            session, workspace_id=row.workspace_id, actor=principal.actor, action="agent.create",
            object_type="Agent", object_id=row.id, summary=f"created agent {row.name!r} (version 1)",
            diff=audit_diff({}, _audited(row)), at=now,
        )  # fmt: skip
    return row


async def update_agent(rt: Runtime, principal: Principal, *, agent_id: int, patch: AgentPatch) -> orm.Agent:
    principal.require(Role.ADMIN)
    changes = _validated_changes(patch, settings=rt.settings)
    if patch.policy is not KEEP:
        changes["policy"] = await _check_policy(rt, patch.policy)

    async def update() -> tuple[orm.Agent, str, dict[str, Any], Released]:
        async with rt.sessionmaker() as session, session.begin():
            released = Released()
            if changes.get("status") == AgentStatus.ACTIVE:
                # Runs before the agent's row, the order a claim takes them in (root, run, agent;
                # docs/architecture.md#lock-order): locked the other way round, a claim of one
                # of them and this release would wait on each other. Released even when the
                # agent turns out ACTIVE already: a run still held is held again by its claim.
                released = await release_held(session, workspace_id=principal.workspace_id, agent_id=agent_id)
            # Locked: the version number is read, bumped and written back (two updaters in a row
            # number their versions one after the other).
            row = await get_owned(
                session, orm.Agent, workspace_id=principal.workspace_id, pk=agent_id, lock=True
            )
            if "name" in changes and changes["name"] != row.name:
                await _ensure_name_free(
                    session, workspace_id=principal.workspace_id, name=changes["name"], agent_id=row.id
                )
            # Versioned before the row changes: compared with what the agent is now.
            new_version = changes_configuration(config_of(_columns(row)), changes)
            was = row.status
            before = _audited(row)
            for attr, value in changes.items():
                setattr(row, attr, value)
            if "budget" in changes or "model" in changes:
                _check_agent_budget(row, rt.settings)
            if changes:
                row.updated_at = utcnow()
            if new_version:
                row.version += 1
            await _flush_unique_name(session, row.name)
            if new_version:
                session.add(version_row(row, principal.actor, row.updated_at))
            changed = audit_diff(before, _audited(row))
            if changed:
                # A status change alone is agent.status; anything else is agent.update.
                action = "agent.status" if set(changed) == {"status"} else "agent.update"
                summary = (
                    f"agent {row.name!r} {was} -> {row.status}" if action == "agent.status"
                    else f"updated agent {row.name!r}: {', '.join(changed)}"
                    + (f" (version {row.version})" if new_version else "")
                )  # fmt: skip
                await audit.append(
                    session, workspace_id=row.workspace_id, actor=principal.actor, action=action,
                    object_type="Agent", object_id=row.id, summary=summary, diff=changed,
                )  # fmt: skip
        return row, was, changed, released

    # Deadlocks retried: releasing held runs locks them before the agent, as a claim does,
    # yet MariaDB can still pick this transaction as a victim (docs/architecture.md#lock-order).
    row, was, changed, released = await retry_deadlocks(update)
    # After commit (docs/concepts/holds.md): a paused or archived agent's running runs are
    # told at once and stop at their next step boundary; a resumed one's held runs go on.
    # A policy change reaches every live run with the agent on its chain (tightening is
    # live); a pause reaches the agent's own runs.
    if (was == AgentStatus.ACTIVE and row.status != AgentStatus.ACTIVE) or "policy" in changed:
        await publish_stop(rt, agents=[row.id])
    await released.enqueue(rt)
    return row


_AUDITED = ("name", "description", "status", *VERSIONED_FIELDS)


def _audited(row: orm.Agent) -> dict[str, Any]:
    return {name: getattr(row, name) for name in _AUDITED}


def _columns(row: orm.Agent) -> dict[str, Any]:
    return {name: getattr(row, name) for name in VERSIONED_FIELDS}


def version_row(row: orm.Agent, actor: Actor, now: datetime) -> orm.AgentVersion:
    """The agent's current configuration as its version ``row.version`` (the row has an id).
    Whatever writes an agent row writes this with it: a run of an agent is pinned to one."""
    return orm.AgentVersion(
        workspace_id=row.workspace_id,
        agent_id=row.id,
        version=row.version,
        config=config_of(_columns(row)),
        created_by=actor.to_json(),
        created_at=now,
    )


async def get_version(session: AsyncSession, *, agent_id: int, version: int) -> orm.AgentVersion:
    """One version of an agent (the caller checked the agent is the workspace's)."""
    row = await session.scalar(
        select(orm.AgentVersion).where(
            orm.AgentVersion.agent_id == agent_id, orm.AgentVersion.version == version
        )
    )
    if row is None:
        raise NotFound(f"agent {agent_id} has no version {version}", field="version")
    return row


def _validated_changes(patch: AgentPatch, *, settings: Settings) -> dict[str, Any]:
    """Column -> new value for every given field, all checked before anything is written."""
    max_chars = settings.max_text_chars
    changes: dict[str, Any] = {}
    if not isinstance(patch.name, Keep):
        changes["name"] = check_name(patch.name)
    if not isinstance(patch.description, Keep):
        changes["description"] = _opt_text(patch.description, "description", max_chars)
    if not isinstance(patch.instructions, Keep):
        changes["instructions"] = _opt_text(patch.instructions, "instructions", max_chars)
    if patch.model is not KEEP:
        changes["model"] = _check_model(patch.model, settings)
    if not isinstance(patch.tools, Keep):
        changes["tools"] = _check_tools(patch.tools)
    if not isinstance(patch.memory_max_items, Keep):
        changes["memory_max_items"] = _check_budget_items(patch.memory_max_items)
    if not isinstance(patch.memory_max_chars, Keep):
        changes["memory_max_chars"] = _check_budget_chars(patch.memory_max_chars)
    if not isinstance(patch.status, Keep):
        changes["status"] = patch.status.value
    if patch.budget is not KEEP:
        changes["budget"] = parse_budget(patch.budget)
    if patch.input_schema is not KEEP:
        changes["input_schema"] = _check_input_schema(patch.input_schema, settings)
    return changes


def _check_input_schema(schema: Any, settings: Settings) -> dict[str, Any] | None:
    too_deep = depth_error(schema, max_depth=settings.max_json_depth, what="inputSchema")
    if too_deep:
        raise ValidationFailed(too_deep, field="inputSchema")
    return check_schema(schema)


def _check_agent_budget(row: orm.Agent, settings: Settings) -> None:
    """An agent's budget stands on its own (it replaces the deployment's defaults), but a
    cost limit needs its model to have a price."""
    check_budget(settings, agent_name=row.name, agent_budget=row.budget or {}, model=row.model)


def _opt_text(value: str | None, field: str, max_chars: int) -> str | None:
    return None if value is None else check_text(value, field=field, max_chars=max_chars)


async def _ensure_name_free(
    session: AsyncSession, *, workspace_id: int, name: str, agent_id: int | None
) -> None:
    # Case-insensitive on every database (MariaDB's collation already is, SQLite is not), so
    # "Bot" and "bot" never coexist: delegation finds agents by name.
    stmt = select(orm.Agent.id).where(
        orm.Agent.workspace_id == workspace_id, func.lower(orm.Agent.name) == name.lower()
    )
    existing = await session.scalar(stmt)
    if existing is not None and existing != agent_id:
        raise Conflict(f"an agent named {name!r} already exists in this workspace", field="name")


async def _flush_unique_name(session: AsyncSession, name: str) -> None:
    # Two concurrent writers can both pass _ensure_name_free; the unique index decides, and
    # the loser gets the answer it would have got a moment later.
    try:
        await session.flush()
    except IntegrityError:
        raise Conflict(f"an agent named {name!r} already exists in this workspace", field="name") from None
