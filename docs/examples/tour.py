"""The getting-started tour as one program: start a run of the demo's ``researcher``, wait
for the approval its ``webhook.post`` needs, approve it, and print the run's result.

    ENVERIF_TOKEN=evf_... python docs/examples/tour.py [--url http://127.0.0.1:8000/graphql]

Needs ``enverif dev`` running (``make run``) and an operator or admin token; uses httpx,
which Enverif installs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import httpx

AGENTS = "query { agents(first: 50) { edges { node { id name } } } }"
START = "mutation Start($agent: ID!) { startRun(agentId: $agent) { id status } }"
RUN = """
query Run($id: ID!) {
  run(id: $id) {
    status result error
    steps { seq tool status decision decisionReason }
    pendingApprovals { id tool arguments }
  }
}
"""
DECIDE = """
mutation Decide($id: ID!, $reason: String) {
  decideApproval(id: $id, approve: true, reason: $reason) { status decidedAt }
}
"""
ENDED = {"SUCCEEDED", "FAILED", "CANCELLED"}


class GraphQLError(Exception):
    """The API answered with errors: each has a message and extensions.code."""


class Api:
    def __init__(self, client: httpx.Client, url: str) -> None:
        self.client = client
        self.url = url

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> Any:
        response = self.client.post(self.url, json={"query": query, "variables": variables or {}})
        body = response.json()
        if body.get("errors"):
            error = body["errors"][0]
            code = error.get("extensions", {}).get("code")
            raise GraphQLError(f"{code}: {error['message']}")
        response.raise_for_status()
        return body["data"]


def wait_for(api: Api, run_id: str, statuses: set[str], timeout_s: float = 30.0) -> Any:
    """Poll the run until its status is one of ``statuses`` (a subscription would push it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        run = api.gql(RUN, {"id": run_id})["run"]
        if run["status"] in statuses:
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} is still {run['status']}")
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description="The getting-started tour as one program.")
    parser.add_argument(
        "--url",
        default=os.environ.get("ENVERIF_URL", "http://127.0.0.1:8000/graphql"),
        help="the API's /graphql URL (default: ENVERIF_URL or %(default)s)",
    )
    url = parser.parse_args().url
    token = os.environ.get("ENVERIF_TOKEN")
    if not token:
        print("set ENVERIF_TOKEN to the token `make run` printed", file=sys.stderr)
        return 2
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(headers=headers, timeout=10) as client:
        api = Api(client, url)
        agents = {e["node"]["name"]: e["node"]["id"] for e in api.gql(AGENTS)["agents"]["edges"]}
        run = api.gql(START, {"agent": agents["researcher"]})["startRun"]
        print(f"started run {run['id']} ({run['status']})")

        run_state = wait_for(api, run["id"], {"WAITING_APPROVAL"} | ENDED)
        for step in run_state["steps"]:
            print(f"  step {step['seq']} {step['tool']}: {step['status']} ({step['decisionReason']})")
        for approval in run_state["pendingApprovals"]:
            print(f"approving {approval['tool']} with {approval['arguments']}")
            decided = api.gql(DECIDE, {"id": approval["id"], "reason": "looks fine"})
            print(f"  {decided['decideApproval']['status']}")

        run_state = wait_for(api, run["id"], ENDED)
        print(f"run {run['id']} {run_state['status']}: {run_state['result'] or run_state['error']}")
        return 0 if run_state["status"] == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
