"""GraphQL enums: the domain's enums exposed under their public names (docs/graphql/guide.md).

Import them from here, never wrap a domain enum a second time: strawberry registers the
GraphQL definition on the enum class itself.
"""

from __future__ import annotations

import strawberry

from app.domain.agents import AgentStatus, OverlapPolicy
from app.domain.policy import Decision
from app.domain.run_events import EventType
from app.domain.runs import ApprovalStatus, RunStatus, RunTrigger, StepStatus
from app.domain.schedules import FiringOutcome
from app.services.memories import RevisionAction

strawberry.enum(AgentStatus, name="AgentStatus")
strawberry.enum(OverlapPolicy, name="OverlapPolicy")
strawberry.enum(Decision, name="PolicyDecision")
strawberry.enum(RunStatus, name="RunStatus")
strawberry.enum(EventType, name="RunEventType", description="What a run event records.")
strawberry.enum(RunTrigger, name="RunTrigger")
strawberry.enum(StepStatus, name="StepStatus")
strawberry.enum(ApprovalStatus, name="ApprovalStatus")
strawberry.enum(FiringOutcome, name="ScheduleFiringOutcome", description="What a schedule's fire time did.")
strawberry.enum(RevisionAction, name="MemoryRevisionAction", description="What a memory revision did.")

__all__ = [
    "AgentStatus",
    "ApprovalStatus",
    "Decision",
    "EventType",
    "FiringOutcome",
    "OverlapPolicy",
    "RevisionAction",
    "RunStatus",
    "RunTrigger",
    "StepStatus",
]
