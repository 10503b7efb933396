"""The manual's client programs, run as a reader runs them: against ``enverif dev``.

``docs/examples/tour.py`` (Python, httpx) does the getting-started tour on the demo's
``researcher``: start a run, find its pending approval, approve it, see it succeed.
``docs/examples/watch_tree.mjs`` (node, npm ``graphql-ws``) then watches that run's tree,
which has ended, so it gets the whole log replayed and the stream's ``complete``; with a
refused token it stops at once with an error instead of retrying.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DB_KIND
from tests.integration.test_dev import DevStack, running_stack
from tests.support.js import beside_js_packages

# enverif dev runs on the embedded SQLite whatever the leg, so once (in the SQLite leg) is enough.
pytestmark = pytest.mark.skipif(
    DB_KIND != "sqlite", reason="enverif dev uses embedded SQLite; run in the sqlite leg"
)

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
RUN_TIMEOUT_S = 90


@pytest.fixture
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    # A short path: the embedded Redis listens on a unix socket in it (107-byte limit).
    with running_stack(tmp_path_factory.mktemp("docs")) as dev:
        yield dev


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVERIF_")}
    return {**env, **extra}


def test_the_python_and_javascript_clients_work_against_enverif_dev(stack: DevStack, tmp_path: Path) -> None:
    tour = subprocess.run(
        [sys.executable, str(EXAMPLES / "tour.py"), "--url", f"{stack.url}/graphql"],
        env=_environment(ENVERIF_TOKEN=stack.token),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert tour.returncode == 0, (tour.stdout, tour.stderr, stack.output()[-3000:])
    assert "webhook.post: WAITING_APPROVAL" in tour.stdout, tour.stdout
    started = re.search(r"^started run (\S+) \(QUEUED\)$", tour.stdout, re.MULTILINE)
    assert started is not None, tour.stdout
    run_id = started.group(1)
    assert f"run {run_id} SUCCEEDED: {{'fetched': 200, 'posted': 200}}" in tour.stdout, tour.stdout

    script = beside_js_packages(tmp_path, EXAMPLES / "watch_tree.mjs") / "watch_tree.mjs"
    ws_url = stack.url.replace("http://", "ws://", 1) + "/graphql"
    watch = subprocess.run(
        ["node", str(script), run_id, ws_url],
        env=_environment(TOKEN=stack.token),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert watch.returncode == 0, (watch.stdout, watch.stderr)
    events = [json.loads(line) for line in watch.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "RUN_CREATED" and events[0]["agentName"] == "researcher"
    assert "APPROVAL_DECIDED" in {e["type"] for e in events}
    assert events[-1]["type"] == "RUN_STATUS_CHANGED" and events[-1]["status"] == "SUCCEEDED"

    refused = subprocess.run(
        ["node", str(script), run_id, ws_url],
        env=_environment(TOKEN="evf_not-a-token"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "watch failed: Forbidden" in refused.stderr, refused.stderr
