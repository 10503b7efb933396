"""``enverif dev`` as a newcomer meets it: one command, embedded SQLite and Redis under
ENVERIF_HOME, a demo workspace, a token on the screen, and a clean stop on Ctrl-C/SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.dev.embedded import stop_embedded_redis
from app.settings import Settings
from tests.conftest import DB_KIND
from tests.support.cli import spawn_enverif

# It runs on the embedded defaults whatever the leg, so once (in the SQLite leg) is enough.
pytestmark = pytest.mark.skipif(
    DB_KIND != "sqlite", reason="enverif dev uses embedded SQLite; run in the sqlite leg"
)

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 30.0

AGENTS = "{ agents(first: 10) { edges { node { id name status } } } }"
SCHEDULES = "{ agents(first: 10) { edges { node { name schedules { cron enabled overlapPolicy } } } } }"
START_RUN = "mutation($agent: ID!, $input: JSON) { startRun(agentId: $agent, input: $input) { id status } }"
RUN = "query($id: ID!) { run(id: $id) { status result error steps { seq tool status decision } } }"
PENDING = "{ approvals(status: PENDING, first: 20) { edges { node { id tool status run { id } } } } }"
DECIDE = 'mutation($id: ID!) { decideApproval(id: $id, approve: true, reason: "demo") { id status } }'


class DevStack:
    """One ``enverif dev`` process; its output (stdout and stderr) goes to a file we read."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.log_path = home / f"dev-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.token = ""

    def start(self, *args: str) -> DevStack:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENVERIF_")}
        env["ENVERIF_HOME"] = str(self.home)
        with open(self.log_path, "wb") as out:
            self.proc = spawn_enverif(
                ["dev", "--port", "0", *args],
                env=env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            output = self.output()
            url = re.search(r"GraphQL\s+(http://\S+)/graphql", output)
            token = re.search(r"Token\s+(evf_\S+)", output)
            if url and token:
                self.url, self.token = url.group(1), token.group(1)
                return self
            if self.proc.poll() is not None:
                pytest.fail(f"enverif dev exited with {self.proc.returncode}:\n{output}")
            time.sleep(0.1)
        pytest.fail(f"enverif dev printed no URL and token within {START_TIMEOUT_S} s:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def gql(self, query: str, variables: dict[str, Any] | None = None, *, token: str | None = None) -> Any:
        response = httpx.post(
            f"{self.url}/graphql",
            json={"query": query, "variables": variables or {}},
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def agent_ids(self) -> dict[str, str]:
        edges = self.gql(AGENTS)["agents"]["edges"]
        names = [e["node"]["name"] for e in edges]
        assert len(names) == len(set(names)), f"demo agents seeded twice: {names}"
        return {e["node"]["name"]: e["node"]["id"] for e in edges}

    def wait_run(self, run_id: str, *statuses: str) -> dict[str, Any]:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            run: dict[str, Any] = self.gql(RUN, {"id": run_id})["run"]
            if run["status"] in statuses:
                return run
            if time.monotonic() > deadline:
                pytest.fail(
                    f"run {run_id} is {run['status']}, not {statuses}:\n{run}\n{self.output()[-4000:]}"
                )
            time.sleep(0.1)

    def stop(self, sig: signal.Signals) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"enverif dev did not stop on {sig.name} within {STOP_TIMEOUT_S} s:\n{self.output()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _schedules(stack: DevStack) -> dict[str, list[dict[str, Any]]]:
    edges = stack.gql(SCHEDULES)["agents"]["edges"]
    return {e["node"]["name"]: e["node"]["schedules"] for e in edges if e["node"]["schedules"]}


@pytest.fixture
def dev_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # A short path: the embedded Redis listens on a unix socket in it (107-byte limit).
    home = tmp_path_factory.mktemp("dev")
    yield home
    stop_embedded_redis(Settings(home=home))  # it daemonizes, so it outlives `enverif dev`


@contextmanager
def running_stack(home: Path) -> Iterator[DevStack]:
    """``enverif dev`` on ``home`` for the block; it must stop cleanly on SIGTERM after it."""
    stack = DevStack(home).start()
    try:
        yield stack
        assert stack.stop(signal.SIGTERM) == 0, stack.output()
    finally:
        stack.kill()
        stop_embedded_redis(Settings(home=home))  # it daemonizes, so it outlives `enverif dev`


@pytest.fixture(scope="module")
def demo_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """One ``enverif dev`` for the demo agents' tests: each runs its own agent, in runs of its
    own, so they share a stack (a start costs seconds of CPU)."""
    with running_stack(tmp_path_factory.mktemp("dev")) as stack:
        yield stack
    assert "Traceback" not in stack.output(), stack.output()


def test_dev_serves_the_demo_workspace_and_stops_cleanly(dev_home: Path) -> None:
    stack = DevStack(dev_home).start()
    try:
        assert httpx.get(f"{stack.url}/healthz", timeout=5).status_code == 200
        agents = stack.agent_ids()
        assert {"researcher", "greeter", "research-director", "prospector", "qualifier"} <= set(agents)
        assert _schedules(stack) == {
            "prospector": [{"cron": "0 * * * *", "enabled": True, "overlapPolicy": "SKIP"}]
        }
        assert f"curl -s {stack.url}/graphql" in stack.output()
        # The banner names the operator console, and the API serves it.
        assert f"{stack.url}/console" in stack.output()
        assert "<title>Enverif console</title>" in httpx.get(f"{stack.url}/console", timeout=5).text
        assert f"Authorization: Bearer {stack.token}" in stack.output()

        # The worker runs in the same process: a run goes all the way through.
        run = stack.gql(START_RUN, {"agent": agents["greeter"], "input": {"name": "Ada"}})["startRun"]
        assert stack.wait_run(run["id"], "SUCCEEDED", "FAILED")["result"] == "Hello, Ada!"

        assert stack.stop(signal.SIGINT) == 0, stack.output()  # Ctrl-C
    finally:
        stack.kill()
    assert "Traceback" not in stack.output(), stack.output()
    first_token = stack.token

    # Again on the same home: the workspace and agents are reused, a fresh token is printed,
    # and the earlier token still works.
    again = DevStack(dev_home).start()
    try:
        assert again.token != first_token
        assert set(again.agent_ids()) == set(agents)
        assert len(_schedules(again)["prospector"]) == 1  # seeded once, kept as operators left it
        assert again.gql("{ viewer { role workspace { name } } }", token=first_token)["viewer"] == {
            "role": "admin",
            "workspace": {"name": "demo"},
        }
        assert again.stop(signal.SIGTERM) == 0, again.output()
    finally:
        again.kill()
    assert "Traceback" not in again.output(), again.output()


def test_dev_researcher_demo_waits_for_approval_then_succeeds(demo_stack: DevStack) -> None:
    stack = demo_stack
    # The stack is shared: what other demos posted (the delegation demo's enricher) came before.
    before = len(httpx.get(f"{stack.url}/dev/webhook", timeout=5).json()["deliveries"])
    agents = stack.agent_ids()
    run_id = stack.gql(START_RUN, {"agent": agents["researcher"]})["startRun"]["id"]

    waiting = stack.wait_run(run_id, "WAITING_APPROVAL", "FAILED", "SUCCEEDED")
    assert waiting["status"] == "WAITING_APPROVAL", waiting
    assert [(s["tool"], s["status"]) for s in waiting["steps"]] == [
        ("http.get", "SUCCEEDED"),
        ("webhook.post", "WAITING_APPROVAL"),
    ]
    pending = [
        e["node"] for e in stack.gql(PENDING)["approvals"]["edges"] if e["node"]["run"]["id"] == run_id
    ]
    assert [p["tool"] for p in pending] == ["webhook.post"]

    assert stack.gql(DECIDE, {"id": pending[0]["id"]})["decideApproval"]["status"] == "APPROVED"
    done = stack.wait_run(run_id, "SUCCEEDED", "FAILED")
    assert done["status"] == "SUCCEEDED", done
    # A template that is one expression keeps its type (scripted provider): the statuses are ints.
    assert done["result"] == {"fetched": 200, "posted": 200}

    deliveries = httpx.get(f"{stack.url}/dev/webhook", timeout=5).json()["deliveries"][before:]
    assert len(deliveries) == 1
    assert deliveries[0]["payload"]["summary"].startswith("Enverif demo page")
    assert deliveries[0]["idempotencyKey"]


CRM = """{ mcpServers(first: 5) { edges { node { id name url enabled lastError tools { name risk } } } } }"""
SYNC_CRM = "mutation($id: ID!) { syncMcpServer(id: $id) { lastError tools { name } } }"


def test_dev_prospector_creates_its_leads_in_the_demo_crm_over_mcp_after_approval(
    demo_stack: DevStack,
) -> None:
    stack = demo_stack
    [crm] = [e["node"] for e in stack.gql(CRM)["mcpServers"]["edges"]]
    assert (crm["name"], crm["url"], crm["enabled"], crm["lastError"]) == (
        "crm", f"{stack.url}/dev/crm/mcp", True, None,
    )  # fmt: skip
    assert {t["name"]: t["risk"] for t in crm["tools"]} == {
        "mcp.crm.search_companies": "READ",
        "mcp.crm.create_lead": "EXTERNAL_WRITE",
        "mcp.crm.send_email": "EXTERNAL_WRITE",
    }
    # The stack's own MCP server answers over the network, as any registered one.
    synced = stack.gql(SYNC_CRM, {"id": crm["id"]})["syncMcpServer"]
    assert synced["lastError"] is None and len(synced["tools"]) == 3

    run_id = stack.gql(START_RUN, {"agent": stack.agent_ids()["prospector"]})["startRun"]["id"]
    waiting = stack.wait_run(run_id, "WAITING_APPROVAL", "FAILED", "SUCCEEDED")
    assert waiting["status"] == "WAITING_APPROVAL", waiting
    assert waiting["steps"][-1]["tool"] == "mcp.crm.create_lead"
    assert httpx.get(f"{stack.url}/dev/crm/leads", timeout=5).json()["leads"] == []  # held
    [pending] = [
        e["node"] for e in stack.gql(PENDING)["approvals"]["edges"] if e["node"]["run"]["id"] == run_id
    ]
    stack.gql(DECIDE, {"id": pending["id"]})
    done = stack.wait_run(run_id, "SUCCEEDED", "FAILED")
    assert done["status"] == "SUCCEEDED", done
    held = httpx.get(f"{stack.url}/dev/crm/leads", timeout=5).json()
    assert [lead["domain"] for lead in held["leads"]] == done["result"]["qualified"] != []
    assert list(held["callsPerKey"].values()) == [1]


TREE = """
query($id: ID!) { run(id: $id) { status result
  children { id status delegation { task } parent { id } }
  pendingApprovals { id tool run { id depth } } } }
"""


def test_dev_delegation_demo_shows_the_childs_approval_on_the_root(demo_stack: DevStack) -> None:
    stack = demo_stack
    agents = stack.agent_ids()
    run_id = stack.gql(START_RUN, {"agent": agents["lead-researcher"], "input": {"company": "acme.example"}})[
        "startRun"
    ]["id"]
    stack.wait_run(run_id, "WAITING_CHILD", "FAILED", "SUCCEEDED")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not (tree := stack.gql(TREE, {"id": run_id})["run"])["pendingApprovals"]:
        assert time.monotonic() < deadline, tree
        time.sleep(0.1)
    [child] = tree["children"]
    assert child["delegation"] == {"task": "Enrich acme.example"} and child["parent"]["id"] == run_id
    [approval] = tree["pendingApprovals"]
    assert approval["tool"] == "webhook.post" and approval["run"] == {"id": child["id"], "depth": 1}
    stack.gql(DECIDE, {"id": approval["id"]})
    done = stack.wait_run(run_id, "SUCCEEDED", "FAILED")
    assert done["status"] == "SUCCEEDED", done
    assert done["result"] == {
        "outcome": "SUCCEEDED",
        "enrichment": {"fetched": 200, "posted": 200},
        "childRun": done["result"]["childRun"],
    }


def test_dev_scout_demo_remembers_between_runs(demo_stack: DevStack) -> None:
    stack = demo_stack
    agents = stack.agent_ids()
    first_id = stack.gql(START_RUN, {"agent": agents["scout"], "input": {"topic": "customer"}})["startRun"][
        "id"
    ]
    first = stack.wait_run(first_id, "SUCCEEDED", "FAILED")
    assert first["status"] == "SUCCEEDED", first
    # The seeded memory was injected and found; the run's decision was remembered.
    assert first["result"] == {
        "injected": ["icp"],
        "found": ["icp"],
        "remembered": {"key": "latest-decision", "created": True},
    }
    second_id = stack.gql(
        START_RUN,
        {
            "agent": agents["scout"],
            "input": {"topic": "fintech", "decision": "Pause outreach in December"},
        },
    )["startRun"]["id"]
    second = stack.wait_run(second_id, "SUCCEEDED", "FAILED")
    assert sorted(second["result"]["injected"]) == ["icp", "latest-decision"]
    assert second["result"]["found"] == ["latest-decision"]
    assert second["result"]["remembered"] == {"key": "latest-decision", "created": False}
    memories = stack.gql(
        'query($a: ID!) { memories(agentId: $a, query: "december") { edges { node { key value } } } }',
        {"a": agents["scout"]},
    )["memories"]["edges"]
    assert [e["node"] for e in memories] == [
        {"key": "latest-decision", "value": "Pause outreach in December"}
    ]


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an exited daemon nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_dev_is_quiet_its_banner_stays_last_and_ctrl_c_leaves_no_process(dev_home: Path) -> None:
    stack = DevStack(dev_home).start()
    try:
        redis_pid = int((dev_home / "redis.pid").read_text())
        assert _alive(redis_pid)
        # Requests, a run's jobs and the idle worker's sweeps print nothing by default.
        agents = stack.agent_ids()
        run = stack.gql(START_RUN, {"agent": agents["greeter"], "input": {"name": "Ada"}})["startRun"]
        assert stack.wait_run(run["id"], "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"
        assert stack.output().rstrip().endswith("--verbose logs more."), stack.output()
        assert stack.stop(signal.SIGINT) == 0, stack.output()
    finally:
        stack.kill()
    # The embedded Redis this `dev` started went with it.
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(redis_pid):
        assert time.monotonic() < deadline, f"redis-server {redis_pid} outlived enverif dev"
        time.sleep(0.1)

    verbose = DevStack(dev_home).start("--verbose")
    try:
        verbose.agent_ids()
        assert re.search(r'"POST /graphql HTTP/1.1" 200', verbose.output()), verbose.output()
        assert verbose.stop(signal.SIGTERM) == 0, verbose.output()
    finally:
        verbose.kill()
