"""Usage and Budget: what a run (or its subtree, or one turn) consumed, and its limits
(docs/concepts/budgets.md)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import strawberry

from app.domain.budgets import Effective


@strawberry.type(name="Usage", description="What a model turn, a run or a run's subtree consumed.")
class Usage:
    input_tokens: int = strawberry.field(description="Prompt tokens sent to the model.")
    output_tokens: int = strawberry.field(description="Tokens the model generated.")
    cache_read_tokens: int = strawberry.field(
        description="Prompt tokens the provider served from its prompt cache."
    )
    cache_write_tokens: int = strawberry.field(
        description="Prompt tokens the provider wrote to its prompt cache."
    )
    cost_usd: float = strawberry.field(
        description="From ENVERIF_MODEL_PRICES; 0 for a model without a price."
    )
    tool_calls: int = strawberry.field(description="Tool calls made (steps other than the final answer).")
    children: int = strawberry.field(description="Child runs started by agents.delegate.")
    turns: int = strawberry.field(description="Model turns (one model request and its answer each).")
    runs: int = strawberry.field(description="Runs counted (1 for a run; its subtree's for treeUsage).")
    wall_s: float = strawberry.field(
        description="Wall-clock seconds from the run's creation to its end (or now)."
    )

    @classmethod
    def of(cls, usage: Mapping[str, Any] | None, *, wall_s: float = 0.0, runs: int | None = None) -> Usage:
        u = usage or {}
        return cls(
            input_tokens=int(u.get("inputTokens", 0)),
            output_tokens=int(u.get("outputTokens", 0)),
            cache_read_tokens=int(u.get("cacheReadTokens", 0)),
            cache_write_tokens=int(u.get("cacheWriteTokens", 0)),
            cost_usd=float(u.get("costUsd", 0.0)),
            tool_calls=int(u.get("toolCalls", 0)),
            children=int(u.get("children", 0)),
            turns=int(u.get("turns", 0)),
            runs=int(u.get("runs", 0)) if runs is None else runs,
            wall_s=wall_s,
        )


@strawberry.type(name="BudgetLimit", description="One effective budget limit of a run.")
class BudgetLimit:
    name: str = strawberry.field(description="maxTokens, maxCostUsd, maxTurns, ...")
    limit: float = strawberry.field(description="What the run may reach: used + remaining.")
    used: float = strawberry.field(description="How much of the limit is spent.")
    remaining: float = strawberry.field(
        description="How much is left before calls are refused with BUDGET_EXCEEDED."
    )
    imposed_by: str = strawberry.field(
        description="Who set the binding limit: an agent, the deployment (its setting), the caller, a schedule."
    )
    imposed_on_run_id: strawberry.ID = strawberry.field(
        description="The run whose limit binds: this run, or an ancestor whose remainder is smaller."
    )

    @classmethod
    def of(cls, found: Effective, global_id: str) -> BudgetLimit:
        return cls(name=found.key, limit=found.limit, used=found.used, remaining=found.remaining,
                   imposed_by=found.imposed_by, imposed_on_run_id=strawberry.ID(global_id))  # fmt: skip


def wall_s(created_at: datetime | None, finished_at: datetime | None, now: datetime) -> float:
    if created_at is None:
        return 0.0
    return max(0.0, ((finished_at or now) - created_at).total_seconds())
