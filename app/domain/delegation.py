"""Delegation (docs/concepts/delegation.md): whether a run may start a child run of another agent. Pure.

A refusal is the ``agents.delegate`` call's result, so the parent's model can react; the
parent run carries on and no child run is created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_TASK_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class Target:
    id: int
    name: str
    status: str  # AgentStatus value


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str
    message: str

    def as_result(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


@dataclass(frozen=True, slots=True)
class Request:
    agent: str
    task: str
    input: dict[str, Any]

    def child_input(self) -> dict[str, Any]:
        """The child's run input: ``{"task": TASK}`` merged with ``input`` (docs/concepts/delegation.md)."""
        return {"task": self.task, **self.input}


def parse_request(args: Mapping[str, Any]) -> Request | Refusal:
    agent, task, extra = args.get("agent"), args.get("task"), args.get("input")
    unknown = set(args) - {"agent", "task", "input"}
    if unknown:
        return Refusal("INVALID_ARGUMENTS", f"unknown arguments: {', '.join(sorted(unknown))}")
    if not isinstance(agent, str) or not agent.strip():
        return Refusal("INVALID_ARGUMENTS", "'agent' must be the name of an agent")
    if not isinstance(task, str) or not task.strip():
        return Refusal("INVALID_ARGUMENTS", "'task' must be a non-empty string")
    if len(task) > MAX_TASK_CHARS:
        return Refusal("INVALID_ARGUMENTS", f"'task' is longer than {MAX_TASK_CHARS} characters")
    if extra is not None and not isinstance(extra, dict):
        return Refusal("INVALID_ARGUMENTS", "'input' must be a JSON object")
    return Request(agent=agent, task=task, input=dict(extra or {}))


def check_delegation(
    *, name: str, target: Target | None, ancestors: Sequence[int], child_depth: int, max_depth: int
) -> Refusal | None:
    """``ancestors``: the agent ids on the path from the root to the delegating run,
    itself included. Workspace isolation is the caller's: ``target`` is looked up in the
    delegating run's workspace only, so another workspace's agent is simply unknown."""
    if target is None:
        return Refusal("UNKNOWN_AGENT", f"no agent named {name!r} in this workspace")
    if target.status != "ACTIVE":
        return Refusal("AGENT_NOT_ACTIVE", f"agent {name!r} is {target.status}; only ACTIVE agents take work")
    if target.id in ancestors:
        return Refusal("DELEGATION_CYCLE", f"agent {name!r} is already on this run's delegation path")
    if child_depth > max_depth:
        return Refusal(
            "DELEGATION_DEPTH_EXCEEDED",
            f"a child of this run would be at depth {child_depth}; the limit is {max_depth}",
        )
    return None


def delegable(agents: Sequence[Target], ancestors: Sequence[int]) -> list[Target]:
    """What ``agents.list`` offers: ACTIVE agents that are not on the caller's path."""
    return [a for a in agents if a.status == "ACTIVE" and a.id not in ancestors]
