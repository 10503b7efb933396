"""Quotas (app/domain/holds.py, docs/concepts/budgets.md#quotas): why a claim waits for a
slot, and which held runs a freed slot lets go. Tables, and a property: releasing never
lets more runs of a workspace or an agent run than its quota."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.budgets import concurrency_limit
from app.domain.holds import QUOTA_PREFIX, quota_reason, quota_releases


@pytest.mark.parametrize(
    ("agent_running", "agent_limit", "workspace_running", "workspace_limit", "expected"),
    [
        (None, None, 0, 10, None),
        (None, None, 9, 10, None),
        (None, None, 10, 10, "the workspace has 10 runs running (ENVERIF_MAX_ACTIVE_RUNS_PER_WORKSPACE 10)"),
        (1, 2, 0, 10, None),
        (2, 2, 0, 10, "agent 'scout' has 2 runs running (budget.maxConcurrentRuns 2)"),
        (5, 2, 0, 10, "agent 'scout' has 5 runs running (budget.maxConcurrentRuns 2)"),
        # The workspace's quota is named first: no agent slot helps while it is full.
        (2, 2, 10, 10, "the workspace has 10 runs running (ENVERIF_MAX_ACTIVE_RUNS_PER_WORKSPACE 10)"),
    ],
)
def test_quota_reason(
    agent_running: int | None, agent_limit: int | None, workspace_running: int, workspace_limit: int,
    expected: str | None,
) -> None:  # fmt: skip
    found = quota_reason(agent_name="scout", agent_running=agent_running, agent_limit=agent_limit,
                         workspace_running=workspace_running, workspace_limit=workspace_limit)  # fmt: skip
    assert found == (None if expected is None else QUOTA_PREFIX + expected)


def test_releases_fill_free_slots_oldest_first() -> None:
    held = [(7, 1, 10, 2), (3, 1, 10, 2), (5, 1, 11, None), (9, 2, 12, 1)]
    released = quota_releases(held, workspace_running={1: 1, 2: 0}, agent_running={10: 1}, workspace_limit=3)
    # Workspace 1 has 2 free slots: run 3 takes agent 10's last one, run 5 the workspace's last;
    # run 7 waits (both full). Workspace 2 lets run 9 go.
    assert released == [3, 5, 9]


def test_concurrency_limit_from_stored_limits() -> None:
    assert concurrency_limit({"maxConcurrentRuns": {"limit": 3, "imposedBy": "agent 'a'"}}) == 3
    assert concurrency_limit({"maxTokens": {"limit": 3, "imposedBy": "agent 'a'"}}) is None
    assert concurrency_limit(None) is None


# Agents 1..6; agent a belongs to workspace (a + 1) // 2 and has limit LIMITS[a] (None: none).
LIMITS = {1: None, 2: 1, 3: 2, 4: None, 5: 3, 6: 1}


@given(
    st.lists(st.integers(1, 6), max_size=30),
    st.integers(1, 6),
    st.dictionaries(st.integers(1, 6), st.integers(0, 4)),
)
def test_releasing_never_exceeds_a_quota(
    agents: list[int], workspace_limit: int, agent_running: dict[int, int]
) -> None:
    held = [(run_id, (a + 1) // 2, a, LIMITS[a]) for run_id, a in enumerate(agents)]
    workspace_running: dict[int, int] = {}
    for agent_id, count in agent_running.items():
        workspace_running[(agent_id + 1) // 2] = workspace_running.get((agent_id + 1) // 2, 0) + count
    released = set(quota_releases(held, workspace_running=workspace_running, agent_running=agent_running,
                                  workspace_limit=workspace_limit))  # fmt: skip
    for workspace_id in {w for _, w, _, _ in held}:
        went = sum(1 for r, w, _, _ in held if r in released and w == workspace_id)
        assert went <= max(0, workspace_limit - workspace_running.get(workspace_id, 0))
    for agent_id, limit in LIMITS.items():
        went = sum(1 for r, _, a, _ in held if r in released and a == agent_id)
        if limit is not None:
            assert went <= max(0, limit - agent_running.get(agent_id, 0))
