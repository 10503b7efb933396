"""An approval decided on the API while a worker process of its tree is SIGKILLed (issue:
nested approvals lost with a crashed worker). A real ``enverif worker`` process; about 12 s,
so it runs with ``make chaos``; tests/integration/test_approvals_nested.py has the quick
nested cases."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.integration.test_approvals_nested import (
    DECIDE,
    _agent,
    _agent_id,
    _approvals,
    _hook,
    _pending,
    _tree,
    _tree_runs,
)
from tests.integration.test_delegation import delegate
from tests.support.runs import start_run, wait_run
from tests.support.servers import sink_server
from tests.support.workers import exited, spawn_worker

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]

ALLOW_HOOKS = {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]}


async def test_an_approval_decided_while_the_runs_worker_is_sigkilled(
    gql, workspace, settings, processes, sessionmaker
) -> None:
    """One child waits for its approval while its sibling's call is in flight on a worker
    process; the approval is decided as that worker is SIGKILLed. A new worker finishes the
    tree: the decision is kept, its call made once, the killed call taken up again."""
    first = spawn_worker(settings)
    processes.append(first)
    async with sink_server(delay_s=1.5) as (sink, url):
        slow = await _agent(gql, workspace.admin, [_hook(url, 0), {"final": "slow"}], "slow",
                            policy=ALLOW_HOOKS)  # fmt: skip
        waiter = await _agent(gql, workspace.admin, [_hook(url, 1), {"final": "waited"}], "waiter")
        root_agent = await _agent(
            gql, workspace.admin,
            [{"calls": [delegate(slow, "a"), delegate(waiter, "b")]}, {"final": "{{ results }}"}], "root",
            policy=ALLOW_HOOKS,  # a ceiling for its children: the slow one's call needs no approval
        )  # fmt: skip
        root = await start_run(gql, workspace.operator, await _agent_id(gql, workspace.viewer, root_agent))
        tree = await _tree_runs(gql, workspace.viewer, root, 2)
        runs = {d["id"] for d in tree["descendants"]}
        [pending] = await _pending(gql, workspace.viewer, runs, 1)
        deadline = time.monotonic() + 20
        while not any(
            s["tool"] == "webhook.post" and s["status"] == "RUNNING"
            for d in (await _tree(gql, root, workspace.viewer))["descendants"]
            for s in d["steps"]
        ):
            assert time.monotonic() < deadline, exited(processes) or "the slow call never started"
            await asyncio.sleep(0.05)
        decided, _ = await asyncio.gather(
            gql.ok(DECIDE, {"id": pending["id"], "decision": "APPROVE"}, token=workspace.operator),
            asyncio.to_thread(first.kill),
        )
        assert decided["decideApproval"]["status"] == "APPROVED"
        await asyncio.to_thread(first.wait, 10)
        processes.append(spawn_worker(settings))
        run = await wait_run(gql, workspace.viewer, root, timeout_s=40)
        assert run["status"] == "SUCCEEDED", (run, exited(processes[1:]))
        hook_keys = {d.key for d in sink.deliveries if d.payload == {"n": 1}}
        assert len(hook_keys) == 1 and sink.completions(hook_keys.pop()) == 1
    [approval] = await _approvals(gql, workspace.viewer, runs)
    assert approval["status"] == "APPROVED"
