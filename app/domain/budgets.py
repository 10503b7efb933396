"""Budgets: bounded autonomy, inherited down the run tree (docs/concepts/budgets.md). Pure.

A run's *own* limits are fixed when it is created (``own_limits``): the deployment's
defaults, replaced by its agent's ``budget``, tightened by the caller (``startRun(budget:)``,
a schedule's ``budget``), each limit remembering who imposed it. Its *effective* limits add
what is left of every ancestor's subtree limits, so a child can never spend more than its
ancestors have left::

    run-scoped     maxTurns maxToolCalls maxCallsPerTurn maxChildren   (this run only)
    subtree-scoped maxTokens maxCostUsd maxTreeRuns                    (the run and below)
    wall clock     maxWallS   (from the run's creation; an ancestor's deadline binds below)

Counting is in ``Usage`` dictionaries (``inputTokens``, ``outputTokens``, ``costUsd``,
``toolCalls``, ``children``, ``turns``; subtree usage adds ``runs``). Two ways of running out:

- *admission*: a call or a child that would go over a count limit is not executed; the model
  sees ``BUDGET_EXCEEDED`` (``admit``). Counts are checked before anything happens, so they
  never go over (the property tests hold that for any order of siblings' calls).
- *spent*: tokens and cost are only known after the model answered, so they are charged and
  then checked (``spent``); the run that finds a limit of its chain spent ends ``FAILED``
  with ``BUDGET_EXCEEDED``. Overspend is bounded by one model turn.

The engine checks and charges under the tree's root lock, so concurrent siblings see each
other's charges.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.domain.errors import ValidationFailed

# Every key a budget may hold, and its bounds: zero and negative limits are refused (an agent
# that may not run is PAUSED, not budgeted to nothing), so are absurd ones.
INT_LIMITS: Final[Mapping[str, int]] = {
    "maxTurns": 10_000,
    "maxToolCalls": 1_000_000,
    "maxCallsPerTurn": 10_000,
    "maxChildren": 100_000,
    "maxTreeRuns": 1_000_000,
    "maxTokens": 10**12,
}
FLOAT_LIMITS: Final[Mapping[str, float]] = {
    "maxCostUsd": 1_000_000.0,
    "maxWallS": 366 * 86_400.0,
}
KEYS: Final = (*INT_LIMITS, *FLOAT_LIMITS)
# Quotas: not limits on what a run spends but on how many of the agent's runs execute at
# once. Stored with the run's own limits; a claim over it holds the run (app/domain/holds.py).
QUOTA_LIMITS: Final[Mapping[str, int]] = {"maxConcurrentRuns": 10_000}

# Limits over the run's subtree, and what each counts in a subtree usage.
SUBTREE: Final[Mapping[str, str]] = {"maxTokens": "tokens", "maxCostUsd": "costUsd", "maxTreeRuns": "runs"}
# Limits over the run alone.
RUN_SCOPED: Final[Mapping[str, str]] = {
    "maxTurns": "turns",
    "maxToolCalls": "toolCalls",
    "maxChildren": "children",
}
# What spends (known after the fact) as opposed to what is admitted (counted before).
SPENDABLE: Final = ("maxTokens", "maxCostUsd", "maxWallS")

USAGE_KEYS: Final = (
    "inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "costUsd",
    "toolCalls", "children", "turns", "runs",
)  # fmt: skip

DEPLOYMENT = "the deployment"
CALLER = "the caller"


@dataclass(frozen=True, slots=True)
class Limit:
    limit: float
    imposed_by: str  # "agent 'x'", "the deployment (ENVERIF_…)", "the caller", "schedule 4"

    def as_json(self) -> dict[str, Any]:
        return {"limit": self.limit, "imposedBy": self.imposed_by}


Limits = dict[str, Limit]


def parse_budget(value: Any, *, field: str = "budget") -> dict[str, float]:
    """A budget JSON object, checked: every key known, every limit a positive number within
    its bound. Raises ``ValidationFailed`` naming ``<field>.<key>``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationFailed(f"{field} must be a JSON object", field=field)
    checked: dict[str, float] = {}
    for key, limit in value.items():
        where = f"{field}.{key}"
        if key not in KEYS and key not in QUOTA_LIMITS:
            known = ", ".join((*KEYS, *QUOTA_LIMITS))
            raise ValidationFailed(f"{where} is not a budget limit (known: {known})", field=where)
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit):
            raise ValidationFailed(f"{where} must be a number", field=where)
        number: float
        bound: float
        whole = INT_LIMITS.get(key) or QUOTA_LIMITS.get(key)
        if whole is not None:
            if limit != int(limit):
                raise ValidationFailed(f"{where} must be a whole number", field=where)
            number, bound = int(limit), whole
        else:
            number, bound = float(limit), FLOAT_LIMITS[key]
        if not 0 < number <= bound:
            raise ValidationFailed(f"{where} must be greater than 0 and at most {bound:g}", field=where)
        checked[key] = number
    return checked


def own_limits(
    *,
    defaults: Mapping[str, tuple[float, str]],
    agent_name: str,
    agent_budget: Mapping[str, float],
    tighter: Sequence[tuple[Mapping[str, float], str]] = (),
) -> Limits:
    """A new run's own limits: ``defaults`` (key -> (limit, setting name)) where the agent
    sets nothing, the agent's budget, then each of ``tighter`` (budget, who) in turn, which
    may only tighten: a looser value is refused naming its field, never silently clamped."""
    limits: Limits = {
        key: Limit(limit, f"{DEPLOYMENT} ({setting})") for key, (limit, setting) in defaults.items()
    }
    for key, limit in agent_budget.items():
        limits[key] = Limit(limit, f"agent {agent_name!r}")
    for budget, who in tighter:
        for key, limit in budget.items():
            current = limits.get(key)
            if current is not None and limit > current.limit:
                raise ValidationFailed(
                    f"budget.{key} {limit:g} is looser than {current.limit:g} set by {current.imposed_by}; "
                    "a budget given here may only tighten",
                    field=f"budget.{key}",
                )
            limits[key] = Limit(limit, who)
    return limits


def limits_from_json(value: Any) -> Limits:
    """A run's stored own limits (``Limit.as_json`` per key)."""
    if not isinstance(value, dict):
        return {}
    return {key: Limit(item["limit"], item["imposedBy"]) for key, item in value.items()}


def concurrency_limit(stored: Any) -> int | None:
    """A run's own ``maxConcurrentRuns`` from its stored limits (``limits_json``), or None."""
    found = stored.get("maxConcurrentRuns") if isinstance(stored, dict) else None
    return None if not isinstance(found, dict) else int(found["limit"])


def concurrency_effective(stored: Any, *, run_id: int, running: int) -> Effective | None:
    """A run's ``maxConcurrentRuns`` as ``Run.budget`` lists it (docs/concepts/budgets.md#quotas):
    used is how many of its agent's runs are RUNNING now (``running``); None without one."""
    found = stored.get("maxConcurrentRuns") if isinstance(stored, dict) else None
    if not isinstance(found, dict):
        return None
    limit = float(found["limit"])
    return Effective("maxConcurrentRuns", limit, float(running), max(0.0, limit - running),
                     str(found["imposedBy"]), run_id, limit)  # fmt: skip


def limits_json(limits: Limits) -> dict[str, Any]:
    return {key: limit.as_json() for key, limit in limits.items()}


# -- usage ---------------------------------------------------------------------------------


# A turn's usage as kept on its first step also says when the model was asked and answered
# (ISO 8601 text, the worker's clock): the run page's timeline draws the turn from them. They
# are never charged nor summed (a run's usage has none).
MODEL_ASKED_AT = "modelAskedAt"
MODEL_ANSWERED_AT = "modelAnsweredAt"


def add_usage(usage: Mapping[str, Any] | None, delta: Mapping[str, float]) -> dict[str, Any]:
    """A new usage dictionary: ``usage`` plus ``delta`` (zeros are left out)."""
    total: dict[str, Any] = dict(usage or {})
    for key, amount in delta.items():
        if amount:
            total[key] = total.get(key, 0) + amount
    return total


def counted(key: str, usage: Mapping[str, Any] | None) -> float:
    """What limit ``key`` counts in ``usage`` (a run's own for run-scoped limits, its
    subtree's for subtree limits)."""
    usage = usage or {}
    what = SUBTREE.get(key) or RUN_SCOPED.get(key)
    if what == "tokens":
        return float(usage.get("inputTokens", 0) + usage.get("outputTokens", 0))
    return float(usage.get(what or "", 0))


def turn_cost_usd(usage: Mapping[str, int], price: Mapping[str, float] | None) -> float:
    """What one turn cost at ``price`` (USD per million tokens of each kind); 0 unpriced."""
    if not price:
        return 0.0
    per_token = {
        "inputTokens": price.get("input", 0.0),
        "outputTokens": price.get("output", 0.0),
        "cacheReadTokens": price.get("cacheRead", 0.0),
        "cacheWriteTokens": price.get("cacheWrite", 0.0),
    }
    return sum(usage.get(kind, 0) * usd for kind, usd in per_token.items()) / 1_000_000


# -- the chain -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ledger:
    """One run of a chain as the budget sees it: its own limits and what it used."""

    run_id: int
    limits: Limits
    usage: Mapping[str, Any]  # its own
    tree_usage: Mapping[str, Any]  # its subtree's, itself included
    elapsed_s: float  # since its creation

    def used(self, key: str) -> float:
        if key == "maxWallS":
            return self.elapsed_s
        return counted(key, self.tree_usage if key in SUBTREE else self.usage)


@dataclass(frozen=True, slots=True)
class Effective:
    """One effective limit of a run: the tightest of its own and its ancestors' remainders."""

    key: str
    limit: float  # what the run may reach: its used + remaining
    used: float
    remaining: float
    imposed_by: str
    run_id: int  # the run whose limit it is (the run itself, or an ancestor)
    set_limit: float  # the limit as whoever imposed it set it (on ``run_id``)


def _inherits(key: str) -> bool:
    return key in SUBTREE or key == "maxWallS"


def effective(chain: Sequence[Ledger], keys: Sequence[str] = KEYS) -> dict[str, Effective]:
    """The effective limits of ``chain[-1]`` (``chain`` is root first) among ``keys``: for
    each key, the least remainder among its own limit and, for subtree and wall-clock limits,
    every ancestor's. Ties go to the higher run (the ancestor imposed it first)."""
    me = chain[-1]
    out: dict[str, Effective] = {}
    for key in keys:
        inherits = _inherits(key)
        best: Effective | None = None
        used = 0.0
        for ledger in chain:
            limit = ledger.limits.get(key)
            if limit is None or (ledger is not me and not inherits):
                continue
            if best is None:
                used = me.used(key)  # only for keys some run of the chain limits
            remaining = max(0.0, limit.limit - ledger.used(key))
            if best is None or remaining < best.remaining:
                best = Effective(
                    key, used + remaining, used, remaining, limit.imposed_by, ledger.run_id, limit.limit
                )
        if best is not None:
            out[key] = best
    return out


def spent(chain: Sequence[Ledger]) -> Effective | None:
    """The first token, cost or wall-clock limit of the chain that is used up, if any: the
    run must end (``BUDGET_EXCEEDED``)."""
    limits = effective(chain, SPENDABLE)
    for key in SPENDABLE:
        found = limits.get(key)
        if found is not None and found.remaining <= 0:
            return found
    return None


@dataclass(frozen=True, slots=True)
class Admission:
    """How many of the asked-for items fit; ``refusal`` says why the rest do not."""

    admitted: int
    refusal: Effective | None = None


def admit(chain: Sequence[Ledger], key: str, asked: int) -> Admission:
    """How many of ``asked`` new items counted by ``key`` (tool calls, children, tree runs)
    the effective limit still admits."""
    found = effective(chain, (key,)).get(key)
    if found is None or found.remaining >= asked:
        return Admission(asked)
    return Admission(int(found.remaining), found)


def admit_calls(*, run_id: int, calls: int, limits: Limits, tool_calls_used: int) -> Admission:
    """A turn's calls against ``maxCallsPerTurn`` and ``maxToolCalls`` (run-scoped, so only
    the run's own limits count)."""
    admitted, refusal = calls, None
    per_turn = limits.get("maxCallsPerTurn")
    if per_turn is not None and per_turn.limit < admitted:
        admitted = int(per_turn.limit)
        refusal = Effective(
            "maxCallsPerTurn", per_turn.limit, calls, 0.0, per_turn.imposed_by, run_id, per_turn.limit
        )
    total = limits.get("maxToolCalls")
    if total is not None:
        left = max(0, int(total.limit) - tool_calls_used)
        if left < admitted:
            admitted = left
            refusal = Effective(
                "maxToolCalls", total.limit, tool_calls_used, left, total.imposed_by, run_id, total.limit
            )
    return Admission(admitted, refusal)


def refusal_message(found: Effective) -> str:
    """What the model (or the run's error) reads: the limit and who set it."""
    limit = f"{found.key} {found.set_limit:g} set by {found.imposed_by}"
    if found.key == "maxCallsPerTurn":
        return f"{limit}: this call is over it and was not executed"
    if found.key in RUN_SCOPED:
        return f"{limit} is used up by run {found.run_id}"
    if found.key == "maxWallS":
        return f"{limit} for run {found.run_id} has passed"
    return f"{limit} for run {found.run_id}'s subtree is used up"


def turn_limit(limits: Limits) -> int | None:
    found = limits.get("maxTurns")
    return None if found is None else int(found.limit)
