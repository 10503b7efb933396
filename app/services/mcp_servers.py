"""A workspace's MCP servers (admins): register, edit, sync, remove (docs/extending/mcp.md).

Creating a server and changing how it is reached (transport, url, command, headers) list its
tools right away, before anything is written: a server that cannot be reached, is refused by
the network guard, or does not speak MCP is a ``VALIDATION_FAILED`` naming ``url`` (or
``command``), and nothing is stored. ``syncMcpServer`` lists them again; when that fails, the
server keeps the tools of its last good sync and ``lastError`` says why. A listed tool that
cannot become an agent tool (a name with a dot or a slash, an input schema that is not JSON
Schema) is left out, and ``lastError`` names it.

The listing is I/O and runs outside any transaction; its result is written in one, with its
audit event (``mcp_server.create|update|sync|delete``; a ``toolRisk`` override is in the
event's diff and named in its summary: it changes what runs without asking).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema
from sqlalchemy import Select, delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db import orm
from app.domain.agents import Role
from app.domain.audit import diff as audit_diff
from app.domain.errors import Conflict, NotFound, ValidationFailed
from app.domain.jsonvalue import NotStorable, depth_error, strict_json
from app.domain.mcp import (
    Transport,
    check_headers,
    check_server_name,
    check_tool_risk,
    check_transport_fields,
    tool_name_problem,
)
from app.domain.model_errors import ModelErrorCode
from app.engine.mcp_client import McpRefused, McpUnavailable, ServerSpec, describe, list_tools
from app.services import audit
from app.services.auth import Principal
from app.services.reads import Page, PageRequest, fetch_page, get_owned
from app.services.runtime import Runtime
from app.services.validation import KEEP, Keep

MAX_DESCRIPTION_CHARS = 4_000
MAX_SCHEMA_BYTES = 65_536
MAX_ERROR_CHARS = 2_000
# MariaDB refuses JSON nested deeper than it stores (ENVERIF_MAX_JSON_DEPTH's default, 32;
# SQLite does not): a schema is stored inside a tool row and shown in results, so it gets
# less (counted as ``json_depth`` does: 1 for a scalar, +1 per object or array around it).
MAX_SCHEMA_DEPTH = 25


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerDraft:
    name: str
    transport: Transport
    url: str | None = None
    command: list[str] | None = None
    enabled: bool | None = None
    headers: Any = None
    tool_risk: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerPatch:
    url: str | Keep | None = KEEP
    command: list[str] | Keep | None = KEEP
    enabled: bool | Keep = KEEP
    headers: Any = KEEP
    tool_risk: Any = KEEP


@dataclass(frozen=True, slots=True)
class ListedTool:
    name: str
    description: str | None
    annotations: dict[str, Any] | None
    input_schema: dict[str, Any]


def _field_of(transport: Transport) -> str:
    return "command" if transport is Transport.STDIO else "url"


def usable_tools(server: str, listed: list[Any]) -> tuple[list[ListedTool], list[str]]:
    """The listed tools that can become agent tools, and why the others cannot."""
    kept: list[ListedTool] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for tool in listed:
        problem = tool_name_problem(server, tool.name)
        schema = tool.input_schema
        if problem is None and tool.name in seen:
            problem = f"tool {tool.name!r} is listed twice"
        if problem is None:
            try:
                schema = strict_json(schema, max_bytes=MAX_SCHEMA_BYTES, what=f"{tool.name}'s inputSchema")
                if not isinstance(schema, dict):
                    raise jsonschema.SchemaError("not an object")
                if too_deep := depth_error(
                    schema, max_depth=MAX_SCHEMA_DEPTH, what=f"{tool.name}'s inputSchema"
                ):
                    raise NotStorable(ModelErrorCode.NOT_JSON, too_deep)
                jsonschema.validators.validator_for(schema).check_schema(schema)
            except NotStorable as exc:
                problem = exc.message
            except jsonschema.SchemaError as exc:
                problem = f"{tool.name}'s inputSchema is not valid JSON Schema: {exc.message[:200]}"
        if problem is not None:
            skipped.append(problem)
            continue
        seen.add(tool.name)
        annotations = None
        if tool.annotations is not None:
            annotations = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
        description = (tool.description or "")[:MAX_DESCRIPTION_CHARS] or None
        kept.append(ListedTool(tool.name, description, annotations, schema))
    return kept, skipped


def _skipped_note(skipped: list[str]) -> str | None:
    return ("tools left out: " + "; ".join(skipped))[:MAX_ERROR_CHARS] if skipped else None


async def _list(rt: Runtime, spec: ServerSpec) -> list[Any]:
    """List the server's tools for the API: what goes wrong is the admin's to fix."""
    field = _field_of(spec.transport)
    try:
        return await list_tools(spec, rt.settings, timeout_s=rt.settings.http_timeout_s)
    except McpRefused as exc:
        raise ValidationFailed(
            str(exc), field="headers" if str(exc).startswith("header") else field
        ) from None
    except McpUnavailable as exc:
        raise ValidationFailed(f"could not list the server's tools: {exc}", field=field) from None
    except Exception as exc:
        raise ValidationFailed(f"could not list the server's tools: {describe(exc)}", field=field) from None


def replace_tools(session: AsyncSession, row: orm.McpServer, tools: list[ListedTool]) -> None:
    for tool in tools:
        session.add(
            orm.McpTool(
                workspace_id=row.workspace_id,
                server_id=row.id,
                name=tool.name,
                description=tool.description,
                annotations=tool.annotations,
                input_schema=tool.input_schema,
            )
        )


def _audited(row: orm.McpServer, tools: list[str]) -> dict[str, Any]:
    return {
        "name": row.name, "transport": row.transport, "url": row.url, "command": row.command,
        "enabled": row.enabled, "headers": row.headers or {}, "toolRisk": row.tool_risk or {}, "tools": tools,
    }  # fmt: skip


def _risk_changes(server: str, before: dict[str, Any], after: dict[str, Any]) -> str:
    """``; risk of mcp.crm.create_lead: its annotations -> READ`` for each override changed."""
    changed = [
        f"mcp.{server}.{tool}: {before.get(tool, 'its annotations')} -> {after.get(tool, 'its annotations')}"
        for tool in sorted(set(before) | set(after))
        if before.get(tool) != after.get(tool)
    ]
    return f"; risk of {', '.join(changed)}" if changed else ""


async def _record(
    session: AsyncSession, principal: Principal, row: orm.McpServer, action: str, summary: str,
    before: dict[str, Any], after: dict[str, Any],
) -> None:  # fmt: skip
    if after:  # a removal drops the overrides with the server; no need to name them
        summary += _risk_changes(row.name, before.get("toolRisk", {}), after.get("toolRisk", {}))
    await audit.append(
        session, workspace_id=row.workspace_id, actor=principal.actor, action=action, object_type="McpServer",
        object_id=row.id, summary=summary, diff=audit_diff(before, after),
    )  # fmt: skip


async def _tool_names(session: AsyncSession, server_id: int) -> list[str]:
    stmt = select(orm.McpTool.name).where(orm.McpTool.server_id == server_id).order_by(orm.McpTool.name)
    return list(await session.scalars(stmt))


def _spec(row_id: int, workspace_id: int, name: str, transport: Transport, url: str | None,
          command: list[str] | None, headers: dict[str, str]) -> ServerSpec:  # fmt: skip
    return ServerSpec(
        id=row_id,
        workspace_id=workspace_id,
        name=name,
        transport=transport,
        url=url,
        command=None if command is None else tuple(command),
        headers=tuple(sorted(headers.items())),
    )


async def create_server(rt: Runtime, principal: Principal, draft: ServerDraft) -> orm.McpServer:
    principal.require(Role.ADMIN)
    settings = rt.settings
    name = check_server_name(draft.name)
    url, command = check_transport_fields(
        draft.transport, url=draft.url, command=draft.command, stdio_commands=settings.mcp_stdio_commands
    )
    headers = check_headers(draft.headers, allowed_envs=settings.mcp_secret_envs)
    if headers and draft.transport is Transport.STDIO:
        raise ValidationFailed("headers are only for STREAMABLE_HTTP servers", field="headers")
    tool_risk = check_tool_risk(draft.tool_risk)
    async with rt.sessionmaker() as session:
        taken = await session.scalar(
            select(orm.McpServer.id).where(
                orm.McpServer.workspace_id == principal.workspace_id, orm.McpServer.name == name
            )
        )
    if taken is not None:
        raise Conflict(f"an MCP server named {name!r} exists already", field="name")
    listed = await _list(rt, _spec(0, principal.workspace_id, name, draft.transport, url, command, headers))
    tools, skipped = usable_tools(name, listed)
    now = utcnow()
    row = orm.McpServer(
        workspace_id=principal.workspace_id,
        name=name,
        transport=draft.transport.value,
        url=url,
        command=command,
        enabled=True if draft.enabled is None else draft.enabled,
        headers=headers,
        tool_risk=tool_risk,
        last_synced_at=now,
        last_error=_skipped_note(skipped),
        created_at=now,
        updated_at=now,
    )
    try:
        async with rt.sessionmaker() as session, session.begin():
            session.add(row)
            await session.flush()
            replace_tools(session, row, tools)
            await _record(session, principal, row, "mcp_server.create",
                          f"registered MCP server {name!r} ({len(tools)} tools)", {},
                          _audited(row, sorted(t.name for t in tools)))  # fmt: skip
    except IntegrityError:
        raise Conflict(f"an MCP server named {name!r} exists already", field="name") from None
    return row


async def update_server(
    rt: Runtime, principal: Principal, *, server_id: int, patch: ServerPatch
) -> orm.McpServer:
    principal.require(Role.ADMIN)
    settings = rt.settings
    async with rt.sessionmaker() as session:
        current = await get_owned(session, orm.McpServer, workspace_id=principal.workspace_id, pk=server_id)
    transport = Transport(current.transport)
    url = current.url if isinstance(patch.url, Keep) else patch.url
    command = current.command if isinstance(patch.command, Keep) else patch.command
    url, command = check_transport_fields(
        transport, url=url, command=command, stdio_commands=settings.mcp_stdio_commands
    )
    headers = dict(current.headers or {})
    if patch.headers is not KEEP:
        headers = check_headers(patch.headers, allowed_envs=settings.mcp_secret_envs)
        if headers and transport is Transport.STDIO:
            raise ValidationFailed("headers are only for STREAMABLE_HTTP servers", field="headers")
    tool_risk = dict(current.tool_risk or {})
    if patch.tool_risk is not KEEP:
        tool_risk = check_tool_risk(patch.tool_risk)
    reached_differently = (url, command, headers) != (
        current.url,
        current.command,
        dict(current.headers or {}),
    )
    listed = None
    if reached_differently:
        listed = await _list(
            rt, _spec(current.id, current.workspace_id, current.name, transport, url, command, headers)
        )
    now = utcnow()
    async with rt.sessionmaker() as session, session.begin():
        row = await get_owned(session, orm.McpServer, workspace_id=principal.workspace_id, pk=server_id)
        before = _audited(row, await _tool_names(session, row.id))
        after_tools = before["tools"]
        row.url, row.command, row.headers, row.tool_risk = url, command, headers, tool_risk
        if not isinstance(patch.enabled, Keep):
            row.enabled = patch.enabled
        if listed is not None:
            tools, skipped = usable_tools(row.name, listed)
            await session.execute(delete(orm.McpTool).where(orm.McpTool.server_id == row.id))
            replace_tools(session, row, tools)
            row.last_synced_at, row.last_error = now, _skipped_note(skipped)
            after_tools = sorted(t.name for t in tools)
        row.updated_at = now
        after = _audited(row, after_tools)
        if after != before:  # an update that changes nothing records nothing
            await _record(session, principal, row, "mcp_server.update", f"updated MCP server {row.name!r}",
                          before, after)  # fmt: skip
    return row


async def sync_server(rt: Runtime, principal: Principal, *, server_id: int) -> orm.McpServer:
    """List the server's tools again. A failure is recorded in ``lastError`` (the tools of
    the last good sync stay), not raised: the answer shows the server as it now stands."""
    principal.require(Role.ADMIN)
    async with rt.sessionmaker() as session:
        current = await get_owned(session, orm.McpServer, workspace_id=principal.workspace_id, pk=server_id)
    spec = ServerSpec.of_row(current)
    listed: list[Any] | None = None
    error: str | None = None
    try:
        listed = await _list(rt, spec)
    except ValidationFailed as exc:
        error = exc.message[:MAX_ERROR_CHARS]
    now = utcnow()
    async with rt.sessionmaker() as session, session.begin():
        row = await get_owned(session, orm.McpServer, workspace_id=principal.workspace_id, pk=server_id)
        before = {"tools": await _tool_names(session, row.id), "lastError": row.last_error}
        if listed is None:
            row.last_error = error
            summary = f"synced MCP server {row.name!r}: it failed, the last good tools stay"
            after = {**before, "lastError": row.last_error}
        else:
            tools, skipped = usable_tools(row.name, listed)
            await session.execute(delete(orm.McpTool).where(orm.McpTool.server_id == row.id))
            replace_tools(session, row, tools)
            row.last_synced_at, row.last_error = now, _skipped_note(skipped)
            summary = f"synced MCP server {row.name!r} ({len(tools)} tools)"
            after = {"tools": sorted(t.name for t in tools), "lastError": row.last_error}
        row.updated_at = now
        await _record(session, principal, row, "mcp_server.sync", summary, before, after)
    return row


async def delete_server(rt: Runtime, principal: Principal, *, server_id: int) -> int:
    principal.require(Role.ADMIN)
    async with rt.sessionmaker() as session, session.begin():
        row = await get_owned(session, orm.McpServer, workspace_id=principal.workspace_id, pk=server_id)
        before = _audited(row, await _tool_names(session, row.id))
        await session.execute(delete(orm.McpTool).where(orm.McpTool.server_id == row.id))
        await session.delete(row)
        await _record(
            session, principal, row, "mcp_server.delete", f"removed MCP server {row.name!r}", before, {}
        )
    return server_id


def servers_query(workspace_id: int) -> Select[orm.McpServer]:
    return select(orm.McpServer).where(orm.McpServer.workspace_id == workspace_id)


async def list_servers(session: AsyncSession, *, workspace_id: int, page: PageRequest) -> Page[orm.McpServer]:
    return await fetch_page(session, servers_query(workspace_id), id_column=orm.McpServer.id, page=page)


async def server_tools(session: AsyncSession, *, workspace_id: int, server_id: int) -> list[orm.McpTool]:
    stmt = (
        select(orm.McpTool)
        .where(orm.McpTool.workspace_id == workspace_id, orm.McpTool.server_id == server_id)
        .order_by(orm.McpTool.name)
    )
    return list((await session.scalars(stmt)).all())


async def server_named(session: AsyncSession, *, workspace_id: int, name: str) -> orm.McpServer:
    """A server by its name (the command line); another workspace's is NOT_FOUND."""
    row = await session.scalar(
        select(orm.McpServer).where(orm.McpServer.workspace_id == workspace_id, orm.McpServer.name == name)
    )
    if row is None:
        raise NotFound(f"no MCP server named {name!r} in this workspace", field="name")
    return row


async def tool_counts(session: AsyncSession, *, workspace_id: int) -> dict[int, int]:
    stmt = (
        select(orm.McpTool.server_id, func.count())
        .where(orm.McpTool.workspace_id == workspace_id)
        .group_by(orm.McpTool.server_id)
    )
    return {server_id: count for server_id, count in (await session.execute(stmt)).all()}
