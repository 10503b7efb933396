"""The pure budget arithmetic (app/domain/budgets.py): parsing, tightening, effective limits
down a chain, admission and spending. Tables of cases, and properties that hold for any
sequence of charges: inheritance never loosens, siblings never overspend."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.budgets import (
    Ledger,
    Limit,
    add_usage,
    admit,
    admit_calls,
    effective,
    own_limits,
    parse_budget,
    refusal_message,
    spent,
    turn_cost_usd,
)
from app.domain.errors import ValidationFailed

DEFAULTS = {"maxTurns": (50, "ENVERIF_MAX_TURNS"), "maxTreeRuns": (100, "ENVERIF_MAX_TREE_RUNS")}


@pytest.mark.parametrize(
    ("budget", "parsed"),
    [
        (None, {}),
        ({}, {}),
        ({"maxTokens": 1000}, {"maxTokens": 1000}),
        ({"maxTokens": 1000.0}, {"maxTokens": 1000}),
        ({"maxCostUsd": 2}, {"maxCostUsd": 2.0}),
        ({"maxWallS": 0.5, "maxTurns": 3}, {"maxWallS": 0.5, "maxTurns": 3}),
        ({"maxConcurrentRuns": 2}, {"maxConcurrentRuns": 2}),
    ],
)
def test_parse_accepts(budget: Any, parsed: dict[str, float]) -> None:
    assert parse_budget(budget) == parsed


@pytest.mark.parametrize(
    ("budget", "field"),
    [
        ([], "budget"),
        ("10", "budget"),
        ({"maxTokens": 0}, "budget.maxTokens"),
        ({"maxTokens": -5}, "budget.maxTokens"),
        ({"maxTokens": "5"}, "budget.maxTokens"),
        ({"maxTokens": True}, "budget.maxTokens"),
        ({"maxTokens": float("nan")}, "budget.maxTokens"),
        ({"maxTokens": float("inf")}, "budget.maxTokens"),
        ({"maxTokens": 10**13}, "budget.maxTokens"),
        ({"maxTurns": 2.5}, "budget.maxTurns"),
        ({"maxCostUsd": 0}, "budget.maxCostUsd"),
        ({"maxWallS": 10**9}, "budget.maxWallS"),
        ({"tokens": 5}, "budget.tokens"),
        ({"maxConcurrentRuns": 0}, "budget.maxConcurrentRuns"),
        ({"maxConcurrentRuns": 1.5}, "budget.maxConcurrentRuns"),
        ({"maxConcurrentRuns": "2"}, "budget.maxConcurrentRuns"),
        ({"maxConcurrentRuns": 10**6}, "budget.maxConcurrentRuns"),
    ],
)
def test_parse_refuses_naming_the_field(budget: Any, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_budget(budget)
    assert caught.value.field == field


def test_own_limits_layers_defaults_agent_and_caller() -> None:
    limits = own_limits(
        defaults=DEFAULTS, agent_name="a", agent_budget={"maxTurns": 80, "maxTokens": 500},
        tighter=[({"maxTokens": 200, "maxTreeRuns": 10}, "the caller")],
    )  # fmt: skip
    assert limits == {
        "maxTurns": Limit(80, "agent 'a'"),  # an agent's budget replaces the default, looser or not
        "maxTokens": Limit(200, "the caller"),
        "maxTreeRuns": Limit(10, "the caller"),
    }


@pytest.mark.parametrize(
    ("tighter", "field"),
    [({"maxTokens": 501}, "budget.maxTokens"), ({"maxTreeRuns": 101}, "budget.maxTreeRuns")],
)
def test_a_caller_may_only_tighten(tighter: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        own_limits(
            defaults=DEFAULTS, agent_name="a", agent_budget={"maxTokens": 500}, tighter=[(tighter, "x")]
        )
    assert caught.value.field == field and "may only tighten" in caught.value.message


def ledger(run_id: int, limits: dict[str, float], *, tree: dict[str, float] | None = None,
           own: dict[str, float] | None = None, elapsed_s: float = 0.0) -> Ledger:  # fmt: skip
    return Ledger(run_id, {k: Limit(v, f"agent 'r{run_id}'") for k, v in limits.items()}, own or {}, tree or {},
                  elapsed_s)  # fmt: skip


@pytest.mark.parametrize(
    ("chain", "key", "limit", "remaining", "by_run"),
    [
        # own limit only
        ([ledger(1, {"maxTokens": 100}, tree={"inputTokens": 30})], "maxTokens", 100, 70, 1),
        # the parent's remainder is smaller than the child's own limit: the child is held to it
        ([ledger(1, {"maxTokens": 100}, tree={"inputTokens": 90}), ledger(2, {"maxTokens": 50}, tree={"outputTokens": 5})],
         "maxTokens", 15, 10, 1),
        # the child's own limit is tighter
        ([ledger(1, {"maxTokens": 1000}), ledger(2, {"maxTokens": 50})], "maxTokens", 50, 50, 2),
        # three levels: the grandparent binds
        ([ledger(1, {"maxCostUsd": 1.0}, tree={"costUsd": 0.9}), ledger(2, {"maxCostUsd": 5}), ledger(3, {})],
         "maxCostUsd", 0.1, 0.1, 1),
        # run-scoped limits do not inherit
        ([ledger(1, {"maxTurns": 1}, own={"turns": 1}), ledger(2, {"maxTurns": 10}, own={"turns": 2})],
         "maxTurns", 10, 8, 2),
        # wall clock: an ancestor's deadline binds below
        ([ledger(1, {"maxWallS": 60}, elapsed_s=50), ledger(2, {"maxWallS": 600}, elapsed_s=5)], "maxWallS", 15, 10, 1),
    ],
)  # fmt: skip
def test_effective_limits_down_a_chain(
    chain: list[Ledger], key: str, limit: float, remaining: float, by_run: int
) -> None:
    found = effective(chain)[key]
    assert (found.limit, found.remaining, found.run_id) == pytest.approx((limit, remaining, by_run))


def test_spent_names_the_limit_and_who_set_it() -> None:
    chain = [ledger(1, {"maxTokens": 100}, tree={"inputTokens": 60, "outputTokens": 40}), ledger(2, {})]
    found = spent(chain)
    assert found is not None and found.key == "maxTokens"
    assert refusal_message(found) == "maxTokens 100 set by agent 'r1' for run 1's subtree is used up"
    assert spent([ledger(1, {"maxTokens": 100}, tree={"inputTokens": 99})]) is None


@pytest.mark.parametrize(
    ("calls", "used", "limits", "admitted", "key"),
    [
        (300, 0, {"maxCallsPerTurn": 16}, 16, "maxCallsPerTurn"),
        (3, 0, {"maxCallsPerTurn": 16}, 3, None),
        (10, 95, {"maxCallsPerTurn": 16, "maxToolCalls": 100}, 5, "maxToolCalls"),
        (10, 100, {"maxToolCalls": 100}, 0, "maxToolCalls"),
    ],
)
def test_admit_calls(calls: int, used: int, limits: dict[str, float], admitted: int, key: str | None) -> None:
    result = admit_calls(run_id=1, calls=calls, limits={k: Limit(v, "x") for k, v in limits.items()},
                         tool_calls_used=used)  # fmt: skip
    assert result.admitted == admitted
    assert (result.refusal.key if result.refusal else None) == key


def test_cost_from_prices() -> None:
    usage = {"inputTokens": 1_000_000, "outputTokens": 500_000, "cacheReadTokens": 2_000_000}
    assert turn_cost_usd(usage, {"input": 0.15, "output": 0.6, "cacheRead": 0.075}) == pytest.approx(0.6)
    assert turn_cost_usd(usage, None) == 0.0


# -- properties ----------------------------------------------------------------------------

limits_st = st.dictionaries(st.sampled_from(["maxTokens", "maxTreeRuns", "maxCostUsd"]), st.integers(1, 50))


@given(st.lists(limits_st, min_size=1, max_size=4), st.lists(st.integers(0, 40), min_size=1, max_size=4))
def test_inheritance_never_loosens(chain_limits: list[dict[str, int]], used: list[int]) -> None:
    """A run's effective remainder is never more than any ancestor's remainder."""
    chain = [
        ledger(i, lim, tree={"inputTokens": used[i % len(used)], "runs": used[i % len(used)],
                             "costUsd": used[i % len(used)]})
        for i, lim in enumerate(chain_limits)
    ]  # fmt: skip
    mine = effective(chain)
    for key, found in mine.items():
        for anc in chain:
            if key in anc.limits:
                assert found.remaining <= max(0.0, anc.limits[key].limit - anc.used(key))


@given(
    st.integers(1, 30),  # the root's maxTreeRuns
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=40),  # (sibling, children asked)
)
def test_siblings_racing_never_overspend(max_tree_runs: int, asks: list[tuple[int, int]]) -> None:
    """Any interleaving of four siblings admitting children under the root's maxTreeRuns:
    admitted children, charged as they would be, never take the root past its limit."""
    root_tree: dict[str, Any] = {"runs": 5}  # the root and four siblings
    siblings: list[dict[str, Any]] = [{"runs": 1} for _ in range(4)]
    root_limits = {"maxTreeRuns": max(max_tree_runs, 5)}
    for sibling, asked in asks:
        chain = [ledger(0, root_limits, tree=root_tree), ledger(sibling + 1, {}, tree=siblings[sibling])]
        admitted = admit(chain, "maxTreeRuns", asked).admitted
        assert 0 <= admitted <= asked
        root_tree = add_usage(root_tree, {"runs": admitted})
        siblings[sibling] = add_usage(siblings[sibling], {"runs": admitted})
        assert root_tree["runs"] <= root_limits["maxTreeRuns"]
    assert root_tree["runs"] == 1 + sum(s["runs"] for s in siblings)
