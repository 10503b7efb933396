"""The Query root. Every field authenticates (viewer role is enough to read) and sees only
the caller's workspace."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, TypeVar

import strawberry

from app.db import orm
from app.domain.actors import ActorKind
from app.domain.agents import AgentStatus, Role
from app.domain.errors import NotFound, ValidationFailed
from app.domain.runs import ApprovalStatus, RunStatus, RunTrigger
from app.graphql.context import Info
from app.graphql.ids import from_global_id, parse_global_id
from app.graphql.loaders import Loaders
from app.graphql.scalars import after_shown
from app.graphql.types.agents import Agent, AgentConnection, agent_connection
from app.graphql.types.approvals import Approval, ApprovalConnection, approval_connection
from app.graphql.types.audit import AuditEvent, AuditEventConnection, audit_connection
from app.graphql.types.mcp import McpServer, McpServerConnection, mcp_server_connection
from app.graphql.types.memories import Memory, MemoryConnection, MemoryRevision, memory_connection
from app.graphql.types.node import Node, Paged
from app.graphql.types.policy_preview import PolicyPreview
from app.graphql.types.runs import Run, RunConnection, RunStep, run_connection
from app.graphql.types.schedules import Schedule, ScheduleFiring
from app.graphql.types.tokens import ApiTokenConnection, api_token_connection, api_token_node
from app.graphql.types.tools import ToolDescriptor
from app.graphql.types.versions import AgentVersion
from app.graphql.types.workspace import Viewer, Workspace
from app.services import policy_preview, reads, tool_catalog
from app.services.auth import Principal
from app.services.reads import PageRequest, RunFilter

R = TypeVar("R")


async def _node_of(type_name: str, pk: int, loaders: Loaders, principal: Principal) -> Node | None:
    """Loaders are scoped to the caller's workspace, so another tenant's row loads as None."""
    match type_name:
        case "Agent":
            return _maybe(await loaders.agent.load(pk), Agent.from_row)
        case "AuditEvent":
            if not principal.role.allows(Role.OPERATOR):
                return None  # the audit trail is for operators and admins
            event = await loaders.audit_event.load(pk)
            sealed = event if event is not None and event.seq is not None else None  # sealed soon
            return _maybe(sealed, AuditEvent.from_row)
        case "AgentVersion":
            return _maybe(await loaders.version_by_id.load(pk), AgentVersion.from_row)
        case "Run":
            return _maybe(await loaders.run.load(pk), Run.from_row)
        case "RunStep":
            return _maybe(await loaders.step.load(pk), RunStep.from_row)
        case "Memory":
            return _maybe(await loaders.memory.load(pk), Memory.from_row)
        case "Approval":
            return _maybe(await loaders.approval.load(pk), Approval.from_row)
        case "Schedule":
            return _maybe(await loaders.schedule.load(pk), Schedule.from_row)
        case "MemoryRevision":
            return _maybe(await loaders.memory_revision.load(pk), MemoryRevision.from_row)
        case "ScheduleFiring":
            return _maybe(await loaders.firing.load(pk), ScheduleFiring.from_row)
    return None


async def _node(info: Info, id: str) -> Node | None:
    principal = await info.context.principal()
    parsed = parse_global_id(id)
    if parsed is None:
        return None
    type_name, pk = parsed
    loaders = await info.context.loaders()
    if type_name == "ApiToken":
        try:
            return await api_token_node(info, pk)
        except NotFound:
            return None
    if type_name == "McpServer":
        async with info.context.session() as session:
            server = await session.get(orm.McpServer, pk)
        if server is None or server.workspace_id != principal.workspace_id:
            return None  # another workspace's server does not exist for you
        return McpServer.from_row(server)
    if type_name == "Workspace":
        if pk != principal.workspace_id:
            return None
        row = await loaders.workspace.load(pk)
        return None if row is None else Workspace.from_row(row)
    return await _node_of(type_name, pk, loaders, principal)


def _maybe(row: R | None, convert: Callable[[R], Node]) -> Node | None:
    return None if row is None else convert(row)


@strawberry.type(
    name="Query",
    description="Everything readable: with a viewer token or better, within the caller's workspace only.",
)
class Query:
    @strawberry.field(description="Who is calling: the token's workspace and role.")
    async def viewer(self, info: Info) -> Viewer:
        principal = await info.context.principal()
        return Viewer(workspace_id=principal.workspace_id, role=principal.role.value, access=principal.role)

    @strawberry.field(
        description=(
            "Any object by its global id. Null with no error when there is none for you: an "
            "unknown, another workspace's or a malformed id alike (a cache may ask for anything "
            "it holds). `agent(id:)`, `run(id:)` and `agentByName` answer null with NOT_FOUND."
        )
    )
    async def node(
        self,
        info: Info,
        id: Annotated[
            strawberry.ID, strawberry.argument(description="A global id, as any `id` field gives it.")
        ],
    ) -> Node | None:
        return await _node(info, id)

    @strawberry.field(description="The workspace's agents, newest first.", extensions=[Paged()])
    async def agents(
        self,
        info: Info,
        page: PageRequest,
        status: Annotated[
            AgentStatus | None,
            strawberry.argument(
                description="Agents in this status.", deprecation_reason="Use `statuses`, which takes a list."
            ),
        ] = None,
        statuses: Annotated[
            list[AgentStatus] | None, strawberry.argument(description="Agents in any of these statuses.")
        ] = None,
    ) -> AgentConnection:
        wanted = [*(statuses or ()), *([status] if status is not None else ())]
        return await agent_connection(info, page=page, statuses=wanted)

    @strawberry.field(description="The agent with this id; null with NOT_FOUND when there is none for you.")
    async def agent(
        self,
        info: Info,
        id: Annotated[strawberry.ID, strawberry.argument(description="The agent's global id.")],
    ) -> Agent | None:
        loaders = await info.context.loaders()  # authenticate before judging the id
        row = await loaders.agent.load(from_global_id(id, "Agent", field="id"))
        if row is None:
            raise NotFound("no agent with this id", field="id")
        return Agent.from_row(row)

    @strawberry.field(description="The agent called exactly `name`; null with NOT_FOUND when there is none.")
    async def agent_by_name(
        self,
        info: Info,
        name: Annotated[
            str,
            strawberry.argument(description="The agent's name, exactly (names are unique in a workspace)."),
        ],
    ) -> Agent | None:
        principal = await info.context.principal()
        async with info.context.session() as session:
            row = await reads.find_agent_by_name(session, workspace_id=principal.workspace_id, name=name)
        if row is None:
            raise NotFound("no agent with this name", field="name")
        return Agent.from_row(row)

    @strawberry.field(
        description=(
            "Objects by their global ids, in the order asked; null, with no error, for each id "
            "`node(id:)` would answer null for."
        )
    )
    async def nodes(
        self,
        info: Info,
        ids: Annotated[
            list[strawberry.ID], strawberry.argument(description="Global ids, as `id` fields give them.")
        ],
    ) -> list[Node | None]:
        # One after another: the request's one database session takes one query at a time.
        # The list is capped (ENVERIF_MAX_LIST_ARG_ITEMS) before any of this runs.
        return [await _node(info, id) for id in ids]

    @strawberry.field(description="The run with this id; null with NOT_FOUND when there is none for you.")
    async def run(
        self,
        info: Info,
        id: Annotated[strawberry.ID, strawberry.argument(description="The run's global id.")],
    ) -> Run | None:
        loaders = await info.context.loaders()
        row = await loaders.run.load(from_global_id(id, "Run", field="id"))
        if row is None:
            raise NotFound("no run with this id", field="id")
        return Run.from_row(row)

    @strawberry.field(
        description=(
            "Runs, newest first; rootsOnly leaves out delegated child runs. Filters combine: "
            "a run must match every one given."
        ),
        extensions=[Paged()],
    )
    async def runs(
        self,
        info: Info,
        page: PageRequest,
        status: Annotated[
            list[RunStatus] | None, strawberry.argument(description="Runs in any of these statuses.")
        ] = None,
        agent_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(
                description="Runs of this agent (global id); NOT_FOUND when there is no such agent."
            ),
        ] = None,
        roots_only: Annotated[
            bool | None, strawberry.argument(description="True: root runs only, no delegated child runs.")
        ] = None,
        trigger: Annotated[
            list[RunTrigger] | None, strawberry.argument(description="Runs started in any of these ways.")
        ] = None,
        created_after: Annotated[
            datetime | None,
            strawberry.argument(
                description="Runs created after this instant (exclusive; to the millisecond, a createdAt given back excludes its own run)."
            ),
        ] = None,
        created_before: Annotated[
            datetime | None, strawberry.argument(description="Runs created before this instant (exclusive).")
        ] = None,
    ) -> RunConnection:
        agent_pk = None if agent_id is None else await _agent_pk(info, agent_id)
        found = RunFilter(
            statuses=status,
            agent_id=agent_pk,
            roots_only=bool(roots_only),
            triggers=trigger,
            created_after=_after_shown(_aware(created_after, "createdAfter")),
            created_before=_aware(created_before, "createdBefore"),
        )
        return await run_connection(info, page=page, filter=found)

    @strawberry.field(
        description=(
            "An agent's memories carrying all of `tags`. Without `query`: newest first. With `query`: "
            "full-text search over key, value and tags (each word matches as a prefix; memories "
            "holding every word, or any word when fewer than 200 hold them all), best first by "
            "relevance, importance and recency; at most 200 results (`orderBy` applies without "
            "`query` only)."
        ),
        extensions=[Paged()],
    )
    async def memories(
        self,
        info: Info,
        agent_id: Annotated[
            strawberry.ID, strawberry.argument(description="The agent whose memories to list (global id).")
        ],
        page: PageRequest,
        query: Annotated[
            str | None,
            strawberry.argument(
                description="Words to search for; without it, memories are listed newest first."
            ),
        ] = None,
        tags: Annotated[
            list[str] | None,
            strawberry.argument(description="Only memories carrying every one of these tags."),
        ] = None,
    ) -> MemoryConnection:
        await info.context.principal()
        pk = from_global_id(agent_id, "Agent", field="agentId")
        return await memory_connection(info, agent_id=pk, query=query, tags=tags, page=page)

    @strawberry.field(
        description="The workspace's audit trail, newest first (operators and admins).", extensions=[Paged()]
    )
    async def audit_events(
        self,
        info: Info,
        page: PageRequest,
        action: Annotated[
            str | None, strawberry.argument(description="Only events of this action, e.g. agent.update.")
        ] = None,
        object_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(description="Only events about this object (its global id)."),
        ] = None,
        actor_kind: Annotated[
            ActorKind | None, strawberry.argument(description="Only events made by this kind of actor.")
        ] = None,
        since: Annotated[
            datetime | None,
            strawberry.argument(description="Only events from this instant on; needs a time zone."),
        ] = None,
    ) -> AuditEventConnection:
        return await audit_connection(
            info,
            page=page,
            action=action,
            object_id=object_id,
            actor_kind=actor_kind,
            since=since,
        )

    @strawberry.field(description="Approvals, newest first. Filters combine.", extensions=[Paged()])
    async def approvals(
        self,
        info: Info,
        page: PageRequest,
        status: Annotated[
            ApprovalStatus | None,
            strawberry.argument(
                description="Only approvals in this status (PENDING: the ones waiting for a decision)."
            ),
        ] = None,
        run_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(description="The approvals this run asked for (not its children's)."),
        ] = None,
        agent_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(description="The approvals runs of this agent asked for."),
        ] = None,
    ) -> ApprovalConnection:
        run_pk = None
        if run_id is not None:
            run_pk = from_global_id(run_id, "Run", field="runId")
            if await (await info.context.loaders()).run.load(run_pk) is None:
                raise NotFound("no run with this id", field="runId")
        agent_pk = None if agent_id is None else await _agent_pk(info, agent_id)
        return await approval_connection(info, page=page, status=status, run_id=run_pk, agent_id=agent_pk)

    @strawberry.field(description="The workspace's MCP servers, newest first.", extensions=[Paged()])
    async def mcp_servers(self, info: Info, page: PageRequest) -> McpServerConnection:
        return await mcp_server_connection(info, page=page)

    @strawberry.field(
        description="The workspace's API tokens, newest first, revoked ones too (admins only).",
        extensions=[Paged()],
    )
    async def api_tokens(self, info: Info, page: PageRequest) -> ApiTokenConnection:
        return await api_token_connection(info, page=page)

    @strawberry.field(
        description="Every tool an agent of the workspace can be offered, by name: the workers' built-ins "
        "and plugins, and the enabled MCP servers' tools, each with the JSON Schema of its arguments."
    )
    async def tools(
        self,
        info: Info,
        names: Annotated[
            list[str] | None,
            strawberry.argument(description="Only these tools (unknown names are left out); all when null."),
        ] = None,
    ) -> list[ToolDescriptor]:
        principal = await info.context.principal()
        found = await tool_catalog.workspace_tools(info.context.runtime, principal, names=names)
        return [ToolDescriptor.of(t) for t in found]

    @strawberry.field(
        description="What would be decided for a call of `tool` in a new run down `agentIds` (root first, "
        "the calling agent last): each agent's current policy, the strictest wins (docs/concepts/policy.md)."
    )
    async def policy_preview(
        self,
        info: Info,
        tool: Annotated[
            str, strawberry.argument(description="The tool name a call would be for, e.g. webhook.post.")
        ],
        agent_ids: Annotated[
            list[strawberry.ID],
            strawberry.argument(
                description="The agents of the would-be run's chain, root first (global ids)."
            ),
        ],
    ) -> PolicyPreview:
        principal = await info.context.principal()
        ids = [from_global_id(i, "Agent", field="agentIds") for i in agent_ids]
        preview = await policy_preview.preview(info.context.runtime, principal, tool=tool, agent_ids=ids)
        return PolicyPreview.from_preview(preview)


async def _agent_pk(info: Info, agent_id: str) -> int:
    """The workspace's agent behind an ``agentId`` argument, or NOT_FOUND naming it."""
    pk = from_global_id(agent_id, "Agent", field="agentId")
    if await (await info.context.loaders()).agent.load(pk) is None:
        raise NotFound("no agent with this id", field="agentId")
    return pk


def _after_shown(value: datetime | None) -> datetime | None:
    """A ``createdAt`` given back as ``createdAfter`` excludes its own run, although the run's
    stored time has microseconds the answer did not show (app/graphql/scalars.py)."""
    return None if value is None else after_shown(value)


def _aware(value: datetime | None, field: str) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValidationFailed(f"{field} needs a time zone (e.g. ...Z)", field=field)
    return value
