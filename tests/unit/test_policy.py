"""Capability policy evaluation (docs/concepts/policy.md): tables of cases plus properties over all inputs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import ValidationFailed
from app.domain.policy import (
    AgentDecision,
    Decision,
    EffectiveDecision,
    Policy,
    PolicyLink,
    RiskClass,
    Rule,
    chain_agent_ids,
    decide_for_agent,
    effective_decision,
    live_chain,
    parse_chain,
    parse_policy,
    strictest,
    tool_matches,
    validate_policy,
)

A, R, D = Decision.ALLOW, Decision.REQUIRE_APPROVAL, Decision.DENY
ALL_RISKS = list(RiskClass)


def pol(default: Decision | None = None, *rules: tuple[str, Decision]) -> Policy:
    return Policy(default=default, rules=tuple(Rule(tool, decision) for tool, decision in rules))


# -- strictest ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (A, A, A),
        (A, R, R),
        (R, A, R),
        (A, D, D),
        (D, A, D),
        (R, D, D),
        (D, R, D),
        (R, R, R),
        (D, D, D),
    ],
)
def test_strictest(a: Decision, b: Decision, expected: Decision) -> None:
    assert strictest(a, b) is expected


# -- parsing and validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, {"default": None, "rules": []}),
        ({}, {"default": None, "rules": []}),
        ({"default": "DENY"}, {"default": "DENY", "rules": []}),
        ({"default": None, "rules": None}, {"default": None, "rules": []}),
        (
            {
                "rules": [
                    {"tool": "http.*", "decision": "ALLOW"},
                    {"tool": "webhook.post", "decision": "DENY"},
                ]
            },
            {
                "default": None,
                "rules": [
                    {"tool": "http.*", "decision": "ALLOW"},
                    {"tool": "webhook.post", "decision": "DENY"},
                ],
            },
        ),
        (
            {"default": "REQUIRE_APPROVAL", "rules": [{"decision": "ALLOW", "tool": "*"}]},
            {"default": "REQUIRE_APPROVAL", "rules": [{"tool": "*", "decision": "ALLOW"}]},
        ),
        # Trimmed and case-folded: stored as they are compared.
        (
            {
                "rules": [
                    {"tool": " Webhook.POST ", "decision": "DENY"},
                    {"tool": "HTTP.*", "decision": "ALLOW"},
                ]
            },
            {
                "default": None,
                "rules": [
                    {"tool": "webhook.post", "decision": "DENY"},
                    {"tool": "http.*", "decision": "ALLOW"},
                ],
            },
        ),
    ],
)
def test_validate_policy_normalises(raw: Any, expected: dict[str, Any]) -> None:
    assert validate_policy(raw) == expected
    assert validate_policy(validate_policy(raw)) == expected  # idempotent


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ([], "must be an object"),
        ("ALLOW", "must be an object"),
        ({"defualt": "ALLOW"}, "unknown keys: defualt"),
        ({"default": "allow"}, "policy.default must be one of"),
        ({"default": "MAYBE"}, "policy.default must be one of"),
        ({"default": 1}, "policy.default must be one of"),
        ({"rules": {"tool": "x", "decision": "ALLOW"}}, "policy.rules must be a list"),
        ({"rules": ["http.*"]}, "policy.rules[0] must be an object"),
        ({"rules": [{"tool": "http.*"}]}, "policy.rules[0] must have the keys"),
        ({"rules": [{"tool": "x", "decision": "ALLOW", "why": "no"}]}, "must have the keys"),
        (
            {"rules": [{"tool": "x", "decision": "ALLOW", "timeoutS": 60}]},
            "timeoutS applies to REQUIRE_APPROVAL only",
        ),
        (
            {"rules": [{"tool": "x", "decision": "REQUIRE_APPROVAL", "timeoutS": 0}]},
            "timeoutS must be a whole number",
        ),
        (
            {"rules": [{"tool": "x", "decision": "REQUIRE_APPROVAL", "timeoutS": True}]},
            "timeoutS must be a whole number",
        ),
        (
            {"rules": [{"tool": "x", "decision": "REQUIRE_APPROVAL", "timeoutS": 1.5}]},
            "timeoutS must be a whole number",
        ),
        ({"rules": [{"tool": "", "decision": "ALLOW"}]}, "policy.rules[0].tool must be a non-empty"),
        ({"rules": [{"tool": 3, "decision": "ALLOW"}]}, "policy.rules[0].tool must be a non-empty"),
        ({"rules": [{"tool": "x" * 201, "decision": "ALLOW"}]}, "longer than"),
        (
            {"rules": [{"tool": "a", "decision": "DENY"}, {"tool": "b", "decision": "NOPE"}]},
            "policy.rules[1].decision must be one of",
        ),
        ({"rules": [{"tool": f"t{i}", "decision": "DENY"} for i in range(201)]}, "at most 200"),
    ],
)
def test_validate_policy_rejects(raw: Any, fragment: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_policy(raw)
    assert info.value.field == "policy"
    assert info.value.code == "VALIDATION_FAILED"
    assert fragment in info.value.message


def test_parse_policy_builds_frozen_dataclass() -> None:
    policy = parse_policy({"default": "DENY", "rules": [{"tool": "http.*", "decision": "ALLOW"}]})
    assert policy == Policy(default=D, rules=(Rule("http.*", A),))
    with pytest.raises(AttributeError):
        policy.default = A  # type: ignore[misc]


# -- one agent ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "tool", "risk", "expected"),
    [
        # risk defaults (no rule, no default)
        (pol(), "memory.search", RiskClass.READ, AgentDecision(A, "risk default for READ")),
        (
            pol(),
            "memory.remember",
            RiskClass.INTERNAL_WRITE,
            AgentDecision(A, "risk default for INTERNAL_WRITE"),
        ),
        (
            pol(),
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            AgentDecision(R, "risk default for EXTERNAL_WRITE"),
        ),
        (pol(), "memory.forget", RiskClass.DESTRUCTIVE, AgentDecision(R, "risk default for DESTRUCTIVE")),
        (pol(), "vault.read", RiskClass.SECRETS, AgentDecision(R, "risk default for SECRETS")),
        # the agent's default beats the risk default, both ways
        (pol(D), "memory.search", RiskClass.READ, AgentDecision(D, "default")),
        (pol(A), "webhook.post", RiskClass.EXTERNAL_WRITE, AgentDecision(A, "default")),
        (pol(R), "http.get", RiskClass.READ, AgentDecision(R, "default")),
        # a matching rule beats the default
        (pol(D, ("http.*", A)), "http.get", RiskClass.READ, AgentDecision(A, "rule 'http.*'")),
        (
            pol(A, ("webhook.*", D)),
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            AgentDecision(D, "rule 'webhook.*'"),
        ),
        # non-matching rules are ignored
        (
            pol(None, ("http.*", D)),
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            AgentDecision(R, "risk default for EXTERNAL_WRITE"),
        ),
        (pol(A, ("http.*", D)), "memory.search", RiskClass.READ, AgentDecision(A, "default")),
        # globs are anchored; case and surrounding spaces do not matter (a DENY for
        # "Webhook.post" once matched nothing and the post went out)
        (pol(None, ("HTTP.*", D)), "http.get", RiskClass.READ, AgentDecision(D, "rule 'HTTP.*'")),
        (pol(None, ("http", D)), "http.get", RiskClass.READ, AgentDecision(A, "risk default for READ")),
        (pol(None, ("*.get", D)), "http.get", RiskClass.READ, AgentDecision(D, "rule '*.get'")),
        (pol(None, ("http.ge?", D)), "http.get", RiskClass.READ, AgentDecision(D, "rule 'http.ge?'")),
        (pol(None, ("[hw]*", D)), "webhook.post", RiskClass.EXTERNAL_WRITE, AgentDecision(D, "rule '[hw]*'")),
        # several matching rules: the strictest wins, whatever the order
        (
            pol(None, ("*", A), ("webhook.*", D)),
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            AgentDecision(D, "rule 'webhook.*'"),
        ),
        (
            pol(None, ("webhook.*", D), ("*", A)),
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            AgentDecision(D, "rule 'webhook.*'"),
        ),
        (pol(None, ("*", R), ("http.get", A)), "http.get", RiskClass.READ, AgentDecision(R, "rule '*'")),
        # equally strict matches: the first one is named
        (
            pol(None, ("http.*", D), ("*.get", D)),
            "http.get",
            RiskClass.READ,
            AgentDecision(D, "rule 'http.*'"),
        ),
        # the clamp: DESTRUCTIVE and SECRETS are never silent
        (
            pol(None, ("memory.*", A)),
            "memory.forget",
            RiskClass.DESTRUCTIVE,
            AgentDecision(R, "clamp for DESTRUCTIVE (rule 'memory.*' said ALLOW)"),
        ),
        (pol(A), "vault.read", RiskClass.SECRETS, AgentDecision(R, "clamp for SECRETS (default said ALLOW)")),
        (
            pol(A),
            "memory.forget",
            RiskClass.DESTRUCTIVE,
            AgentDecision(R, "clamp for DESTRUCTIVE (default said ALLOW)"),
        ),
        # ...but the clamp never loosens a DENY
        (
            pol(None, ("memory.forget", D)),
            "memory.forget",
            RiskClass.DESTRUCTIVE,
            AgentDecision(D, "rule 'memory.forget'"),
        ),
        (pol(D), "vault.read", RiskClass.SECRETS, AgentDecision(D, "default")),
        # and ALLOW stays ALLOW for the other risk classes
        (
            pol(None, ("webhook.*", A)),
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            AgentDecision(A, "rule 'webhook.*'"),
        ),
    ],
)
def test_decide_for_agent(policy: Policy, tool: str, risk: RiskClass, expected: AgentDecision) -> None:
    assert decide_for_agent(policy, tool, risk) == expected


# -- chains -------------------------------------------------------------------------------

ROOT_DENIES_WEBHOOKS = PolicyLink("root-bot", pol(None, ("webhook.*", D)))
ROOT_ALLOWS_ALL = PolicyLink("root-bot", pol(A))
MID_APPROVES_HTTP = PolicyLink("mid-bot", pol(None, ("http.*", R)))
CHILD_ALLOWS_ALL = PolicyLink("child-bot", pol(A, ("*", A)))
CHILD_DENIES_ALL = PolicyLink("child-bot", pol(D))
EMPTY = PolicyLink("plain-bot", pol())


@pytest.mark.parametrize(
    ("chain", "tool", "risk", "expected"),
    [
        # a single link is that agent's decision
        (
            [EMPTY],
            "http.get",
            RiskClass.READ,
            EffectiveDecision(A, "agent 'plain-bot' risk default for READ -> ALLOW"),
        ),
        (
            [EMPTY],
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            EffectiveDecision(R, "agent 'plain-bot' risk default for EXTERNAL_WRITE -> REQUIRE_APPROVAL"),
        ),
        # a child cannot loosen its root
        (
            [ROOT_DENIES_WEBHOOKS, CHILD_ALLOWS_ALL],
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            EffectiveDecision(D, "agent 'root-bot' rule 'webhook.*' -> DENY"),
        ),
        # a child can tighten
        (
            [ROOT_ALLOWS_ALL, CHILD_DENIES_ALL],
            "http.get",
            RiskClass.READ,
            EffectiveDecision(D, "agent 'child-bot' default -> DENY"),
        ),
        # the middle of a three-link chain
        (
            [ROOT_ALLOWS_ALL, MID_APPROVES_HTTP, CHILD_ALLOWS_ALL],
            "http.get",
            RiskClass.READ,
            EffectiveDecision(R, "agent 'mid-bot' rule 'http.*' -> REQUIRE_APPROVAL"),
        ),
        (
            [ROOT_DENIES_WEBHOOKS, MID_APPROVES_HTTP, CHILD_DENIES_ALL],
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            EffectiveDecision(D, "agent 'root-bot' rule 'webhook.*' -> DENY"),
        ),
        # everyone allows
        (
            [ROOT_ALLOWS_ALL, CHILD_ALLOWS_ALL],
            "webhook.post",
            RiskClass.EXTERNAL_WRITE,
            EffectiveDecision(A, "agent 'root-bot' default -> ALLOW"),
        ),
        # ties go to the link nearest the root
        (
            [PolicyLink("a", pol(D)), PolicyLink("b", pol(D)), PolicyLink("c", pol(D))],
            "x",
            RiskClass.READ,
            EffectiveDecision(D, "agent 'a' default -> DENY"),
        ),
        (
            [PolicyLink("a", pol(A)), PolicyLink("b", pol(R)), PolicyLink("c", pol(R))],
            "x",
            RiskClass.READ,
            EffectiveDecision(R, "agent 'b' default -> REQUIRE_APPROVAL"),
        ),
        # the clamp shows up in the reason
        (
            [ROOT_ALLOWS_ALL, CHILD_ALLOWS_ALL],
            "memory.forget",
            RiskClass.DESTRUCTIVE,
            EffectiveDecision(
                R, "agent 'root-bot' clamp for DESTRUCTIVE (default said ALLOW) -> REQUIRE_APPROVAL"
            ),
        ),
    ],
)
def test_effective_decision(
    chain: list[PolicyLink], tool: str, risk: RiskClass, expected: EffectiveDecision
) -> None:
    assert effective_decision(chain, tool, risk) == expected


def test_effective_decision_needs_a_link() -> None:
    with pytest.raises(ValueError):
        effective_decision([], "http.get", RiskClass.READ)


def test_parse_chain_round_trip() -> None:
    snapshot = [
        {
            "agent_id": 1,
            "agent_name": "root-bot",
            "policy": {"rules": [{"tool": "webhook.*", "decision": "DENY"}]},
        },
        {"agent_id": 2, "agent_name": "child-bot", "policy": None},
    ]
    chain = parse_chain(snapshot)
    assert chain == [PolicyLink("root-bot", pol(None, ("webhook.*", D))), PolicyLink("child-bot", pol())]
    assert effective_decision(chain, "webhook.post", RiskClass.EXTERNAL_WRITE).decision is D


@pytest.mark.parametrize(
    "snapshot", [None, {"agent_name": "x"}, [{"policy": {}}], [{"agent_name": "x", "policy": 3}]]
)
def test_parse_chain_rejects(snapshot: Any) -> None:
    with pytest.raises(ValidationFailed):
        parse_chain(snapshot)


# -- properties ---------------------------------------------------------------------------

TOOL_NAMES = [
    "http.get",
    "webhook.post",
    "memory.search",
    "memory.remember",
    "memory.forget",
    "agents.delegate",
    "vault.read",
]
PATTERNS = [*TOOL_NAMES, "*", "http.*", "memory.*", "*.post", "*.get", "agents.?elegate", "[mv]*", "nothing"]

decisions = st.sampled_from(list(Decision))
risks = st.sampled_from(ALL_RISKS)
tool_names = st.sampled_from(TOOL_NAMES)
policies = st.builds(
    lambda default, rules: Policy(default=default, rules=tuple(rules)),
    st.none() | decisions,
    st.lists(st.builds(Rule, st.sampled_from(PATTERNS), decisions), max_size=6),
)
links = st.builds(PolicyLink, st.sampled_from(["root", "mid", "leaf", "other"]), policies)
chains = st.lists(links, min_size=1, max_size=5)


@given(chains, tool_names, risks)
def test_chain_is_never_more_permissive_than_any_link(
    chain: list[PolicyLink], tool: str, risk: RiskClass
) -> None:
    effective = effective_decision(chain, tool, risk).decision
    for link in chain:
        own = decide_for_agent(link.policy, tool, risk).decision
        assert effective.strictness >= own.strictness
    # ...and it is exactly one of the links' decisions, not stricter than all of them
    assert effective in {decide_for_agent(link.policy, tool, risk).decision for link in chain}


@given(chains, links, tool_names, risks)
def test_appending_a_link_never_loosens(
    chain: list[PolicyLink], extra: PolicyLink, tool: str, risk: RiskClass
) -> None:
    before = effective_decision(chain, tool, risk).decision
    after = effective_decision([*chain, extra], tool, risk).decision
    assert after.strictness >= before.strictness
    assert after is strictest(before, decide_for_agent(extra.policy, tool, risk).decision)


@given(chains, tool_names, st.sampled_from([RiskClass.DESTRUCTIVE, RiskClass.SECRETS]))
def test_destructive_and_secrets_are_never_allowed(
    chain: list[PolicyLink], tool: str, risk: RiskClass
) -> None:
    assert decide_for_agent(chain[-1].policy, tool, risk).decision is not A
    assert effective_decision(chain, tool, risk).decision is not A


@given(chains, tool_names, risks)
def test_reason_names_the_imposing_agent(chain: list[PolicyLink], tool: str, risk: RiskClass) -> None:
    result = effective_decision(chain, tool, risk)
    assert result.reason.endswith(f"-> {result.decision.value}")
    assert any(result.reason.startswith(f"agent '{link.agent_name}' ") for link in chain)


@given(policies)
def test_policy_json_round_trip(policy: Policy) -> None:
    assert parse_policy(policy.to_json()) == policy


@pytest.mark.parametrize(
    ("name", "pattern", "matches"),
    [
        ("webhook.post", "webhook.post", True),
        ("webhook.post", "Webhook.post", True),
        ("webhook.post", " webhook.post", True),
        ("webhook.post", "webhook.POST", True),
        ("webhook.post", "WEBHOOK.*", True),
        ("Plugin.Tool", "plugin.*", True),  # a plugin's name is folded too
        ("webhook.post", "webhook.get", False),
        ("webhook.post", "webhook", False),
        ("http.get", "webhook.*", False),
    ],
)
def test_tool_names_and_patterns_compare_trimmed_and_case_folded(
    name: str, pattern: str, matches: bool
) -> None:
    assert tool_matches(name, pattern) is matches
    policy = parse_policy({"default": "ALLOW", "rules": [{"tool": pattern, "decision": "DENY"}]})
    assert decide_for_agent(policy, name, RiskClass.EXTERNAL_WRITE).decision is (D if matches else A)


TOOLS = frozenset({"http.get", "webhook.post", "memory.remember", "agents.delegate"})


@pytest.mark.parametrize("pattern", ["*", "http.*", "Webhook.Post", "memory.remember", "*.delegate", "[hw]*"])
def test_a_rule_matching_some_tool_is_kept(pattern: str) -> None:
    validate_policy({"rules": [{"tool": pattern, "decision": "DENY"}]}, tool_names=TOOLS)


@pytest.mark.parametrize("pattern", ["webhok.post", "http", "mail.*", "webhook.post.x", "?"])
def test_a_rule_matching_no_tool_is_refused_naming_it(pattern: str) -> None:
    raw = {"rules": [{"tool": "http.*", "decision": "ALLOW"}, {"tool": pattern, "decision": "DENY"}]}
    with pytest.raises(ValidationFailed) as info:
        validate_policy(raw, tool_names=TOOLS)
    assert info.value.field == "policy"
    assert f"policy.rules[1].tool {pattern.casefold()!r} matches no tool" in info.value.message
    validate_policy(raw)  # without the tool names (a policy read back) only the form is checked


@pytest.mark.parametrize("pattern", ["mcp.crm.create_lead", "MCP.crm.*", "mcp.*"])
def test_a_rule_for_connector_tools_is_kept_before_its_server_exists(pattern: str) -> None:
    raw = {"rules": [{"tool": pattern, "decision": "REQUIRE_APPROVAL"}]}
    validate_policy(raw, tool_names=TOOLS, open_prefixes=("mcp.",))
    with pytest.raises(ValidationFailed):
        validate_policy(raw, tool_names=TOOLS)


# -- live tightening (policy.live_chain) ------------------------------------------------------

_ALLOW_HOOKS = parse_policy({"rules": [{"tool": "webhook.*", "decision": "ALLOW"}]})
_DENY_HOOKS = parse_policy({"rules": [{"tool": "webhook.*", "decision": "DENY"}]})
_APPROVE_HOOKS = parse_policy({"rules": [{"tool": "webhook.*", "decision": "REQUIRE_APPROVAL"}]})


@pytest.mark.parametrize(
    ("snapshot", "current", "decision", "named"),
    [
        # Tightened since the snapshot: the current policy decides, and says so.
        ([("root", _ALLOW_HOOKS)], [("root", _DENY_HOOKS)], Decision.DENY, "agent 'root' current policy"),
        ([("root", _ALLOW_HOOKS), ("kid", _ALLOW_HOOKS)], [("root", _ALLOW_HOOKS), ("kid", _APPROVE_HOOKS)],
         Decision.REQUIRE_APPROVAL, "agent 'kid' current policy"),
        # Loosened since the snapshot: nothing changes, the snapshot is named.
        ([("root", _DENY_HOOKS)], [("root", _ALLOW_HOOKS)], Decision.DENY, "agent 'root' rule"),
        ([("root", _APPROVE_HOOKS)], [("root", _ALLOW_HOOKS)], Decision.REQUIRE_APPROVAL, "agent 'root' rule"),
        # Unchanged: a tie names the snapshot.
        ([("root", _DENY_HOOKS)], [("root", _DENY_HOOKS)], Decision.DENY, "agent 'root' rule"),
        # An agent gone since (no current policy): the snapshot alone.
        ([("root", _ALLOW_HOOKS)], [], Decision.ALLOW, "agent 'root' rule"),
    ],
)  # fmt: skip
def test_live_chain_tightens_and_never_loosens(
    snapshot: list[tuple[str, Policy]], current: list[tuple[str, Policy]], decision: Decision, named: str
) -> None:
    chain = live_chain([PolicyLink(n, p) for n, p in snapshot], [PolicyLink(n, p) for n, p in current])
    found = effective_decision(chain, "webhook.post", RiskClass.EXTERNAL_WRITE)
    assert found.decision is decision and found.reason.startswith(named), found


@given(
    snapshot=st.lists(st.sampled_from([_ALLOW_HOOKS, _DENY_HOOKS, _APPROVE_HOOKS]), min_size=1, max_size=4),
    current=st.lists(st.sampled_from([_ALLOW_HOOKS, _DENY_HOOKS, _APPROVE_HOOKS]), max_size=4),
)
def test_live_chain_is_never_looser_than_the_snapshot(snapshot: list[Policy], current: list[Policy]) -> None:
    links = [PolicyLink(f"a{i}", p) for i, p in enumerate(snapshot)]
    before = effective_decision(links, "webhook.post", RiskClass.EXTERNAL_WRITE).decision
    after = effective_decision(
        live_chain(links, [PolicyLink(f"a{i}", p) for i, p in enumerate(current)]),
        "webhook.post",
        RiskClass.EXTERNAL_WRITE,
    ).decision
    assert after.strictness >= before.strictness


def test_chain_agent_ids_reads_the_snapshot_leniently() -> None:
    snapshot = [
        {"agent_id": 3, "agent_name": "a"},
        {"agent_name": "b"},
        {"agent_id": 3},
        {"agent_id": 9},
        "x",
    ]
    assert chain_agent_ids(snapshot) == [3, 9]
    assert chain_agent_ids(None) == []
