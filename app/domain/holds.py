"""When a run is held (docs/concepts/holds.md): not claimed while its agent is not ACTIVE or
its workspace is paused; a RUNNING one stops at its next step boundary and waits QUEUED."""

from __future__ import annotations

from app.domain.agents import AgentStatus

MAX_PAUSE_REASON_CHARS = 2_000


def hold_reason(*, agent_name: str, agent_status: str, workspace_paused_reason: str | None) -> str | None:
    """Why a run of this agent must not go on now, or None. The workspace's pause comes first:
    it is the one an operator must lift for any run to go on."""
    if workspace_paused_reason is not None:
        return f"workspace paused: {workspace_paused_reason}"
    if agent_status != AgentStatus.ACTIVE:
        return f"agent {agent_name!r} is {agent_status}"
    return None
