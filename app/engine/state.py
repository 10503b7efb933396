"""What one worker knows about the run it is executing: one object, shared by the loop
(``loop.py``), its writes (``persist.py``) and its side of the model (``turns.py``).

The decisions about it are pure functions (``app.domain.engine_rules``, ``app.domain.planner``);
this module only holds the data and what is derived from it directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.domain.budgets import MODEL_ANSWERED_AT, MODEL_ASKED_AT, add_usage
from app.domain.budgets import Limits as BudgetLimits
from app.domain.engine_rules import Outcome, ReadCall
from app.domain.planner import Limits, ToolInfo, call_key
from app.domain.policy import PolicyLink
from app.engine.base import ToolContext, ToolSpec

# Refusals that were never calls: they count neither as tool calls nor toward loops.
BUDGET_CODES = frozenset({"BUDGET_EXCEEDED", "LOOP_DETECTED"})

if TYPE_CHECKING:
    from app.db.orm import Run, RunStep
    from app.domain.agent_versions import AgentConfig
    from app.services.runs import Claim
    from app.settings import Settings


@dataclass
class RunState:
    """One claimed run, as this worker sees it.

    ``steps`` is the worker's view of the run's steps. While it holds the fence (its claimed
    ``attempt``), nobody else adds or finishes its steps except by deciding an approval or
    ending a child, both of which only touch WAITING steps; so the view is only re-read after
    waiting. What ran but is not written yet is ``unrecorded`` (one step's outcome) and
    ``reads`` (batched READ calls, not yet steps at all).
    """

    run: Run
    agent: AgentConfig  # the run's pinned version, not the live agent
    attempt: int
    memories: list[dict[str, Any]]  # injected at the first start: [{key, value, tags}]
    steps: list[RunStep]
    limits: Limits
    # Done but not yet written: one step's result, and batched READ calls.
    unrecorded: tuple[RunStep, Outcome] | None = None
    reads: list[ReadCall] = field(default_factory=list)
    # The index of the model turn last asked for (what batched reads are recorded under).
    asked_turn: int = 0
    # The agent's configuration, read once when the loop starts (``configure``).
    fast: bool = False  # the model is local and quick (scripted): see engine_rules.batches
    chain: list[PolicyLink] = field(default_factory=list)
    offered: list[ToolSpec] = field(default_factory=list)  # what the model is shown
    tools: dict[str, ToolInfo] = field(default_factory=dict)  # every registered tool, for the rules
    # Budgets (docs/concepts/budgets.md): the run's own limits; usage of the turns asked
    # since the last write, charged by the next one (with the first step of each turn
    # carrying its turn's usage); tool calls admitted so far; identical-call counts.
    budget: BudgetLimits = field(default_factory=dict)
    pending_usage: dict[str, Any] = field(default_factory=dict)
    turn_usage: dict[int, dict[str, Any]] = field(default_factory=dict)
    tool_calls_used: int = 0
    call_counts: dict[str, int] = field(default_factory=dict)
    price: dict[str, float] | None = None

    @classmethod
    def of_claim(cls, claimed: Claim, settings: Settings) -> RunState:
        from app.services.transitions.usage import model_price, run_limits

        budget = run_limits(settings, claimed.run)
        turns = budget["maxTurns"]
        counts: dict[str, int] = {}
        for step in claimed.steps:
            if step.tool is not None and step.error_code not in BUDGET_CODES:
                key = call_key(step.tool, step.arguments)
                counts[key] = counts.get(key, 0) + 1
        return cls(
            run=claimed.run,
            agent=claimed.agent,
            attempt=claimed.attempt,
            memories=claimed.memories,
            steps=claimed.steps,
            limits=Limits(
                max_turns=int(turns.limit),
                max_value_bytes=settings.max_result_bytes,
                max_json_depth=settings.max_json_depth,
                turns_by=turns.imposed_by,
            ),
            budget=budget,
            tool_calls_used=int((claimed.run.usage or {}).get("toolCalls", 0)),
            call_counts=counts,
            price=model_price(settings, claimed.agent.model),
        )

    def spend(self, turn: int, usage: dict[str, Any]) -> None:
        """A turn's usage, to be charged (and shown on its first step) by the next write."""
        self.pending_usage = add_usage(self.pending_usage, usage)
        self.turn_usage[turn] = add_usage(self.turn_usage.get(turn), usage)

    def time_turn(self, turn: int, asked_at: datetime, answered_at: datetime) -> None:
        """When the model was asked for ``turn`` and when it answered (the worker's clock),
        kept beside the turn's usage on its first step: the run page draws the model's time
        (docs/console.md). Not charged: ``pending_usage`` holds only what budgets count."""
        timed = self.turn_usage.setdefault(turn, {})
        timed[MODEL_ASKED_AT], timed[MODEL_ANSWERED_AT] = asked_at.isoformat(), answered_at.isoformat()

    def take_usage(self) -> dict[str, Any]:
        usage, self.pending_usage = self.pending_usage, {}
        return usage

    # Fixed for the run's life (plain attributes: they are read on every write).
    run_id: int = field(init=False)
    root_id: int = field(init=False)

    def __post_init__(self) -> None:
        self.run_id = self.run.id
        self.root_id = self.run.root_run_id or self.run.id

    @property
    def has_unrecorded(self) -> bool:
        """Something ran that only a later write will record."""
        return self.unrecorded is not None or bool(self.reads)

    def next_seq(self) -> int:
        return max((s.seq for s in self.steps), default=0) + 1

    def tool_context(self, step_id: int | None, settings: Settings) -> ToolContext:
        return ToolContext(
            workspace_id=self.run.workspace_id,
            agent_id=self.run.agent_id,
            run_id=self.run.id,
            step_id=step_id,
            settings=settings,
        )
