"""The turn planner: a table of (model turn, tools, policy chain) -> plans, and properties."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.planner import (
    Action,
    Call,
    Calls,
    Fail,
    Finish,
    Limits,
    ToolInfo,
    plan_turn,
    runs_ahead,
)
from app.domain.policy import Decision, PolicyLink, RiskClass, parse_policy

LIMITS = Limits(max_turns=5, max_value_bytes=1_000)
TOOLS = {
    "http.get": ToolInfo(RiskClass.READ, offered=True),
    "webhook.post": ToolInfo(RiskClass.EXTERNAL_WRITE, offered=True),
    "memory.forget": ToolInfo(RiskClass.DESTRUCTIVE, offered=True),
    "memory.remember": ToolInfo(RiskClass.INTERNAL_WRITE, offered=True),
    "agents.delegate": ToolInfo(RiskClass.INTERNAL_WRITE, offered=True, delegates=True),
    "secret.read": ToolInfo(RiskClass.SECRETS, offered=True),
    "hidden.tool": ToolInfo(RiskClass.READ, offered=False),
}


def link(name: str, policy: dict[str, Any] | None = None) -> PolicyLink:
    return PolicyLink(agent_name=name, policy=parse_policy(policy))


OPEN = [link("root")]
STRICT_PARENT = [link("parent", {"rules": [{"tool": "webhook.*", "decision": "DENY"}]}), link("child")]
ALLOW_ALL = [link("root", {"default": "ALLOW"})]


def one(tool: str, args: Any = None, chain: list[PolicyLink] = OPEN) -> Any:
    plan = plan_turn([Call(tool, {} if args is None else args)], turns_used=0, tools=TOOLS, chain=chain,
                     limits=LIMITS)  # fmt: skip
    assert isinstance(plan, Calls)
    [call] = plan.plans
    return call


@pytest.mark.parametrize(
    ("tool", "args", "chain", "action", "decision", "code"),
    [
        ("http.get", {"url": "u"}, OPEN, Action.RUN_TOOL, Decision.ALLOW, None),
        ("memory.remember", {"key": "k"}, OPEN, Action.RUN_TOOL, Decision.ALLOW, None),
        ("webhook.post", {}, OPEN, Action.AWAIT_APPROVAL, Decision.REQUIRE_APPROVAL, None),
        ("webhook.post", {}, ALLOW_ALL, Action.RUN_TOOL, Decision.ALLOW, None),
        ("webhook.post", {}, STRICT_PARENT, Action.DENY, Decision.DENY, "DENIED"),
        # Destructive and secret-handling tools are never silent, whatever the policy says.
        ("memory.forget", {"key": "k"}, ALLOW_ALL, Action.AWAIT_APPROVAL, Decision.REQUIRE_APPROVAL, None),
        ("secret.read", {}, ALLOW_ALL, Action.AWAIT_APPROVAL, Decision.REQUIRE_APPROVAL, None),
        ("agents.delegate", {"agent": "a", "task": "t"}, OPEN, Action.START_CHILD, Decision.ALLOW, None),
        ("nope.tool", {}, OPEN, Action.REFUSE, None, "UNKNOWN_TOOL"),
        ("hidden.tool", {}, OPEN, Action.REFUSE, None, "UNKNOWN_TOOL"),
        ("http.get", {"x": math.nan}, OPEN, Action.REFUSE, None, "INVALID_ARGUMENTS"),
        (
            "http.get",
            {"when": datetime(2026, 1, 1, tzinfo=UTC)},
            OPEN,
            Action.REFUSE,
            None,
            "INVALID_ARGUMENTS",
        ),
        ("http.get", {"big": "x" * 2_000}, OPEN, Action.REFUSE, None, "INVALID_ARGUMENTS"),
        ("http.get", ["not", "an", "object"], OPEN, Action.REFUSE, None, "INVALID_ARGUMENTS"),
    ],
)
def test_plans_for_one_call(
    tool: str, args: Any, chain: list[PolicyLink], action: Action, decision: Decision | None, code: str | None
) -> None:
    call = one(tool, args, chain)
    assert call.action is action
    assert call.decision is decision
    if code is None:
        assert call.result is None
    else:
        assert call.result["error"]["code"] == code


TOKEN = "gh" + "p_" + "Zx81Qm27Lw90Rt46Yp13Nc58Vb02Kd67Hs4J"
REQUIRE_MEMORY_APPROVAL = [link("root", {"rules": [{"tool": "memory.*", "decision": "REQUIRE_APPROVAL"}]})]
DENY_MEMORY = [link("root", {"rules": [{"tool": "memory.*", "decision": "DENY"}]})]


@pytest.mark.parametrize("chain", [OPEN, ALLOW_ALL, REQUIRE_MEMORY_APPROVAL, DENY_MEMORY])
@pytest.mark.parametrize(
    ("args", "redacted"),
    [
        ({"key": "crm", "value": f"CRM token {TOKEN}", "importance": 0.9}, {"value"}),
        ({"key": "crm", "value": "see tags", "tags": ["crm", TOKEN]}, {"tags"}),
        ({"key": TOKEN[:12], "value": TOKEN[12:]}, {"key", "value"}),
        ({"key": "db_password", "value": "tulip42"}, {"value"}),
        ({"key": "k", "value": "v", "extra": {"nested": TOKEN}}, {"extra"}),
    ],
)
def test_a_memory_write_of_a_secret_is_refused_with_its_arguments_redacted(
    chain: list[PolicyLink], args: dict[str, Any], redacted: set[str]
) -> None:
    # Whatever the policy: an approval request or a DENIED step would store the secret.
    call = one("memory.remember", args, chain)
    assert call.action is Action.REFUSE and call.decision is None
    assert call.result["error"]["code"] == "CREDENTIAL_REJECTED"
    rule = call.result["error"]["message"].split("rule: ")[1].split(")")[0]
    for name, value in call.args.items():
        if name in redacted:
            assert value == f"[redacted: {rule}]"
        else:
            assert value == args[name]
    assert TOKEN not in str(call.args) + call.reason + str(call.result)
    assert "tulip42" not in str(call.args) + call.reason + str(call.result)


def test_other_tools_and_ordinary_memories_are_not_screened() -> None:
    assert one("memory.remember", {"key": "icp", "value": "Target fintech"}).action is Action.RUN_TOOL
    assert one("http.get", {"url": f"http://127.0.0.1/?q={TOKEN}"}).action is Action.RUN_TOOL


def test_the_reason_names_the_agent_and_rule_that_imposed_the_decision() -> None:
    call = one("webhook.post", {}, STRICT_PARENT)
    assert "parent" in call.reason and "webhook.*" in call.reason


def test_arguments_come_back_as_stored() -> None:
    call = one("http.get", {"url": "u", "pair": (1, 2), 3: "int key"})
    assert call.args == {"url": "u", "pair": [1, 2], "3": "int key"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"ok": True}, Finish({"ok": True})),
        ("text", Finish("text")),
        (None, Finish(None)),
        (math.inf, None),
        ({"at": datetime(2026, 1, 1, tzinfo=UTC)}, None),
        ("x" * 2_000, None),
    ],
)
def test_final_answers(value: Any, expected: Finish | None) -> None:
    plan = plan_turn(Finish(value), turns_used=0, tools=TOOLS, chain=OPEN, limits=LIMITS)
    if expected is None:
        assert isinstance(plan, Fail) and plan.error.startswith("model output:")
    else:
        assert plan == expected


def test_a_final_answer_is_taken_even_on_the_last_turn() -> None:
    assert plan_turn(Finish(1), turns_used=99, tools=TOOLS, chain=OPEN, limits=LIMITS) == Finish(1)


def test_calls_beyond_the_turn_budget_fail_the_run() -> None:
    plan = plan_turn([Call("http.get", {})], turns_used=5, tools=TOOLS, chain=OPEN, limits=LIMITS)
    assert plan == Fail(
        "maxTurns 5 set by the deployment (ENVERIF_MAX_TURNS): the run used its 5 model turns",
        code="BUDGET_EXCEEDED",
    )


@pytest.mark.parametrize(
    ("tools", "chain", "ahead"),
    [
        (["http.get"], OPEN, True),
        (["http.get", "http.get"], OPEN, True),
        (["http.get", "webhook.post"], ALLOW_ALL, False),  # a side effect needs its step row first
        (["memory.remember"], OPEN, False),
        (["http.get", "nope.tool"], OPEN, False),
        ([], OPEN, False),
        (
            ["http.get"],
            [link("root", {"rules": [{"tool": "http.get", "decision": "REQUIRE_APPROVAL"}]})],
            False,
        ),
    ],
)
def test_which_turns_may_run_ahead_of_their_write(
    tools: list[str], chain: list[PolicyLink], ahead: bool
) -> None:
    plan = plan_turn([Call(t, {}) for t in tools], turns_used=0, tools=TOOLS, chain=chain, limits=LIMITS)
    assert isinstance(plan, Calls)
    assert runs_ahead(plan.plans) is ahead


decisions = st.sampled_from([None, "ALLOW", "REQUIRE_APPROVAL", "DENY"])
chains = st.lists(
    st.tuples(decisions, st.lists(st.tuples(st.sampled_from(["*", "webhook.*", "http.get", "memory.*"]),
                                            st.sampled_from(["ALLOW", "REQUIRE_APPROVAL", "DENY"])), max_size=3)),
    min_size=1, max_size=4,
)  # fmt: skip


@given(chains, st.sampled_from(sorted(n for n, t in TOOLS.items() if t.offered)))
def test_a_call_never_runs_more_freely_than_any_link_allows(raw: list[Any], tool: str) -> None:
    chain = [
        link(f"a{i}", {"default": d, "rules": [{"tool": p, "decision": x} for p, x in rules]} if d else
             {"rules": [{"tool": p, "decision": x} for p, x in rules]})
        for i, (d, rules) in enumerate(raw)
    ]  # fmt: skip
    call = one(tool, {}, chain)
    for i in range(len(chain)):
        alone = one(tool, {}, [chain[i]])
        assert call.decision is not None and alone.decision is not None
        assert call.decision.strictness >= alone.decision.strictness
    if TOOLS[tool].risk in (RiskClass.DESTRUCTIVE, RiskClass.SECRETS):
        assert call.action is not Action.RUN_TOOL
