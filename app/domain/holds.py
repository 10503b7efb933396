"""When a run is held (docs/concepts/holds.md): not claimed while its agent is not ACTIVE or
its workspace is paused; a RUNNING one stops at its next step boundary and waits QUEUED.
A claim over a quota (docs/concepts/budgets.md#quotas) holds the run too, until a slot is
free; a run already RUNNING is never stopped for a quota."""

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


# -- quotas (docs/concepts/budgets.md#quotas) ------------------------------------------------

# Every quota hold's reason starts so: what the sweeper (and a run's end) releases.
QUOTA_PREFIX = "quota: "
WORKSPACE_QUOTA_SETTING = "ENVERIF_MAX_ACTIVE_RUNS_PER_WORKSPACE"


def quota_reason(
    *,
    agent_name: str,
    agent_running: int | None,
    agent_limit: int | None,
    workspace_running: int,
    workspace_limit: int,
) -> str | None:
    """Why a claim must wait for a slot, or None. ``*_running``: the runs executing now
    (RUNNING), the claiming one not among them; ``agent_running`` None: not counted (the
    run's agent has no ``maxConcurrentRuns``). The workspace's quota comes first: no agent's
    slot helps while it is full."""
    if workspace_running >= workspace_limit:
        return (
            f"{QUOTA_PREFIX}the workspace has {workspace_running} runs running "
            f"({WORKSPACE_QUOTA_SETTING} {workspace_limit})"
        )
    if agent_limit is not None and agent_running is not None and agent_running >= agent_limit:
        return (
            f"{QUOTA_PREFIX}agent {agent_name!r} has {agent_running} runs running "
            f"(budget.maxConcurrentRuns {agent_limit})"
        )
    return None


def quota_releases(
    held: list[tuple[int, int, int, int | None]],
    *,
    workspace_running: dict[int, int],
    agent_running: dict[int, int],
    workspace_limit: int,
) -> list[int]:
    """Which quota-held runs now fit, oldest first: ``held`` is (run id, workspace id, agent
    id, the run's maxConcurrentRuns or None), the counts are what runs now. Each released run
    takes its slot, so no more are released than the quotas admit."""
    workspaces, agents = dict(workspace_running), dict(agent_running)
    released: list[int] = []
    for run_id, workspace_id, agent_id, agent_limit in sorted(held):
        if workspaces.get(workspace_id, 0) >= workspace_limit:
            continue
        if agent_limit is not None and agents.get(agent_id, 0) >= agent_limit:
            continue
        workspaces[workspace_id] = workspaces.get(workspace_id, 0) + 1
        agents[agent_id] = agents.get(agent_id, 0) + 1
        released.append(run_id)
    return released
