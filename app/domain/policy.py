"""Capability policy: decisions, risk classes and their evaluation (docs/concepts/policy.md).

Pure: no I/O, no clock. Three layers, each a function of the one below::

    validate_policy / parse_policy    JSON on an agent -> Policy
    decide_for_agent                  one agent's decision for one call (rules, default,
                                      risk default, then the DESTRUCTIVE/SECRETS clamp)
    effective_decision                the strictest over the run's policy chain, root first

Strictness is ``ALLOW < REQUIRE_APPROVAL < DENY``. Because the effective decision is a
maximum over the chain, a child can only tighten what its ancestors decided, never loosen it.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.domain.errors import ValidationFailed


class Decision(enum.StrEnum):
    ALLOW = "ALLOW"
    REQUIRE_APPROVAL = "REQUIRE_APPROVAL"
    DENY = "DENY"

    @property
    def strictness(self) -> int:
        return _STRICTNESS[self]


class RiskClass(enum.StrEnum):
    READ = "READ"
    INTERNAL_WRITE = "INTERNAL_WRITE"
    EXTERNAL_WRITE = "EXTERNAL_WRITE"
    DESTRUCTIVE = "DESTRUCTIVE"
    SECRETS = "SECRETS"


_STRICTNESS = {Decision.ALLOW: 0, Decision.REQUIRE_APPROVAL: 1, Decision.DENY: 2}

# What an agent decides when neither a rule nor its default says anything.
RISK_DEFAULTS: Mapping[RiskClass, Decision] = {
    RiskClass.READ: Decision.ALLOW,
    RiskClass.INTERNAL_WRITE: Decision.ALLOW,
    RiskClass.EXTERNAL_WRITE: Decision.REQUIRE_APPROVAL,
    RiskClass.DESTRUCTIVE: Decision.REQUIRE_APPROVAL,
    RiskClass.SECRETS: Decision.REQUIRE_APPROVAL,
}
# No pattern and no default makes these silent: ALLOW is raised to REQUIRE_APPROVAL.
CLAMPED_RISKS = frozenset({RiskClass.DESTRUCTIVE, RiskClass.SECRETS})

MAX_RULES = 200
MAX_PATTERN_CHARS = 200
_POLICY_KEYS = frozenset({"default", "rules"})
_RULE_KEYS = frozenset({"tool", "decision"})
_OPTIONAL_RULE_KEYS = frozenset({"timeoutS"})
# An approval waits at most this long, whatever a rule says (30 days).
MAX_TIMEOUT_S = 30 * 24 * 3600
_DECISIONS = ", ".join(d.value for d in Decision)


def tool_key(name: str) -> str:
    """Tool names and patterns as they are compared: trimmed and case-folded, so that
    ``Webhook.post``, `` webhook.post`` and ``webhook.POST`` name ``webhook.post`` (a rule
    that silently matched nothing let the call through under a default of ALLOW)."""
    return name.strip().casefold()


@functools.lru_cache(maxsize=4096)
def tool_matches(name: str, pattern: str) -> bool:
    # Asked for every tool against every pattern as a run starts and for every call's rules:
    # the same few pairs over and over (a pure function of two short strings).
    return fnmatch.fnmatchcase(tool_key(name), tool_key(pattern))


def strictest(a: Decision, b: Decision) -> Decision:
    """The stricter of two decisions (``a`` when they are equal)."""
    return b if b.strictness > a.strictness else a


# -- parsing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    tool: str  # fnmatch glob over tool names, stored as ``tool_key`` gives it
    decision: Decision
    # REQUIRE_APPROVAL only: the approval expires (the call is rejected) after this long.
    timeout_s: int | None = None

    def matches(self, tool_name: str) -> bool:
        return tool_matches(tool_name, self.tool)


@dataclass(frozen=True, slots=True)
class Policy:
    default: Decision | None = None
    rules: tuple[Rule, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "default": None if self.default is None else self.default.value,
            "rules": [_rule_json(r) for r in self.rules],
        }


def _rule_json(rule: Rule) -> dict[str, Any]:
    out: dict[str, Any] = {"tool": rule.tool, "decision": rule.decision.value}
    if rule.timeout_s is not None:
        out["timeoutS"] = rule.timeout_s
    return out


def _fail(message: str) -> ValidationFailed:
    return ValidationFailed(message, field="policy")


def _parse_decision(value: object, where: str) -> Decision:
    if isinstance(value, str):
        try:
            return Decision(value)
        except ValueError:
            pass
    raise _fail(f"{where} must be one of {_DECISIONS}, got {value!r}")


def _parse_timeout(value: object, decision: Decision, where: str) -> int | None:
    if value is None:
        return None
    if decision is not Decision.REQUIRE_APPROVAL:
        raise _fail(f"{where}.timeoutS applies to REQUIRE_APPROVAL only, not {decision.value}")
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TIMEOUT_S:
        raise _fail(f"{where}.timeoutS must be a whole number of seconds from 1 to {MAX_TIMEOUT_S}")
    return value


def parse_policy(obj: object) -> Policy:
    """Parse policy JSON into a ``Policy``; ``None`` is the empty policy.

    Strict on purpose: an unknown key (``"defualt"``) or a misspelt decision would otherwise
    silently fall back to the risk defaults, which may be looser than the author meant.
    """
    if obj is None:
        return Policy()
    if not isinstance(obj, Mapping):
        raise _fail("policy must be an object with optional 'default' and 'rules'")
    unknown = sorted(str(k) for k in obj if k not in _POLICY_KEYS)
    if unknown:
        raise _fail(f"policy has unknown keys: {', '.join(unknown)} (allowed: default, rules)")
    raw_default = obj.get("default")
    default = None if raw_default is None else _parse_decision(raw_default, "policy.default")
    raw_rules = obj.get("rules")
    if raw_rules is None:
        raw_rules = []
    if not isinstance(raw_rules, list):
        raise _fail("policy.rules must be a list of {tool, decision}")
    if len(raw_rules) > MAX_RULES:
        raise _fail(f"policy.rules has {len(raw_rules)} rules; at most {MAX_RULES} are allowed")
    rules: list[Rule] = []
    for i, raw in enumerate(raw_rules):
        where = f"policy.rules[{i}]"
        if not isinstance(raw, Mapping):
            raise _fail(f"{where} must be an object {{tool, decision}}")
        if not _RULE_KEYS <= set(raw) <= _RULE_KEYS | _OPTIONAL_RULE_KEYS:
            raise _fail(f"{where} must have the keys 'tool' and 'decision', and may have 'timeoutS'")
        tool = raw["tool"]
        if not isinstance(tool, str) or not tool.strip():
            raise _fail(f"{where}.tool must be a non-empty glob pattern")
        if len(tool) > MAX_PATTERN_CHARS:
            raise _fail(f"{where}.tool is longer than {MAX_PATTERN_CHARS} characters")
        decision = _parse_decision(raw["decision"], f"{where}.decision")
        timeout_s = _parse_timeout(raw.get("timeoutS"), decision, where)
        rules.append(Rule(tool=tool_key(tool), decision=decision, timeout_s=timeout_s))
    return Policy(default=default, rules=tuple(rules))


def validate_policy(
    obj: object, *, tool_names: Collection[str] | None = None, open_prefixes: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Validate policy JSON and return its normalised form (``default`` always present).

    With ``tool_names`` (every tool the deployment has), a rule whose pattern matches none
    of them is refused, naming it: it could only be a typo, and it would decide nothing.
    The deployment's tools, not the agent's own: an agent's rules are also a ceiling for
    the runs it delegates to, which may call tools it does not offer itself
    (docs/concepts/policy.md). A pattern under one of ``open_prefixes`` is not checked:
    those tools come and go with the workspace's connectors (``mcp.``), and a rule may be
    written before its server is registered."""
    policy = parse_policy(obj)
    if tool_names is not None:
        for i, rule in enumerate(policy.rules):
            if rule.tool.startswith(open_prefixes):
                continue
            if not any(rule.matches(name) for name in tool_names):
                raise _fail(
                    f"policy.rules[{i}].tool {rule.tool!r} matches no tool "
                    f"(the tools are: {', '.join(sorted(tool_names))})"
                )
    return policy.to_json()


# -- one agent ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentDecision:
    decision: Decision
    source: str  # what imposed it: "rule 'x.*'", "default", "risk default ...", "clamp ..."
    timeout_s: int | None = None  # the deciding rule's timeoutS


def decide_for_agent(policy: Policy, tool_name: str, risk: RiskClass) -> AgentDecision:
    """One agent's decision for a call of ``tool_name`` (docs/concepts/policy.md).

    Among several matching rules the strictest wins; among equally strict ones the first in
    the policy is named as the source.
    """
    chosen: Rule | None = None
    for rule in policy.rules:
        if not rule.matches(tool_name):
            continue
        if chosen is None or rule.decision.strictness > chosen.decision.strictness:
            chosen = rule
    timeout_s = None
    if chosen is not None:
        decision, source, timeout_s = chosen.decision, f"rule '{chosen.tool}'", chosen.timeout_s
    elif policy.default is not None:
        decision, source = policy.default, "default"
    else:
        decision, source = RISK_DEFAULTS[risk], f"risk default for {risk.value}"
    if risk in CLAMPED_RISKS and decision is Decision.ALLOW:
        return AgentDecision(
            Decision.REQUIRE_APPROVAL, f"clamp for {risk.value} ({source} said {Decision.ALLOW.value})"
        )
    return AgentDecision(decision, source, timeout_s)


# -- the run's chain ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PolicyLink:
    """One run's agent and the policy snapshotted when that run was created; or, with
    ``current``, that agent's policy as it is now (``live_chain``)."""

    agent_name: str
    policy: Policy
    current: bool = False


@dataclass(frozen=True, slots=True)
class EffectiveDecision:
    decision: Decision
    reason: str  # e.g. "agent 'root-bot' rule 'webhook.*' -> DENY"
    # How long an approval may wait: the shortest timeoutS of the chain's deciding rules
    # (the fail-safe one); None: no rule says, the deployment's default applies.
    timeout_s: int | None = None


def effective_decision(chain: Sequence[PolicyLink], tool_name: str, risk: RiskClass) -> EffectiveDecision:
    """The strictest decision over ``chain`` (root ancestor first, the run's own agent last).

    Ties go to the link nearest the root: that is the constraint no descendant can lift, so
    it is the one an operator has to change to get a different outcome.
    """
    if not chain:
        raise ValueError("a policy chain has at least the run's own agent")
    best_link = chain[0]
    best = decide_for_agent(best_link.policy, tool_name, risk)
    timeouts = [best.timeout_s]
    for link in chain[1:]:
        mine = decide_for_agent(link.policy, tool_name, risk)
        timeouts.append(mine.timeout_s)
        if mine.decision.strictness > best.decision.strictness:
            best_link, best = link, mine
    whose = "current policy " if best_link.current else ""
    reason = f"agent '{best_link.agent_name}' {whose}{best.source} -> {best.decision.value}"
    if best.decision is not Decision.REQUIRE_APPROVAL:
        return EffectiveDecision(best.decision, reason)
    return EffectiveDecision(best.decision, reason, min((t for t in timeouts if t is not None), default=None))


def live_chain(snapshot: Sequence[PolicyLink], current: Sequence[PolicyLink]) -> list[PolicyLink]:
    """Tightening is live, loosening is not (docs/concepts/policy.md): the chain a call is
    decided by is the run's snapshot followed by the *current* policy of every agent on it.
    The decision is the strictest over both, so a policy tightened since the run was created
    applies at once, and one loosened since changes nothing: its snapshot still counts. The
    snapshot comes first, so a tie names the snapshot, not the current policy."""
    return [*snapshot, *(PolicyLink(link.agent_name, link.policy, current=True) for link in current)]


def chain_agent_ids(snapshot: object) -> list[int]:
    """The agents on a chain snapshot, root first (links without an id are skipped)."""
    if not isinstance(snapshot, list):
        return []
    ids = [item.get("agent_id") for item in snapshot if isinstance(item, Mapping)]
    return list(dict.fromkeys(i for i in ids if isinstance(i, int)))


def parse_chain(snapshot: object) -> list[PolicyLink]:
    """Rebuild a chain from its JSON snapshot ``[{"agent_name", "policy", ...}]`` (root first)."""
    if not isinstance(snapshot, list):
        raise _fail("a policy chain must be a list")
    links: list[PolicyLink] = []
    for item in snapshot:
        if not isinstance(item, Mapping) or not isinstance(item.get("agent_name"), str):
            raise _fail("each policy chain link needs 'agent_name' and 'policy'")
        links.append(PolicyLink(agent_name=item["agent_name"], policy=parse_policy(item.get("policy"))))
    return links
