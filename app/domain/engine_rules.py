"""The run loop's own decisions: pure, no I/O. The loop (``app.engine.loop``) only sequences
the I/O these answers call for; ``app.domain.planner`` decides each call of a model turn.

    next_move(steps)             what the worker does next with the run:
        an open step of a STATE tool   -> RUN_STATE_STEP (started, run and recorded in one transaction)
        an open step of an I/O tool    -> RUN_STEP (started if PENDING, run outside any
                                          transaction, recorded now or with the next write)
        nothing open, something waits  -> PARK (re-checked under the lock)
        every step finished            -> ASK_MODEL
    model_history(steps, ...)    what the model sees of the run so far, and which turn to ask for
    batches(plan, ...)           whether a fast provider's turn of allowed READ I/O calls runs
                                 right away, to be recorded with the next write
    new_step_statuses(plans)     the status each call of a recorded turn is inserted with
    parks_with_turn(statuses)    whether the transaction recording a turn also parks the run

Steps are read through ``StepView``: the worker's rows (``app.db.orm.RunStep``) fit it, and
so do the plain objects of the table tests (``tests/unit/test_engine_rules.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from app.domain.model_errors import ModelErrorCode, model_error
from app.domain.planner import Action, CallPlan, Calls, ToolInfo, TurnPlan, runs_ahead
from app.domain.runs import TERMINAL_STEP, WAITING_STEP, RunStatus, StepStatus, waiting_status_for

# Open steps: to be executed, by this worker, in seq order.
OPEN_STEP = frozenset({StepStatus.PENDING, StepStatus.RUNNING})
# Bounds of a batch of READ calls recorded together (``batches``): a live watcher still sees
# progress at least this often, and a crash repeats at most this many reads.
READ_BATCH_MAX = 16
READ_BATCH_S = 0.25


class StepView(Protocol):
    """What the rules read of a step."""

    @property
    def id(self) -> int: ...
    @property
    def turn(self) -> int: ...
    @property
    def tool(self) -> str | None: ...  # None: the final answer's step
    @property
    def status(self) -> str: ...  # a StepStatus value
    @property
    def arguments(self) -> Any: ...
    @property
    def result(self) -> Any: ...


S = TypeVar("S", bound=StepView)


@dataclass
class Outcome:
    """How a call ended, before it is recorded: its step's status, the result the model sees,
    the error people see; or, for a delegation, the child the step now waits for."""

    status: StepStatus
    result: Any
    error: str | None = None
    child_run_id: int | None = None  # WAITING_CHILD: the child this step waits for
    # The tool refused arguments that hold a secret: what the step keeps instead of them.
    redacted_arguments: dict[str, Any] | None = None


def failed(code: ModelErrorCode | str, message: str) -> Outcome:
    """A FAILED call: the model sees ``model_error(code, message)``, people ``code: message``."""
    result = model_error(code, message)
    return Outcome(StepStatus.FAILED, result, f"{code}: {result['error']['message']}")


@dataclass
class ReadCall:
    """A READ call that ran but is not recorded yet (it will be, with the next write)."""

    turn: int
    plan: CallPlan
    outcome: Outcome
    started_at: datetime
    finished_at: datetime


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One finished (or refused) tool call as the model sees it."""

    tool: str
    args: dict[str, Any]
    status: str  # StepStatus value
    result: Any  # what the model sees: the tool result, or {"error": {...}} for failures/denials


# -- what next ----------------------------------------------------------------------------


class MoveKind(enum.StrEnum):
    RUN_STATE_STEP = "RUN_STATE_STEP"
    RUN_STEP = "RUN_STEP"
    PARK = "PARK"
    ASK_MODEL = "ASK_MODEL"


@dataclass(frozen=True, slots=True)
class Move(Generic[S]):
    kind: MoveKind
    step: S | None = None  # RUN_STATE_STEP, RUN_STEP: the step to run (the first open one)
    # RUN_STEP: record the result in its own transaction as soon as the call ends. False only
    # for a fast provider's last open step: its result is recorded with the next turn, whose
    # computation costs no I/O, in one transaction instead of two.
    record_now: bool = True


def next_move(
    steps: Sequence[S], *, tools: Mapping[str, ToolInfo], fast: bool, unrecorded: int | None = None
) -> Move[S]:
    """What to do next with the run, given the worker's view of its steps (in seq order) and
    the registered tools. Steps run one at a time, in seq order: a turn's later calls see
    what its earlier ones did. ``unrecorded``: the id of a step that ran and whose result
    waits for the next write; it counts as finished."""
    calls = [s for s in steps if s.tool is not None]
    step = next((s for s in calls if StepStatus(s.status) in OPEN_STEP and s.id != unrecorded), None)
    if step is not None:
        info = tools.get(step.tool or "")
        if info is not None and info.state:
            return Move(MoveKind.RUN_STATE_STEP, step)
        others_open = any(StepStatus(s.status) not in TERMINAL_STEP for s in calls if s.id != step.id)
        return Move(MoveKind.RUN_STEP, step, record_now=others_open or not fast)
    if any(StepStatus(s.status) in WAITING_STEP for s in calls):
        return Move(MoveKind.PARK)
    return Move(MoveKind.ASK_MODEL)


# -- what the model sees ------------------------------------------------------------------


def model_history(
    steps: Iterable[StepView], *, unrecorded: tuple[int, Outcome] | None, reads: Sequence[ReadCall]
) -> tuple[list[HistoryItem], int]:
    """The calls the model has made so far with their results, in call order, and the index
    of the turn to ask for next (0 for the first). What ran but is not recorded yet counts as
    it will be recorded: ``unrecorded`` (a step's id and outcome) and the batched ``reads``."""
    history: list[HistoryItem] = []
    turn = 0
    for step in steps:
        if step.tool is None:
            continue
        status, result = step.status, step.result
        if unrecorded is not None and step.id == unrecorded[0]:
            status, result = unrecorded[1].status.value, unrecorded[1].result
        history.append(HistoryItem(tool=step.tool, args=step.arguments or {}, status=status, result=result))
        turn = max(turn, step.turn + 1)
    for read in reads:
        outcome = read.outcome
        history.append(HistoryItem(read.plan.tool, read.plan.args, outcome.status.value, outcome.result))
        turn = max(turn, read.turn + 1)
    return history, turn


# -- batching READ calls ------------------------------------------------------------------


def batches(
    plan: TurnPlan, *, fast: bool, batched: int, elapsed_s: float, tools: Mapping[str, ToolInfo]
) -> bool:
    """Whether to run this turn's calls right away and record them with the next write: only
    for a fast (local) provider, whose next turn costs no I/O; only allowed READ calls
    (``planner.runs_ahead``: no side effects, so running one again after a crash is harmless
    and no idempotency key has to exist first) of plain I/O tools (a STATE tool writes in its
    step's transaction); and bounded (``READ_BATCH_MAX`` calls already ``batched``,
    ``READ_BATCH_S`` since the batch began) so watchers still see progress promptly."""
    if not fast or not isinstance(plan, Calls) or not runs_ahead(plan.plans):
        return False
    if batched >= READ_BATCH_MAX or elapsed_s > READ_BATCH_S:
        return False
    return all((info := tools.get(p.tool)) is not None and not info.state for p in plan.plans)


# -- recording a turn ---------------------------------------------------------------------


def new_step_statuses(plans: Sequence[CallPlan]) -> list[StepStatus]:
    """The status each call's step is inserted with, in the transaction that records the turn.

    Refusals and denials are finished at once (the model sees why); an approval waits; a
    delegation starts (its tool runs in that same transaction). The first allowed call starts
    right away, which saves the transaction that would start it; the others wait their turn
    as PENDING (``next_move`` runs them in seq order).
    """
    statuses = []
    started_one = False
    for plan in plans:
        if plan.action is Action.REFUSE:
            statuses.append(StepStatus.FAILED)
        elif plan.action is Action.DENY:
            statuses.append(StepStatus.DENIED)
        elif plan.action is Action.AWAIT_APPROVAL:
            statuses.append(StepStatus.WAITING_APPROVAL)
        elif plan.action is Action.START_CHILD:
            statuses.append(StepStatus.RUNNING)
        else:
            statuses.append(StepStatus.PENDING if started_one else StepStatus.RUNNING)
            started_one = True
    return statuses


def parks_with_turn(statuses: Collection[StepStatus]) -> RunStatus | None:
    """The status the run parks in, in the transaction that recorded its turn, when nothing
    of the turn can run now (it only started children or asked for approvals); None when
    something is open. The statuses are exact there: the model was asked only once every
    earlier step had finished, and that transaction holds the tree's lock."""
    if any(s not in TERMINAL_STEP and s not in WAITING_STEP for s in statuses):
        return None
    return waiting_status_for(list(statuses))


def final_answer_turn(turns_recorded: int, reads: Sequence[ReadCall]) -> int:
    """The turn of a final answer: the one after the last recorded turn, batched reads
    included (they are recorded in the same transaction)."""
    return max([turns_recorded] + [read.turn + 1 for read in reads])
