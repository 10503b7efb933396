"""Usage charges and budget checks of a run tree: part of ``TreeTx`` (docs/concepts/budgets.md).

Every charge goes to the run's own ``usage`` and to the ``tree_usage`` of the run and each
ancestor, in the tree transaction, under the root's lock: every writer of a tree holds it,
so two siblings charging (or admitting children) at the same moment see each other's
charges, and neither can spend what the other already took. ``tree_usage`` is maintained
here incrementally, so reading a subtree's usage is one row, not a recursive query.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.db.orm import Run
from app.domain.budgets import (
    CALLER,
    DEPLOYMENT,
    Ledger,
    Limit,
    Limits,
    add_usage,
    limits_from_json,
    own_limits,
)
from app.domain.errors import ValidationFailed

if TYPE_CHECKING:
    from app.settings import Settings


def deployment_defaults(settings: Settings) -> dict[str, tuple[float, str]]:
    """The limits a run has where neither its agent nor its caller set one."""
    return {
        "maxTurns": (settings.max_turns, "ENVERIF_MAX_TURNS"),
        "maxCallsPerTurn": (settings.max_calls_per_turn, "ENVERIF_MAX_CALLS_PER_TURN"),
        "maxChildren": (settings.max_children_per_run, "ENVERIF_MAX_CHILDREN_PER_RUN"),
        "maxTreeRuns": (settings.max_tree_runs, "ENVERIF_MAX_TREE_RUNS"),
    }


def run_limits(settings: Settings, run: Run) -> Limits:
    """A run's own limits: the deployment's defaults where its stored ones (its agent's and
    its caller's, fixed at creation) say nothing."""
    limits: Limits = {
        key: Limit(limit, f"{DEPLOYMENT} ({setting})")
        for key, (limit, setting) in deployment_defaults(settings).items()
    }
    limits.update(limits_from_json(run.budget))
    return limits


def ledger(settings: Settings, run: Run, now: datetime) -> Ledger:
    created = run.created_at
    elapsed = max(0.0, (now - created).total_seconds()) if created is not None else 0.0
    end = run.finished_at
    if end is not None and created is not None:
        elapsed = max(0.0, (end - created).total_seconds())
    return Ledger(run.id, run_limits(settings, run), run.usage or {}, run.tree_usage or {}, elapsed)


class UsageWrites:
    """Mixed into ``TreeTx``; relies on its locked ``run`` reads and clock."""

    now: datetime

    if TYPE_CHECKING:  # provided by TreeTx; declared for type checkers only

        async def run(self, run_id: int) -> Run: ...

    async def ancestry(self, run: Run) -> list[Run]:
        """``run`` and its ancestors, root first (each locked; the root already is)."""
        chain = [run]
        while chain[-1].parent_run_id is not None:
            chain.append(await self.run(chain[-1].parent_run_id))
        return chain[::-1]

    async def chain_ledgers(self, settings: Settings, run: Run) -> list[Ledger]:
        return [ledger(settings, r, self.now) for r in await self.ancestry(run)]

    async def charge(
        self, run: Run, own: Mapping[str, float], tree: Mapping[str, float] | None = None
    ) -> None:
        """Add ``own`` to the run's usage and ``tree`` (default: ``own``) to its subtree's and
        every ancestor's. New dictionaries are assigned, so the ORM sees the change."""
        if any(own.values()):
            run.usage = add_usage(run.usage, own)
        tree = own if tree is None else tree
        if not any(tree.values()):
            return
        for holder in await self.ancestry(run):
            holder.tree_usage = add_usage(holder.tree_usage, tree)


def usage_dict(usage: Any) -> dict[str, int]:
    """A provider's ``Usage`` as a usage dictionary (camelCase keys)."""
    if usage is None:
        return {}
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadTokens": usage.cache_read_tokens,
        "cacheWriteTokens": usage.cache_write_tokens,
    }


def model_price(settings: Settings, model: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The deployment's price of an agent's model (``ENVERIF_MODEL_PRICES`` by its
    ``model`` name, else by its provider's name), or None."""
    model = model or {}
    name = model.get("model") or model.get("provider")
    return settings.model_prices.get(str(name)) if name is not None else None


def check_budget(settings: Settings, *, agent_name: str, agent_budget: Mapping[str, float],
                 model: Mapping[str, Any] | None, tighter: Mapping[str, float] | None = None,
                 tighter_by: str = CALLER) -> None:  # fmt: skip
    """Refuse (``VALIDATION_FAILED``) a budget that loosens what it must tighten, or that
    limits cost on a model without a price."""
    pairs = [(tighter, tighter_by)] if tighter else []
    limits = own_limits(defaults=deployment_defaults(settings), agent_name=agent_name,
                        agent_budget=agent_budget, tighter=pairs)  # fmt: skip
    if "maxCostUsd" in limits and model_price(settings, model) is None:
        name = (model or {}).get("model") or (model or {}).get("provider")
        raise ValidationFailed(
            f"budget.maxCostUsd needs a price for model {name!r} in ENVERIF_MODEL_PRICES",
            field="budget.maxCostUsd",
        )
