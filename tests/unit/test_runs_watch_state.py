"""``enverif runs watch``'s bookkeeping: the tree an event sequence describes, and the
command-line inputs it accepts (no I/O here; the command itself is tested end to end in
tests/integration/test_runs_watch.py)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from app.cli.watch.client import StreamLost, WatchError, endpoints, refusal, run_global_id
from app.cli.watch.state import TreeState
from app.cli.watch.view import render
from app.graphql.ids import to_global_id

ROOT, MID, LEAF = (to_global_id("Run", n) for n in (1, 2, 3))


def ev(seq: int, kind: str, run: str, parent: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "runId": run, "parentRunId": parent, **fields}


EVENTS = [
    ev(1, "RUN_CREATED", ROOT, status="QUEUED", payload={"agent": "lead"}),
    ev(2, "RUN_STATUS_CHANGED", ROOT, status="RUNNING"),
    ev(3, "STEP_STARTED", ROOT, stepStatus="RUNNING", payload={"seq": 1, "tool": "agents.delegate"}),
    ev(4, "RUN_CREATED", MID, ROOT, status="QUEUED", payload={"agent": "mid"}),
    ev(5, "RUN_CREATED", LEAF, MID, status="QUEUED", payload={"agent": "leaf"}),
    ev(
        6,
        "STEP_STARTED",
        LEAF,
        MID,
        stepStatus="WAITING_APPROVAL",
        payload={"seq": 1, "tool": "http.get", "decision": "REQUIRE_APPROVAL"},
    ),
    ev(7, "APPROVAL_REQUESTED", LEAF, MID, payload={"approvalId": 9, "tool": "http.get"}),
    ev(8, "RUN_STATUS_CHANGED", LEAF, MID, status="WAITING_APPROVAL"),
]


def test_events_build_the_tree_with_statuses_steps_and_pending_approvals() -> None:
    state = TreeState(root_id=ROOT)
    for event in EVENTS:
        state.apply(event)
    assert state.last_seq == 8
    assert {r.id: (r.agent, r.status, r.parent_id) for r in state.runs.values()} == {
        ROOT: ("lead", "RUNNING", None),
        MID: ("mid", "QUEUED", ROOT),
        LEAF: ("leaf", "WAITING_APPROVAL", MID),
    }
    assert state.runs[LEAF].step == "step 1 http.get (WAITING_APPROVAL, REQUIRE_APPROVAL)"
    assert state.approvals == {to_global_id("Approval", 9): (LEAF, "http.get")}
    state.apply(ev(9, "APPROVAL_DECIDED", LEAF, MID, payload={"approvalId": 9, "status": "REJECTED"}))
    state.apply(ev(10, "RUN_STATUS_CHANGED", LEAF, MID, status="SUCCEEDED"))
    assert state.approvals == {}
    assert state.runs[LEAF].step == ""


def test_the_view_draws_every_run_nested_and_the_pending_approval() -> None:
    state = TreeState(root_id=ROOT)
    for event in EVENTS:
        state.apply(event)
    console = Console(width=160, record=True, color_system=None)
    console.print(render(state, "footer"))
    lines = console.export_text().splitlines()
    lead, mid, leaf, approval = (next(i for i, s in enumerate(lines) if w in s)
                                 for w in ("lead ", "mid ", "leaf ", "pending http.get"))  # fmt: skip
    assert lead < mid < leaf < approval
    indent = [len(lines[i]) - len(lines[i].lstrip(" │├└─")) for i in (lead, mid, leaf)]
    assert indent == sorted(indent) and len(set(indent)) == 3, lines


def test_run_ids_and_urls() -> None:
    assert run_global_id(ROOT) == ROOT
    assert run_global_id("1") == ROOT
    with pytest.raises(WatchError, match="not a run id"):
        run_global_id(to_global_id("Agent", 1))
    assert endpoints("http://127.0.0.1:8000/graphql") == (
        "http://127.0.0.1:8000/graphql",
        "ws://127.0.0.1:8000/graphql",
    )
    assert endpoints("wss://127.0.0.1/graphql")[0] == "https://127.0.0.1/graphql"
    with pytest.raises(WatchError, match="--url"):
        endpoints("127.0.0.1:8000")


def test_the_events_own_fields_win_over_the_payload() -> None:
    """What runTree carries for a live view (agentName, stepTool, approvalId as global ids)."""
    approval = to_global_id("Approval", 4)
    state = TreeState(root_id=ROOT)
    state.apply(ev(1, "RUN_CREATED", ROOT, status="QUEUED", agentName="lead", payload={}))
    state.apply(ev(2, "STEP_STARTED", ROOT, stepStatus="WAITING_APPROVAL", stepTool="webhook.post",
                   stepDecision="REQUIRE_APPROVAL", payload={"seq": 1}))  # fmt: skip
    state.apply(ev(3, "APPROVAL_REQUESTED", ROOT, stepTool="webhook.post", approvalId=approval, payload={}))
    assert state.root.agent == "lead"
    assert state.root.step == "step 1 webhook.post (WAITING_APPROVAL, REQUIRE_APPROVAL)"
    assert state.approvals == {approval: (ROOT, "webhook.post")}
    state.apply(ev(4, "APPROVAL_DECIDED", ROOT, approvalId=approval, payload={"approvalId": 4}))
    assert state.approvals == {}


def test_an_event_already_applied_is_not_new() -> None:
    """A resumed stream starts after the last seq applied; anything at or before it (a
    server replaying what it sent before the reconnect) is not printed again."""
    state = TreeState(root_id=ROOT, last_seq=3)
    assert [state.is_new(ev(seq, "RUN_STATUS_CHANGED", ROOT)) for seq in (2, 3, 4)] == [False, False, True]
    state.apply(EVENTS[3] | {"seq": 4})
    assert not state.is_new(ev(4, "RUN_STATUS_CHANGED", ROOT))


@pytest.mark.parametrize(
    ("errors", "retry", "retry_after_s", "needle"),
    [
        ([{"message": "database down", "extensions": {"code": "UNAVAILABLE", "retryAfter": 2}}], True, 2.0,
         "the server is unavailable (UNAVAILABLE: database down)"),
        ([{"message": "x", "extensions": {"code": "UNAVAILABLE"}}], True, 0.0, "UNAVAILABLE"),
        ([{"message": "a", "extensions": {"code": "NOT_FOUND"}},
          {"message": "b", "extensions": {"code": "UNAVAILABLE"}}], True, 0.0, "UNAVAILABLE: b"),
        ([{"message": "run not found", "extensions": {"code": "NOT_FOUND"}}], False, 0.0, "NOT_FOUND: run not found"),
        ([{"message": "bad", "extensions": {"code": "UNAUTHENTICATED"}}], False, 0.0, "ENVERIF_TOKEN"),
        ([{"message": "no code"}], False, 0.0, "no code"),
    ],
    ids=["unavailable", "unavailable-without-retry-after", "unavailable-among-others", "not-found",
         "unauthenticated", "no-code"],
)  # fmt: skip
def test_unavailable_is_worth_another_try_and_the_rest_is_final(
    errors: list[dict[str, Any]], retry: bool, retry_after_s: float, needle: str
) -> None:
    answer = refusal(errors)
    assert isinstance(answer, StreamLost if retry else WatchError)
    assert needle in str(answer)
    if isinstance(answer, StreamLost):
        assert answer.retry_after_s == retry_after_s


def test_live_output_is_kept_per_turn_and_drawn_under_its_run() -> None:
    state = TreeState(root_id=ROOT)
    for event in EVENTS[:2]:
        state.apply(event)
    assert state.apply_output({"runId": ROOT, "stepSeq": 1, "text": "The site ", "done": False}) is None
    assert state.apply_output({"runId": ROOT, "stepSeq": 1, "text": "is up.", "done": False}) is None
    console = Console(width=120, record=True)
    console.print(render(state, ""))
    assert "> The site is up." in console.export_text()
    assert state.apply_output({"runId": ROOT, "stepSeq": 1, "text": "", "done": True}) == "The site is up."
    assert state.root.output == ""  # the next turn starts afresh
