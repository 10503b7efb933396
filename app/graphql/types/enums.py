"""GraphQL enums: the domain's enums exposed under their public names (docs/graphql/guide.md).

Import them from here, never wrap a domain enum a second time: strawberry registers the
GraphQL definition on the enum class itself.
"""

from __future__ import annotations

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

strawberry.enum(ActorKind, name="ActorKind", description="Who did something: docs/concepts/audit.md.")
strawberry.enum(AgentStatus, name="AgentStatus")
strawberry.enum(
    Role,
    name="Role",
    description="What a token may do: VIEWER reads, OPERATOR runs and decides, ADMIN configures.",
)
strawberry.enum(OverlapPolicy, name="OverlapPolicy")
strawberry.enum(Decision, name="PolicyDecision")
strawberry.enum(RunStatus, name="RunStatus")
strawberry.enum(EventType, name="RunEventType", description="What a run event records.")
strawberry.enum(RunTrigger, name="RunTrigger")
strawberry.enum(StepStatus, name="StepStatus")
strawberry.enum(ApprovalStatus, name="ApprovalStatus")
strawberry.enum(
    ApprovalDecision,
    name="ApprovalDecision",
    description="How an operator decides: docs/concepts/approvals.md.",
)
strawberry.enum(
    NotificationStatus, name="ApprovalNotificationStatus", description="An approvalWebhook delivery."
)
strawberry.enum(ApprovalEventType, name="ApprovalEventType", description="What approvalEvents reports.")
strawberry.enum(
    ApprovalScope,
    name="ApprovalScope",
    description="RUN: also approves the tool's later calls in the same run.",
)
strawberry.enum(FiringOutcome, name="ScheduleFiringOutcome", description="What a schedule's fire time did.")
strawberry.enum(RevisionAction, name="MemoryRevisionAction", description="What a memory revision did.")

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
strawberry.enum(Transport, name="McpTransport", description="How Enverif reaches an MCP server.")
strawberry.enum(
    RiskClass, name="RiskClass", description="What a tool's call can do; the policy decides by it."
)
