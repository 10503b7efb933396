"""Delegation rules: a table of (target, path, depth) -> refusal, and argument parsing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.delegation import Refusal, Request, Target, check_delegation, delegable, parse_request

ACTIVE = Target(7, "enricher", "ACTIVE")


@pytest.mark.parametrize(
    ("target", "ancestors", "child_depth", "max_depth", "code"),
    [
        (ACTIVE, [1], 1, 3, None),
        (ACTIVE, [1, 2, 3], 3, 3, None),
        (ACTIVE, [1, 2, 3, 4], 4, 3, "DELEGATION_DEPTH_EXCEEDED"),
        (ACTIVE, [1], 1, 0, "DELEGATION_DEPTH_EXCEEDED"),
        (ACTIVE, [7], 1, 3, "DELEGATION_CYCLE"),  # itself
        (ACTIVE, [1, 7, 2], 3, 3, "DELEGATION_CYCLE"),  # an ancestor
        (None, [1], 1, 3, "UNKNOWN_AGENT"),
        (Target(7, "enricher", "PAUSED"), [1], 1, 3, "AGENT_NOT_ACTIVE"),
        (Target(7, "enricher", "ARCHIVED"), [1], 1, 3, "AGENT_NOT_ACTIVE"),
    ],
)
def test_check_delegation(
    target: Target | None, ancestors: list[int], child_depth: int, max_depth: int, code: str | None
) -> None:
    refusal = check_delegation(
        name="enricher", target=target, ancestors=ancestors, child_depth=child_depth, max_depth=max_depth
    )
    assert (refusal.code if refusal else None) == code


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"agent": "a", "task": "t"}, Request("a", "t", {})),
        ({"agent": "a", "task": "t", "input": {"n": 1}}, Request("a", "t", {"n": 1})),
        ({"agent": "", "task": "t"}, "INVALID_ARGUMENTS"),
        ({"agent": "a", "task": " "}, "INVALID_ARGUMENTS"),
        ({"agent": "a"}, "INVALID_ARGUMENTS"),
        ({"agent": "a", "task": "t", "input": [1]}, "INVALID_ARGUMENTS"),
        ({"agent": "a", "task": "t", "extra": 1}, "INVALID_ARGUMENTS"),
        ({"agent": "a", "task": "x" * 20_001}, "INVALID_ARGUMENTS"),
    ],
)
def test_parse_request(args: dict[str, Any], expected: Request | str) -> None:
    parsed = parse_request(args)
    if isinstance(expected, str):
        assert isinstance(parsed, Refusal) and parsed.code == expected
    else:
        assert parsed == expected


def test_the_child_input_is_the_task_merged_with_input() -> None:
    assert Request("a", "t", {"n": 1}).child_input() == {"task": "t", "n": 1}


@given(st.lists(st.tuples(st.integers(1, 20), st.sampled_from(["ACTIVE", "PAUSED", "ARCHIVED"])), max_size=15),
       st.lists(st.integers(1, 20), max_size=5))  # fmt: skip
def test_agents_list_offers_only_active_agents_off_the_path(
    raw: list[tuple[int, str]], path: list[int]
) -> None:
    agents = [Target(i, f"a{i}", status) for i, status in raw]
    offered = delegable(agents, path)
    assert all(t.status == "ACTIVE" and t.id not in path for t in offered)
    for t in offered:  # and nothing offered would be refused for its status or a cycle
        assert check_delegation(name=t.name, target=t, ancestors=path, child_depth=1, max_depth=3) is None
