"""The Mutation root: decode ids, call the service, map the row back.

Services own the transactions and the role checks. The role is also checked here first, only
so that a caller without the role gets FORBIDDEN whatever ids it sent (instead of NOT_FOUND
for a malformed one) — the services stay the authority.
"""

from __future__ import annotations

from typing import Annotated

import strawberry
from strawberry.scalars import JSON
from strawberry.types.arguments import StrawberryArgumentAnnotation

from app.domain.agents import Role
from app.domain.approvals import DecisionAsk
from app.domain.runs import RunTrigger
from app.graphql.context import Info
from app.graphql.ids import from_global_id, to_global_id
from app.graphql.inputs import (
    CreateAgentInput,
    CreateMcpServerInput,
    CreateMemoryInput,
    CreateScheduleInput,
    MemoryInput,
    MemoryPatch,
    RunFilterInput,
    ScheduleInput,
    SchedulePatch,
    UpdateAgentInput,
    UpdateMcpServerInput,
    UpdateMemoryInput,
    UpdateScheduleInput,
    one_of,
)
from app.graphql.types.agents import Agent
from app.graphql.types.approvals import Approval
from app.graphql.types.enums import ApprovalDecision, ApprovalScope
from app.graphql.types.mcp import McpServer
from app.graphql.types.memories import Memory
from app.graphql.types.payloads import RemoveMcpServerPayload, RemoveMemoryPayload, RemoveSchedulePayload
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


def _id_of(noun: str) -> StrawberryArgumentAnnotation:
    """An ``id`` argument's description: ``_id_of("agent")``."""
    return strawberry.argument(description=f"The {noun}'s global id.")


_CHANGES = strawberry.argument(description="The fields to change; fields left out keep their value.")
# The inputs' older names (docs/graphql/guide.md: names): still taken, as `input`.
_USE_MEMORY = "Use `memory`, a CreateMemoryInput with the same fields."
_USE_SCHEDULE = "Use `schedule`, a CreateScheduleInput with the same fields."
_USE_CHANGES = "Use `changes`, the same fields under the input's current name (Update...Input)."


# removeX answers a payload; deleteX, its older form, the payload's deletedId alone.


async def _remove_memory(info: Info, id: str) -> RemoveMemoryPayload:
    principal = await _caller(info, Role.OPERATOR)
    pk = from_global_id(id, "Memory", field="id")
    row = await memories.delete_memory(info.context.runtime, principal, memory_id=pk)
    return RemoveMemoryPayload(deleted_id=strawberry.ID(to_global_id("Memory", pk)), agent_id=row.agent_id)


async def _remove_schedule(info: Info, id: str) -> RemoveSchedulePayload:
    principal = await _caller(info, Role.OPERATOR)
    pk = from_global_id(id, "Schedule", field="id")
    row = await schedules.delete_schedule(info.context.runtime, principal, schedule_id=pk)
    return RemoveSchedulePayload(
        deleted_id=strawberry.ID(to_global_id("Schedule", pk)), agent_id=row.agent_id
    )


async def _remove_mcp_server(info: Info, id: str) -> RemoveMcpServerPayload:
    principal = await _caller(info, Role.ADMIN)
    pk = from_global_id(id, "McpServer", field="id")
    await mcp_servers.delete_server(info.context.runtime, principal, server_id=pk)
    return RemoveMcpServerPayload(deleted_id=strawberry.ID(to_global_id("McpServer", pk)))


@strawberry.type(
    name="Mutation",
    description="Every change. Operators start and cancel runs, decide approvals, and write memories and schedules; admins configure agents, MCP servers, API tokens and the workspace.",
)
class Mutation:
    # -- agents (admin) ---------------------------------------------------------------------

    @strawberry.mutation(description="Creates an agent (admins); its configuration becomes version 1.")
    async def create_agent(
        self,
        info: Info,
        input: Annotated[
            CreateAgentInput,
            strawberry.argument(description="The new agent's name, model and configuration."),
        ],
    ) -> Agent:
        principal = await _caller(info, Role.ADMIN)
        row = await agents.create_agent(info.context.runtime, principal, input.to_draft())
        return Agent.from_row(row)

    @strawberry.mutation(
        description="Changes an agent (admins); a configuration change writes a new version, which runs started from now on use."
    )
    async def update_agent(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("agent")],
        input: Annotated[
            UpdateAgentInput,
            _CHANGES,
        ],
    ) -> Agent:
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
    async def pause_workspace(
        self,
        info: Info,
        reason: Annotated[
            str, strawberry.argument(description="Why, shown as pausedReason and in held runs' heldReason.")
        ],
    ) -> Workspace:
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
        self,
        info: Info,
        url: Annotated[
            str | None,
            strawberry.argument(description="Where to POST approvals; null or left out removes the webhook."),
        ] = None,
        secret_env: Annotated[
            str | None,
            strawberry.argument(
                description="The environment variable (on the workers) holding the HMAC signing secret."
            ),
        ] = None,
    ) -> Workspace:
        principal = await _caller(info, Role.ADMIN)
        row = await approval_webhooks.set_approval_webhook(
            info.context.runtime, principal, url=url, secret_env=secret_env
        )
        return Workspace.from_row(row)

    # -- runs and approvals (operator) --------------------------------------------------------

    @strawberry.mutation(
        description="Starts a run of the agent (operators); it is QUEUED until a worker takes it."
    )
    async def start_run(
        self,
        info: Info,
        agent_id: Annotated[strawberry.ID, strawberry.argument(description="The agent to run (global id).")],
        input: Annotated[
            JSON | None,
            strawberry.argument(
                description="The run's input; checked against the agent's inputSchema (VALIDATION_FAILED naming its path)."
            ),
        ] = None,
        budget: Annotated[
            JSON | None,
            strawberry.argument(
                description="Limits that tighten the agent's budget for this run (maxTokens, maxCostUsd, ...): docs/concepts/budgets.md."
            ),
        ] = None,
    ) -> Run:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(agent_id, "Agent", field="agentId")
        row = await runs.start_run(
            info.context.runtime, principal, agent_id=pk, input=input, trigger=RunTrigger.API, budget=budget
        )
        return Run.from_row(row)

    @strawberry.mutation(description="Cancels the run and every unfinished run below it.")
    async def cancel_run(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("run")],
        reason: Annotated[
            str | None, strawberry.argument(description="Why; kept as the runs' cancelReason.")
        ] = None,
    ) -> Run:
        principal = await _caller(info, Role.OPERATOR)
        pk = from_global_id(id, "Run", field="id")
        row = await runs.cancel_run(info.context.runtime, principal, run_id=pk, reason=reason)
        return Run.from_row(row)

    @strawberry.mutation(
        description="Cancels, with their subtrees, the unfinished runs the filter selects (at most "
        "1000 per call). An empty filter is refused unless all: true."
    )
    async def cancel_runs(
        self,
        info: Info,
        filter: Annotated[
            RunFilterInput,
            strawberry.argument(description="Which runs to cancel: every filter given must match."),
        ],
        reason: Annotated[
            str | None, strawberry.argument(description="Why; kept as the runs' cancelReason.")
        ] = None,
        all: Annotated[
            bool,
            strawberry.argument(
                description="True to allow an empty filter, cancelling every unfinished run of the workspace."
            ),
        ] = False,
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
        id: Annotated[strawberry.ID, _id_of("approval")],
        approve: Annotated[
            bool | None,
            strawberry.argument(
                description="The older form: true is APPROVE, false is REJECT; give `decision` instead."
            ),
        ] = None,
        reason: Annotated[
            str | None, strawberry.argument(description="Why; with REJECT it reaches the model.")
        ] = None,
        decision: Annotated[
            ApprovalDecision | None, strawberry.argument(description="How to decide; see ApprovalDecision.")
        ] = None,
        arguments: Annotated[
            JSON | None,
            strawberry.argument(description="EDIT only: the arguments the tool runs with instead."),
        ] = strawberry.UNSET,
        response: Annotated[
            JSON | None,
            strawberry.argument(description="RESPOND only: what the model receives as the tool's result."),
        ] = strawberry.UNSET,
        scope: Annotated[
            ApprovalScope | None,
            strawberry.argument(
                description="RUN: also approve the tool's later calls in this run; CALL (the default): this call only."
            ),
        ] = None,
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

    @strawberry.mutation(description="Adds a memory to an agent (operators).")
    async def create_memory(
        self,
        info: Info,
        agent_id: Annotated[strawberry.ID, strawberry.argument(description="The agent (global id).")],
        memory: Annotated[
            CreateMemoryInput | None,
            strawberry.argument(description="The memory's key, value, tags and importance (required)."),
        ] = None,
        input: Annotated[
            MemoryInput | None,
            strawberry.argument(description="The same as `memory`.", deprecation_reason=_USE_MEMORY),
        ] = None,
    ) -> Memory:
        principal = await _caller(info, Role.OPERATOR)
        given = one_of(memory, input, name="memory")
        pk = from_global_id(agent_id, "Agent", field="agentId")
        row = await memories.create_memory(
            info.context.runtime, principal, agent_id=pk, draft=given.to_draft()
        )
        return Memory.from_row(row)

    @strawberry.mutation(description="Changes a memory (operators); the change is kept as a revision.")
    async def update_memory(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("memory")],
        changes: Annotated[UpdateMemoryInput | None, _CHANGES] = None,
        input: Annotated[
            MemoryPatch | None,
            strawberry.argument(description="The same as `changes`.", deprecation_reason=_USE_CHANGES),
        ] = None,
    ) -> Memory:
        principal = await _caller(info, Role.OPERATOR)
        given = one_of(changes, input, name="changes")
        pk = from_global_id(id, "Memory", field="id")
        row = await memories.update_memory(
            info.context.runtime, principal, memory_id=pk, patch=given.to_changes()
        )
        return Memory.from_row(row)

    @strawberry.mutation(
        description="Deletes the memory (its revisions are kept); returns its id.",
        deprecation_reason="Use `removeMemory`, which answers a payload with `deletedId` and the agent.",
    )
    async def delete_memory(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("memory")],
    ) -> strawberry.ID:
        return (await _remove_memory(info, id)).deleted_id

    @strawberry.mutation(
        description="Deletes the memory (operators); its revisions are kept, ending in a DELETE one."
    )
    async def remove_memory(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("memory")],
    ) -> RemoveMemoryPayload:
        return await _remove_memory(info, id)

    # -- schedules (operator) -----------------------------------------------------------------

    @strawberry.mutation(description="Adds a schedule to an agent (operators).")
    async def create_schedule(
        self,
        info: Info,
        agent_id: Annotated[
            strawberry.ID, strawberry.argument(description="The agent it starts (global id).")
        ],
        schedule: Annotated[
            CreateScheduleInput | None,
            strawberry.argument(
                description="Its cron expression, timezone, input and overlap policy (required)."
            ),
        ] = None,
        input: Annotated[
            ScheduleInput | None,
            strawberry.argument(description="The same as `schedule`.", deprecation_reason=_USE_SCHEDULE),
        ] = None,
    ) -> Schedule:
        principal = await _caller(info, Role.OPERATOR)
        given = one_of(schedule, input, name="schedule")
        pk = from_global_id(agent_id, "Agent", field="agentId")
        row = await schedules.create_schedule(
            info.context.runtime, principal, agent_id=pk, draft=given.to_draft()
        )
        return Schedule.from_row(row)

    @strawberry.mutation(description="Changes a schedule (operators); nextFireAt is computed again.")
    async def update_schedule(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("schedule")],
        changes: Annotated[UpdateScheduleInput | None, _CHANGES] = None,
        input: Annotated[
            SchedulePatch | None,
            strawberry.argument(description="The same as `changes`.", deprecation_reason=_USE_CHANGES),
        ] = None,
    ) -> Schedule:
        principal = await _caller(info, Role.OPERATOR)
        given = one_of(changes, input, name="changes")
        pk = from_global_id(id, "Schedule", field="id")
        row = await schedules.update_schedule(
            info.context.runtime, principal, schedule_id=pk, patch=given.to_changes()
        )
        return Schedule.from_row(row)

    @strawberry.mutation(
        description="Deletes the schedule (its runs are kept); returns its id.",
        deprecation_reason="Use `removeSchedule`, which answers a payload with `deletedId` and the agent.",
    )
    async def delete_schedule(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("schedule")],
    ) -> strawberry.ID:
        return (await _remove_schedule(info, id)).deleted_id

    @strawberry.mutation(description="Deletes the schedule (operators); the runs it started are kept.")
    async def remove_schedule(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("schedule")],
    ) -> RemoveSchedulePayload:
        return await _remove_schedule(info, id)

    # -- MCP servers (admin) ------------------------------------------------------------------

    @strawberry.mutation(
        description="Registers an MCP server; its tools are listed first (VALIDATION_FAILED if they cannot be)."
    )
    async def create_mcp_server(
        self,
        info: Info,
        input: Annotated[
            CreateMcpServerInput, strawberry.argument(description="The server's name and how to reach it.")
        ],
    ) -> McpServer:
        principal = await _caller(info, Role.ADMIN)
        row = await mcp_servers.create_server(info.context.runtime, principal, input.to_draft())
        return McpServer.from_row(row)

    @strawberry.mutation(description="A change of url, command or headers lists the tools again first.")
    async def update_mcp_server(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("server")],
        input: Annotated[
            UpdateMcpServerInput,
            _CHANGES,
        ],
    ) -> McpServer:
        principal = await _caller(info, Role.ADMIN)
        pk = from_global_id(id, "McpServer", field="id")
        row = await mcp_servers.update_server(
            info.context.runtime, principal, server_id=pk, patch=input.to_patch()
        )
        return McpServer.from_row(row)

    @strawberry.mutation(description="Lists the server's tools again; a failure is kept in lastError.")
    async def sync_mcp_server(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("server")],
    ) -> McpServer:
        principal = await _caller(info, Role.ADMIN)
        pk = from_global_id(id, "McpServer", field="id")
        row = await mcp_servers.sync_server(info.context.runtime, principal, server_id=pk)
        return McpServer.from_row(row)

    @strawberry.mutation(
        description="Removes the server and its tools; returns its id.",
        deprecation_reason="Use `removeMcpServer`, which answers a payload with `deletedId`.",
    )
    async def delete_mcp_server(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("server")],
    ) -> strawberry.ID:
        return (await _remove_mcp_server(info, id)).deleted_id

    @strawberry.mutation(description="Removes the server and its tools (admins).")
    async def remove_mcp_server(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("server")],
    ) -> RemoveMcpServerPayload:
        return await _remove_mcp_server(info, id)

    # -- API tokens (admin) -------------------------------------------------------------------

    @strawberry.mutation(description="A new token for your workspace; its secret is in the answer only.")
    async def create_api_token(
        self,
        info: Info,
        input: Annotated[
            CreateApiTokenInput,
            strawberry.argument(description="The token's name, role and optional expiry."),
        ],
    ) -> CreatedApiToken:
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
    async def revoke_api_token(
        self,
        info: Info,
        id: Annotated[strawberry.ID, _id_of("token")],
    ) -> ApiToken:
        principal = await _caller(info, Role.ADMIN)
        pk = from_global_id(id, "ApiToken", field="id")
        row = await auth.revoke_api_token(info.context.runtime, principal, token_id=pk)
        return ApiToken.from_row(row)
