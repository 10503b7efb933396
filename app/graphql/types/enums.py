"""GraphQL enums: the domain's enums exposed under their public names (docs/graphql/guide.md).

Import them from here, never wrap a domain enum a second time: strawberry registers the
GraphQL definition on the enum class itself.
"""

from __future__ import annotations

import enum

import strawberry

from app.domain.actors import ActorKind
from app.domain.agents import AgentStatus, OverlapPolicy, Role
from app.domain.approvals import ApprovalDecision, ApprovalEventType, ApprovalScope, NotificationStatus
from app.domain.mcp import Transport
from app.domain.policy import Decision, RiskClass
from app.domain.run_events import EventType
from app.domain.runs import ApprovalStatus, RunStatus, RunTrigger, StepStatus
from app.domain.schedules import FiringOutcome
from app.services.memories import RevisionAction


def expose(cls: type[enum.Enum], name: str, description: str, values: dict[str, str]) -> None:
    """Registers ``cls`` under its public ``name``, every value described (a value left out
    is a KeyError at import, so a new domain value cannot ship undescribed)."""
    strawberry.enum(cls, name=name, description=description)
    for value in cls.__strawberry_definition__.values:  # type: ignore[attr-defined]
        value.description = values[value.name]


expose(
    ActorKind,
    "ActorKind",
    "Who did something: docs/concepts/audit.md.",
    {
        "TOKEN": "A caller of the API with an API token (the actor's id is the token's).",
        "RUN": "A run, e.g. a parent that started a child (the actor's id is the run's).",
        "SCHEDULE": "A schedule firing (the actor's id is the schedule's).",
        "CLI": "An operator at the server's command line (`enverif ...`).",
        "SYSTEM": "Enverif itself, e.g. an approval expiring past its deadline.",
    },
)
expose(
    AgentStatus,
    "AgentStatus",
    "Whether an agent takes runs.",
    {
        "ACTIVE": "Runs start and go on.",
        "PAUSED": "New runs are accepted but held QUEUED (with a heldReason) until the agent is active again.",
        "ARCHIVED": "Retired: its runs are held like PAUSED, and it is kept for its history.",
    },
)
expose(
    Role,
    "Role",
    "What a token may do: VIEWER reads, OPERATOR runs and decides, ADMIN configures.",
    {
        "VIEWER": "Reads everything in the workspace; changes nothing.",
        "OPERATOR": "A viewer that also starts and cancels runs, decides approvals, and writes memories and schedules.",
        "ADMIN": "An operator that also configures agents, MCP servers, API tokens and the workspace.",
    },
)
expose(
    OverlapPolicy,
    "OverlapPolicy",
    "What a schedule does when it fires while a run it started earlier is unfinished.",
    {
        "SKIP": "Start no run this time; the firing is recorded SKIPPED with the reason.",
        "ALLOW": "Start another run beside the unfinished one.",
    },
)
expose(
    Decision,
    "PolicyDecision",
    "What a policy decides about a tool call.",
    {
        "ALLOW": "The call runs.",
        "REQUIRE_APPROVAL": "The run waits (WAITING_APPROVAL) until an operator decides the call's Approval.",
        "DENY": "The call is refused (its step DENIED) and the model is told so.",
    },
)
expose(
    RunStatus,
    "RunStatus",
    "Where a run is in its life; SUCCEEDED, FAILED and CANCELLED are final.",
    {
        "QUEUED": "Waiting for a worker (or held: see Run.heldReason).",
        "RUNNING": "A worker is running its model turns and tool calls.",
        "WAITING_APPROVAL": "Parked until an operator decides a pending approval; holds no worker.",
        "WAITING_CHILD": "Parked until a child run it delegated to finishes; holds no worker.",
        "SUCCEEDED": "Finished with a result.",
        "FAILED": "Ended by an error (see error and errorCode).",
        "CANCELLED": "Cancelled by an operator or with its parent (see cancelReason).",
    },
)
expose(
    EventType,
    "RunEventType",
    "What a run event records.",
    {
        "RUN_CREATED": "A run of the tree was created.",
        "RUN_STATUS_CHANGED": "A run's status changed (the payload has the new status).",
        "STEP_STARTED": "A step (tool call or final answer) began.",
        "STEP_FINISHED": "A step reached its final status.",
        "APPROVAL_REQUESTED": "A call needs an operator's decision: an Approval is PENDING.",
        "APPROVAL_DECIDED": "An approval was decided, or expired.",
        "MEMORY_INJECTED": "Memories were put into a run's context as it started.",
        "MEMORY_WRITTEN": "A run wrote a memory.",
        "BUDGET_EXCEEDED": "A call was refused over a budget limit, or a run ended because a limit of its chain is spent.",
        "LOOP_DETECTED": "A call was refused as a repeat of identical earlier calls.",
    },
)
expose(
    RunTrigger,
    "RunTrigger",
    "How a run was started.",
    {
        "MANUAL": "From the command line (`enverif runs start`).",
        "API": "With startRun.",
        "SCHEDULE": "By a schedule firing.",
        "DELEGATION": "By its parent run's agents.delegate call.",
    },
)
expose(
    StepStatus,
    "StepStatus",
    "Where a step is; SUCCEEDED, FAILED, DENIED, REJECTED and CANCELLED are final.",
    {
        "PENDING": "Recorded, not started yet.",
        "RUNNING": "The tool is running.",
        "WAITING_APPROVAL": "Waiting for an operator to decide its approval.",
        "WAITING_CHILD": "An agents.delegate call waiting for its child run (see childRun).",
        "SUCCEEDED": "The tool returned; see result.",
        "FAILED": "The tool failed, or the call was refused before it ran (BUDGET_EXCEEDED, LOOP_DETECTED, ...); see error and errorCode.",
        "DENIED": "The policy denied the call; it did not run.",
        "REJECTED": "An operator rejected the call, or its approval expired; it did not run.",
        "CANCELLED": "Its run was cancelled before the call finished.",
    },
)
expose(
    ApprovalStatus,
    "ApprovalStatus",
    "Where an approval is; all but PENDING are final.",
    {
        "PENDING": "Waiting for an operator's decision.",
        "APPROVED": "Approved (APPROVE, or EDIT with new arguments): the tool runs.",
        "REJECTED": "Rejected: the tool does not run and the model is told why.",
        "RESPONDED": "Answered (RESPOND): the tool does not run and the model gets the response.",
        "EXPIRED": "Past its deadline (the rule's timeoutS): the call is rejected with that reason.",
    },
)
expose(
    ApprovalDecision,
    "ApprovalDecision",
    "How an operator decides: docs/concepts/approvals.md.",
    {
        "APPROVE": "Run the call as the model asked.",
        "REJECT": "Do not run it; the reason goes to the model.",
        "EDIT": "Run it with the operator's `arguments` instead.",
        "RESPOND": "Do not run it; the operator's `response` goes to the model as the tool's result.",
    },
)
expose(
    NotificationStatus,
    "ApprovalNotificationStatus",
    "An approvalWebhook delivery.",
    {
        "PENDING": "To be sent (again) at its next attempt.",
        "DELIVERED": "The receiver answered 2xx.",
        "FAILED": "Every attempt failed; nobody retries any more.",
    },
)
expose(
    ApprovalEventType,
    "ApprovalEventType",
    "What approvalEvents reports.",
    {
        "REQUESTED": "An approval was requested (it is PENDING).",
        "DECIDED": "An operator decided it.",
        "EXPIRED": "It passed its deadline undecided.",
    },
)
expose(
    ApprovalScope,
    "ApprovalScope",
    "RUN: also approves the tool's later calls in the same run.",
    {
        "CALL": "The decision covers this call only.",
        "RUN": "An APPROVE or EDIT also covers the same tool's later calls in this run.",
    },
)
expose(
    FiringOutcome,
    "ScheduleFiringOutcome",
    "What a schedule's fire time did.",
    {
        "FIRED": "A run was started.",
        "SKIPPED": "The fire time passed without a run; the firing's reason says why.",
    },
)
expose(
    RevisionAction,
    "MemoryRevisionAction",
    "What a memory revision did.",
    {
        "CREATE": "The memory was created.",
        "UPDATE": "Its key, value, tags or importance changed.",
        "DELETE": "It was deleted (the revision keeps its last value).",
    },
)

__all__ = [
    "ActorKind",
    "AgentStatus",
    "ApprovalDecision",
    "ApprovalEventType",
    "ApprovalScope",
    "ApprovalStatus",
    "Decision",
    "EventType",
    "FiringOutcome",
    "NotificationStatus",
    "OverlapPolicy",
    "RevisionAction",
    "Role",
    "RunStatus",
    "RunTrigger",
    "StepStatus",
]
expose(
    Transport,
    "McpTransport",
    "How Enverif reaches an MCP server.",
    {
        "STREAMABLE_HTTP": "Over HTTP (MCP's streamable HTTP transport), at the server's url.",
        "STDIO": "By starting the server's command and speaking MCP over its stdin and stdout.",
    },
)
expose(
    RiskClass,
    "RiskClass",
    "What a tool's call can do; the policy decides by it.",
    {
        "READ": "Only reads; allowed unless the policy says otherwise.",
        "INTERNAL_WRITE": "Changes Enverif's own state (e.g. memories); allowed unless the policy says otherwise.",
        "EXTERNAL_WRITE": "Changes something outside Enverif; needs approval unless the policy says otherwise.",
        "DESTRUCTIVE": "Deletes or cannot be undone; needs approval, and a policy's ALLOW is raised to REQUIRE_APPROVAL.",
        "SECRETS": "Reads or handles secrets; treated like DESTRUCTIVE.",
    },
)
