"""The Mutation root: decode ids, call the service, map the row back.

Services own the transactions and the role checks. The role is also checked here first, only
so that a caller without the role gets FORBIDDEN whatever ids it sent (instead of NOT_FOUND
for a malformed one) — the services stay the authority.
"""

from __future__ import annotations

import strawberry
from strawberry.scalars import JSON

from app.domain.agents import Role
from app.domain.approvals import DecisionAsk
from app.domain.runs import RunTrigger
from app.graphql.context import Info
from app.graphql.ids import from_global_id, to_global_id
from app.graphql.inputs import (
    CreateAgentInput,
    CreateMcpServerInput,
    MemoryInput,
    MemoryPatch,
    RunFilterInput,
    ScheduleInput,
    SchedulePatch,
    UpdateAgentInput,
    UpdateMcpServerInput,
)
from app.graphql.types.agents import Agent
from app.graphql.types.approvals import Approval
from app.graphql.types.enums import ApprovalDecision, ApprovalScope
from app.graphql.types.mcp import McpServer
from app.graphql.types.memories import Memory
from app.graphql.types.runs import Run
from app.graphql.types.schedules import Schedule
from app.graphql.types.tokens import ApiToken, CreateApiTokenInput, CreatedApiToken
from app.graphql.types.workspace import Workspace
from app.services import (
    agents,
    approval_webhooks,
    approvals,
    auth,
    holds,
    mcp_servers,
    memories,
    runs,
    schedules,
)
from app.services.auth import Principal


async def _caller(info: Info, role: Role) -> Principal:
    principal = await info.context.principal()
    principal.require(role)
    return principal


@strawberry.type(name="Mutation")
class Mutation:
    # -- agents (admin) ---------------------------------------------------------------------

    @strawberry.mutation
    async def create_agent(self, info: Info, input: CreateAgentInput) -> Agent:
        principal = await _caller(info, Role.ADMIN)
        row = await agents.create_agent(info.context.runtime, principal, input.to_draft())
        return Agent.from_row(row)

    @strawberry.mutation
    async def update_agent(self, info: Info, id: strawberry.ID, input: UpdateAgentInput) -> Agent:
        principal = await _caller(info, Role.ADMIN)
        agent_id = from_global_id(id, "Agent", field="id")
        row = await agents.update_agent(
            info.context.runtime, principal, agent_id=agent_id, patch=input.to_patch()
        )
        return Agent.from_row(row)

    # -- the workspace-wide emergency stop (admin) ---------------------------------------------

    @strawberry.mutation(
        description="Holds every run of the workspace and skips its schedules until resumed."
    )
    async def pause_workspace(self, info: Info, reason: str) -> Workspace:
        principal = await _caller(info, Role.ADMIN)
        return Workspace.from_row(await holds.pause_workspace(info.context.runtime, principal, reason=reason))

    @strawberry.mutation(description="Lifts pauseWorkspace: held runs go on where they stopped.")
    async def resume_workspace(self, info: Info) -> Workspace:
        principal = await _caller(info, Role.ADMIN)
        return Workspace.from_row(await holds.resume_workspace(info.context.runtime, principal))

    @strawberry.mutation(
        description="Sets where every requested approval is POSTed (signed with the secret in the "
        "environment variable secretEnv); without url, removes it."
    )
    async def set_approval_webhook(
        self, info: Info, url: str | None = None, secret_env: str | None = None
    ) -> Workspace:
        principal = await _caller(info, Role.ADMIN)
        row = await approval_webhooks.set_approval_webhook(
            info.context.runtime, principal, url=url, secret_env=secret_env
        )
        return Workspace.from_row(row)

    # -- runs and approvals (operator) --------------------------------------------------------

    @strawberry.mutation
    async def start_run(
        self, info: Info, agent_id: strawberry.ID, input: JSON | None = None, budget: JSON | None = None
    ) -> Run:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(agent_id, "Agent", field="agentId")
        row = await runs.start_run(
            info.context.runtime, principal, agent_id=pk, input=input, trigger=RunTrigger.API, budget=budget
        )
        return Run.from_row(row)

    @strawberry.mutation(description="Cancels the run and every unfinished run below it.")
    async def cancel_run(self, info: Info, id: strawberry.ID, reason: str | None = None) -> Run:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(id, "Run", field="id")
        row = await runs.cancel_run(info.context.runtime, principal, run_id=pk, reason=reason)
        return Run.from_row(row)

    @strawberry.mutation(
        description="Cancels, with their subtrees, the unfinished runs the filter selects (at most "
        "1000 per call). An empty filter is refused unless all: true."
    )
    async def cancel_runs(
        self, info: Info, filter: RunFilterInput, reason: str | None = None, all: bool = False
    ) -> list[Run]:
        principal = await _caller(info, Role.OPERATOR)
        rows = await runs.cancel_runs(
            info.context.runtime, principal, filter=filter.to_filter(), reason=reason, all=all
        )
        return [Run.from_row(r) for r in rows]

    @strawberry.mutation(
        description="Decides a pending approval: APPROVE, REJECT (the reason reaches the model), "
        "EDIT (runs the tool with `arguments`, checked and decided again by policy) or RESPOND "
        "(the tool does not run; the model receives {response}). scope RUN also approves the "
        "tool's later calls in this run. The older form, approve: Boolean, still works."
    )
    async def decide_approval(
        self,
        info: Info,
        id: strawberry.ID,
        approve: bool | None = None,
        reason: str | None = None,
        decision: ApprovalDecision | None = None,
        arguments: JSON | None = strawberry.UNSET,
        response: JSON | None = strawberry.UNSET,
        scope: ApprovalScope | None = None,
    ) -> Approval:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(id, "Approval", field="id")
        ask = DecisionAsk(
            approve=approve, decision=decision, reason=reason, scope=scope,
            arguments=None if arguments is strawberry.UNSET else arguments,
            response=None if response is strawberry.UNSET else response,
            has_arguments=arguments is not strawberry.UNSET, has_response=response is not strawberry.UNSET,
        )  # fmt: skip
        row = await approvals.decide_approval(info.context.runtime, principal, approval_id=pk, ask=ask)
        return Approval.from_row(row)

    # -- memories (operator) ------------------------------------------------------------------

    @strawberry.mutation
    async def create_memory(self, info: Info, agent_id: strawberry.ID, input: MemoryInput) -> Memory:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(agent_id, "Agent", field="agentId")
        row = await memories.create_memory(
            info.context.runtime, principal, agent_id=pk, draft=input.to_draft()
        )
        return Memory.from_row(row)

    @strawberry.mutation
    async def update_memory(self, info: Info, id: strawberry.ID, input: MemoryPatch) -> Memory:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(id, "Memory", field="id")
        row = await memories.update_memory(
            info.context.runtime, principal, memory_id=pk, patch=input.to_changes()
        )
        return Memory.from_row(row)

    @strawberry.mutation(description="Deletes the memory (its revisions are kept); returns its id.")
    async def delete_memory(self, info: Info, id: strawberry.ID) -> strawberry.ID:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(id, "Memory", field="id")
        await memories.delete_memory(info.context.runtime, principal, memory_id=pk)
        return strawberry.ID(to_global_id("Memory", pk))

    # -- schedules (operator) -----------------------------------------------------------------

    @strawberry.mutation
    async def create_schedule(self, info: Info, agent_id: strawberry.ID, input: ScheduleInput) -> Schedule:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(agent_id, "Agent", field="agentId")
        row = await schedules.create_schedule(
            info.context.runtime, principal, agent_id=pk, draft=input.to_draft()
        )
        return Schedule.from_row(row)

    @strawberry.mutation
    async def update_schedule(self, info: Info, id: strawberry.ID, input: SchedulePatch) -> Schedule:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(id, "Schedule", field="id")
        row = await schedules.update_schedule(
            info.context.runtime, principal, schedule_id=pk, patch=input.to_changes()
        )
        return Schedule.from_row(row)

    @strawberry.mutation
    async def delete_schedule(self, info: Info, id: strawberry.ID) -> strawberry.ID:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(id, "Schedule", field="id")
        await schedules.delete_schedule(info.context.runtime, principal, schedule_id=pk)
        return strawberry.ID(to_global_id("Schedule", pk))

    # -- MCP servers (admin) ------------------------------------------------------------------

    @strawberry.mutation(
        description="Registers an MCP server; its tools are listed first (VALIDATION_FAILED if they cannot be)."
    )
    async def create_mcp_server(self, info: Info, input: CreateMcpServerInput) -> McpServer:
        principal = await _caller(info, Role.ADMIN)
        row = await mcp_servers.create_server(info.context.runtime, principal, input.to_draft())
        return McpServer.from_row(row)

    @strawberry.mutation(description="A change of url, command or headers lists the tools again first.")
    async def update_mcp_server(
        self, info: Info, id: strawberry.ID, input: UpdateMcpServerInput
    ) -> McpServer:
        principal = await _caller(info, Role.ADMIN)
        pk = from_global_id(id, "McpServer", field="id")
        row = await mcp_servers.update_server(
            info.context.runtime, principal, server_id=pk, patch=input.to_patch()
        )
        return McpServer.from_row(row)

    @strawberry.mutation(description="Lists the server's tools again; a failure is kept in lastError.")
    async def sync_mcp_server(self, info: Info, id: strawberry.ID) -> McpServer:
        principal = await _caller(info, Role.ADMIN)
        pk = from_global_id(id, "McpServer", field="id")
        row = await mcp_servers.sync_server(info.context.runtime, principal, server_id=pk)
        return McpServer.from_row(row)

    @strawberry.mutation(description="Removes the server and its tools; returns its id.")
    async def delete_mcp_server(self, info: Info, id: strawberry.ID) -> strawberry.ID:
        principal = await _caller(info, Role.ADMIN)
        pk = from_global_id(id, "McpServer", field="id")
        await mcp_servers.delete_server(info.context.runtime, principal, server_id=pk)
        return strawberry.ID(to_global_id("McpServer", pk))

    # -- API tokens (admin) -------------------------------------------------------------------

    @strawberry.mutation(description="A new token for your workspace; its secret is in the answer only.")
    async def create_api_token(self, info: Info, input: CreateApiTokenInput) -> CreatedApiToken:
        principal = await _caller(info, Role.ADMIN)
        issued = await auth.create_api_token(
            info.context.runtime,
            principal,
            role=input.chosen_role(),
            name=input.name,
            expires_at=input.expires_at,
        )
        return CreatedApiToken(token=issued.secret, api_token=ApiToken.from_row(issued.row))

    @strawberry.mutation(
        description="Stops the token everywhere: HTTP at once, open websockets within seconds."
    )
    async def revoke_api_token(self, info: Info, id: strawberry.ID) -> ApiToken:
        principal = await _caller(info, Role.ADMIN)
        pk = from_global_id(id, "ApiToken", field="id")
        row = await auth.revoke_api_token(info.context.runtime, principal, token_id=pk)
        return ApiToken.from_row(row)
