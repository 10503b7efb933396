"""Ids inside the JSON values the API hands out are global ids (docs/graphql/frontends.md)."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.global_ids import (
    NODE_TYPES,
    OBJECT_ID_TYPES,
    object_id,
    parse_global_id,
    public_payload,
    public_policy_chain,
    public_step_result,
    to_global_id,
)

RUN_2 = to_global_id("Run", 2)


@pytest.mark.parametrize(
    ("payload", "public"),
    [
        (
            {"agentId": 3, "agent": "a", "depth": 0},
            {"agentId": to_global_id("Agent", 3), "agent": "a", "depth": 0},
        ),
        ({"parentStepId": 7, "task": "t"}, {"parentStepId": to_global_id("RunStep", 7), "task": "t"}),
        ({"childRunId": 2, "seq": 1}, {"childRunId": RUN_2, "seq": 1}),
        (
            {"approvalId": 4, "status": "APPROVED"},
            {"approvalId": to_global_id("Approval", 4), "status": "APPROVED"},
        ),
        # Already global, not an id, or not ours: left alone.
        ({"approvalId": "QXBwcm92YWw6NA"}, {"approvalId": "QXBwcm92YWw6NA"}),
        (
            {"approvalId": None, "agentId": True, "childRunId": 0},
            {"approvalId": None, "agentId": True, "childRunId": 0},
        ),
        ({"seq": 5, "nested": {"agentId": 1}}, {"seq": 5, "nested": {"agentId": 1}}),
        (None, None),
        ([1, 2], [1, 2]),
    ],
)
def test_payload_ids(payload: Any, public: Any) -> None:
    assert public_payload(payload) == public


@pytest.mark.parametrize(
    ("result", "child", "public"),
    [
        ({"status": "SUCCEEDED", "runId": 2}, 2, {"status": "SUCCEEDED", "runId": RUN_2}),
        ({"status": "SUCCEEDED", "runId": RUN_2}, 2, {"status": "SUCCEEDED", "runId": RUN_2}),
        # Another tool's data that happens to say runId is the tool's, not ours.
        ({"runId": 2}, None, {"runId": 2}),
        ({"runId": 9}, 2, {"runId": 9}),
        ("text", 2, "text"),
    ],
)
def test_step_result_ids(result: Any, child: int | None, public: Any) -> None:
    assert public_step_result(result, child) == public


def test_policy_chain_links_are_camel_case_with_global_ids() -> None:
    stored = [
        {"agent_id": 1, "agent_name": "root", "policy": {"default": "ALLOW"}},
        {"agent_id": 5, "agent_name": "leaf"},
    ]
    assert public_policy_chain(stored) == [
        {"agentId": to_global_id("Agent", 1), "agentName": "root", "policy": {"default": "ALLOW"}},
        {"agentId": to_global_id("Agent", 5), "agentName": "leaf", "policy": None},
    ]
    assert public_policy_chain(None) == []


def test_object_ids_never_equal_a_node_id_or_each_other() -> None:
    ids = [object_id(t, 1) for t in sorted(OBJECT_ID_TYPES)] + [
        to_global_id(t, 1) for t in sorted(NODE_TYPES)
    ]
    assert len(set(ids)) == len(ids)
    assert object_id("RunEvent", 1, 2) != object_id("RunEvent", 12)
    assert parse_global_id(object_id("Policy", 1)) is None  # not a node: node(id:) answers null
    with pytest.raises(ValueError):
        object_id("Agent", 1)
