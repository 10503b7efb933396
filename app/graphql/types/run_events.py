"""``RunEvent``: one entry of a run tree's event log, as streamed by ``runTree`` (docs/graphql/guide.md)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import strawberry
from strawberry.scalars import JSON

from app.domain.global_ids import object_id, public_payload
from app.domain.policy import Decision
from app.domain.run_events import EventType
from app.domain.runs import RunStatus, StepStatus
from app.events.publish import EventMessage
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types import enums as _enums  # noqa: F401  (registers the GraphQL enums)
from app.services.event_labels import EventLabels

if TYPE_CHECKING:
    from app.graphql.types.runs import Run

E = TypeVar("E", RunStatus, StepStatus, Decision)

# The log's ``status`` column holds whatever the event is about (a run's, a step's or an
# approval's status); the contract's ``status`` is a RunStatus, so it is only filled for run
# events, and step events get theirs in ``stepStatus``. Approval events carry it in payload.
_RUN_EVENTS = frozenset({EventType.RUN_CREATED.value, EventType.RUN_STATUS_CHANGED.value})
_STEP_EVENTS = frozenset({EventType.STEP_STARTED.value, EventType.STEP_FINISHED.value})


@strawberry.type(name="RunEvent", description="One entry of a run tree's append-only event log.")
class RunEvent:
    id: strawberry.ID = strawberry.field(description="The event's id: its tree and seq (not a node).")
    seq: int = strawberry.field(
        description="Position in the tree's log: gap-free and increasing per root run."
    )
    type: EventType = strawberry.field(description="What happened.")
    run_id: strawberry.ID = strawberry.field(
        description="The run of the tree this event is about (global id)."
    )
    root_run_id: strawberry.ID = strawberry.field(description="The tree's root run (global id).")
    parent_run_id: strawberry.ID | None = strawberry.field(
        description="The parent of the run it is about; null for the root."
    )
    status: RunStatus | None = strawberry.field(
        description="The run's status after this event, for RUN_CREATED and RUN_STATUS_CHANGED; else null."
    )
    step_id: strawberry.ID | None = strawberry.field(
        description="For a step or approval event: the step (global id); else null."
    )
    step_status: StepStatus | None = strawberry.field(
        description="The step's status after this event, for STEP_STARTED and STEP_FINISHED; else null."
    )
    at: datetime = strawberry.field(description="When it happened.")
    payload: JSON | None = strawberry.field(
        description="Details of the event by type (every id in it a global id): docs/graphql/guide.md."
    )
    agent_name: str | None = strawberry.field(
        description="The name of the run's agent (as it was when the run was created)."
    )
    step_tool: str | None = strawberry.field(description="For a step or approval event: the step's tool.")
    step_decision: Decision | None = strawberry.field(
        description="For a step or approval event: the policy's decision on the step's call."
    )
    approval_id: strawberry.ID | None = strawberry.field(
        description="For a step or approval event: the step's approval, once one was requested."
    )
    message: strawberry.Private[EventMessage]

    @classmethod
    def from_message(cls, message: EventMessage, labels: EventLabels | None = None) -> RunEvent:
        step = None if labels is None else labels.step
        return cls(
            id=strawberry.ID(object_id("RunEvent", message.root_run_id, message.seq)),
            seq=message.seq,
            type=EventType(message.type),
            run_id=strawberry.ID(to_global_id("Run", message.run_id)),
            root_run_id=strawberry.ID(to_global_id("Run", message.root_run_id)),
            parent_run_id=_optional_id("Run", message.parent_run_id),
            status=_enum_or_none(RunStatus, message.status) if message.type in _RUN_EVENTS else None,
            step_id=_optional_id("RunStep", message.step_id),
            step_status=_enum_or_none(StepStatus, message.status) if message.type in _STEP_EVENTS else None,
            at=message.at,
            payload=public_payload(message.payload),
            agent_name=None if labels is None else labels.agent_name,
            step_tool=None if step is None else step.tool,
            step_decision=None if step is None else _enum_or_none(Decision, step.decision),
            approval_id=None if step is None else _optional_id("Approval", step.approval_id),
            message=message,
        )

    @strawberry.field(description="The run this event is about, as it is when the event is delivered.")
    async def run(self, info: Info) -> Annotated[Run, strawberry.lazy("app.graphql.types.runs")] | None:
        from app.graphql.types.runs import Run

        # The context's loaders are replaced before every emitted event (Context.fresh_loaders),
        # so this is the run as of this event's delivery, not as of the connection's start.
        row = await (await info.context.loaders()).run.load(self.message.run_id)
        return None if row is None else Run.from_row(row)


def _optional_id(type_name: str, pk: int | None) -> strawberry.ID | None:
    return None if pk is None else strawberry.ID(to_global_id(type_name, pk))


def _enum_or_none(enum: type[E], value: str | None) -> E | None:
    # Lenient on the way out: one odd row must not break a whole subscription stream.
    try:
        return None if value is None else enum(value)
    except ValueError:
        return None
