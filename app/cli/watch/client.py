"""``enverif runs watch RUN_ID``: a run tree, live, in a terminal (DESIGN §9, issue 11).

A client of the public API like any other: one GraphQL query over HTTP draws the tree as it
is (and turns a bad token, an unknown run or a server that does not answer into one clear
line), then the ``runTree`` subscription over graphql-transport-ws (the token in
``connection_init``'s payload) updates it in place until the server sends ``complete`` —
the root run is terminal and every event of the tree was delivered. A dropped connection
resumes with ``afterSeq`` set to the last event seen, so nothing is missed or repeated.

``--json`` prints each event as one JSON object per line instead (for scripts).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from app.cli.watch.view import LiveView
from app.graphql.ids import parse_global_id, to_global_id

PROTOCOL = Subprotocol("graphql-transport-ws")
TIMEOUT_S = 10.0
MAX_RECONNECTS = 30
# graphql-transport-ws close codes that are final answers, not a dropped connection.
_REFUSED = {4400: "the server refused a message", 4401: "the token was refused",
            4403: "the token was refused", 4429: "too many connection attempts"}  # fmt: skip

TREE = """
query Tree($id: ID!) {
  run(id: $id) {
    root {
      id status agent { name }
      descendants { id status agent { name } parent { id } }
      pendingApprovals { id tool run { id } }
    }
  }
}
"""
SUBSCRIPTION = """
subscription Watch($root: ID!, $after: Int) {
  runTree(rootRunId: $root, afterSeq: $after) {
    seq type at runId rootRunId parentRunId status stepId stepStatus payload
    agentName stepTool stepDecision approvalId
  }
}
"""


class WatchError(Exception):
    """An expected failure: its message is the whole story (printed as one line)."""


@dataclass
class RunNode:
    id: str
    parent_id: str | None
    agent: str = "?"
    status: str = "?"
    step: str = ""


@dataclass
class TreeState:
    """The tree as the events so far describe it: pure bookkeeping, no I/O."""

    root_id: str
    runs: dict[str, RunNode] = field(default_factory=dict)
    # approval id -> (run id, tool)
    approvals: dict[str, tuple[str, str]] = field(default_factory=dict)
    last_seq: int = 0

    def node(self, run_id: str, parent_id: str | None = None) -> RunNode:
        if run_id not in self.runs:
            self.runs[run_id] = RunNode(id=run_id, parent_id=parent_id)
        elif parent_id is not None:
            self.runs[run_id].parent_id = parent_id
        return self.runs[run_id]

    def apply(self, event: dict[str, Any]) -> None:
        self.last_seq = max(self.last_seq, int(event["seq"]))
        run = self.node(event["runId"], event.get("parentRunId"))
        payload = event.get("payload") or {}
        run.agent = event.get("agentName") or payload.get("agent") or run.agent
        kind = event["type"]
        if kind in ("RUN_CREATED", "RUN_STATUS_CHANGED"):
            run.status = event.get("status") or run.status
            if run.status in ("SUCCEEDED", "FAILED", "CANCELLED"):
                run.step = ""
        elif kind in ("STEP_STARTED", "STEP_FINISHED"):
            tool = event.get("stepTool") or payload.get("tool") or "answer"
            decision = event.get("stepDecision") or payload.get("decision")
            status = event.get("stepStatus") or payload.get("status") or ""
            note = f", {decision}" if decision and kind == "STEP_STARTED" else ""
            run.step = f"step {payload.get('seq', '?')} {tool} ({status}{note})"
        elif kind == "APPROVAL_REQUESTED":
            tool = event.get("stepTool") or payload.get("tool") or "?"
            self.approvals[_approval_id(event, payload)] = (run.id, tool)
        elif kind == "APPROVAL_DECIDED":
            self.approvals.pop(_approval_id(event, payload), None)

    @property
    def root(self) -> RunNode:
        return self.node(self.root_id)


def _approval_id(event: dict[str, Any], payload: dict[str, Any]) -> str:
    if event.get("approvalId"):
        return str(event["approvalId"])
    raw = payload.get("approvalId")
    return to_global_id("Approval", int(raw)) if isinstance(raw, int) else str(raw)


def run_global_id(value: str) -> str:
    """The run's GraphQL id; a plain number is taken as the run's database id."""
    if value.isdigit():
        return to_global_id("Run", int(value))
    parsed = parse_global_id(value)
    if parsed is None or parsed[0] != "Run":
        raise WatchError(f"{value!r} is not a run id (the id GraphQL shows, e.g. from startRun)")
    return value


def endpoints(url: str) -> tuple[str, str]:
    """The HTTP and websocket URLs of a ``/graphql`` endpoint given either form."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https", "ws", "wss"):
        raise WatchError(f"--url must be an http(s):// or ws(s):// URL, not {url!r}")
    secure = scheme in ("https", "wss")
    return f"{'https' if secure else 'http'}://{rest}", f"{'wss' if secure else 'ws'}://{rest}"


async def load_tree(http_url: str, token: str, run_id: str) -> TreeState:
    """The tree as it is now, by one query; refusals become a ``WatchError``."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            response = await client.post(
                http_url, json={"query": TREE, "variables": {"id": run_id}}, headers=headers
            )
    except httpx.HTTPError as exc:
        raise WatchError(f"cannot reach the Enverif API at {http_url}: {exc or type(exc).__name__}") from None
    try:
        body = response.json()
    except ValueError:
        raise WatchError(f"{http_url} answered {response.status_code}, not GraphQL") from None
    if body.get("errors"):
        raise WatchError(describe_errors(body["errors"]))
    run = (body.get("data") or {}).get("run")
    if run is None:
        raise WatchError(f"NOT_FOUND: no run {run_id} in this token's workspace")
    root = run["root"]
    state = TreeState(root_id=root["id"])
    state.node(root["id"]).agent, state.root.status = root["agent"]["name"], root["status"]
    for r in root["descendants"]:
        node = state.node(r["id"], (r.get("parent") or {}).get("id"))
        node.agent, node.status = r["agent"]["name"], r["status"]
    for a in root["pendingApprovals"]:
        state.approvals[a["id"]] = (a["run"]["id"], a["tool"])
    return state


def describe_errors(errors: list[dict[str, Any]]) -> str:
    first = errors[0] if errors else {}
    code = (first.get("extensions") or {}).get("code")
    message = first.get("message") or "the server refused the request"
    if code == "UNAUTHENTICATED":
        return f"UNAUTHENTICATED: the token (--token or ENVERIF_TOKEN) was refused: {message}"
    return f"{code}: {message}" if code else message


async def _receive(ws: ClientConnection) -> dict[str, Any]:
    while True:
        message: dict[str, Any] = json.loads(await ws.recv())
        if message.get("type") == "ping":
            await ws.send(json.dumps({"type": "pong"}))
            continue
        return message


async def _stream(ws_url: str, token: str, state: TreeState, after_seq: int, view: Any) -> bool:
    """Follow the subscription on one connection: True once ``complete`` arrived."""
    async with connect(ws_url, subprotocols=[PROTOCOL], open_timeout=TIMEOUT_S) as ws:
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        )
        ack = await asyncio.wait_for(_receive(ws), TIMEOUT_S)
        if ack.get("type") != "connection_ack":
            raise WatchError(f"the server did not acknowledge the connection: {ack}")
        variables = {"root": state.root_id, "after": after_seq}
        await ws.send(json.dumps({"id": "1", "type": "subscribe",
                                  "payload": {"query": SUBSCRIPTION, "variables": variables}}))  # fmt: skip
        while True:
            message = await _receive(ws)
            kind = message.get("type")
            if kind == "complete":
                return True
            if kind == "error":
                raise WatchError(describe_errors(message.get("payload") or []))
            if kind == "next":
                payload = message.get("payload") or {}
                if payload.get("errors"):
                    raise WatchError(describe_errors(payload["errors"]))
                event = payload["data"]["runTree"]
                state.apply(event)
                view.event(event, state)


async def watch(*, url: str, token: str, run_id: str, after_seq: int, as_json: bool) -> int:
    http_url, ws_url = endpoints(url)
    state = await load_tree(http_url, token, run_global_id(run_id))
    state.last_seq = after_seq
    view: Any = JsonView() if as_json else LiveView(state)
    failures = 0
    with view:
        while True:
            try:
                if await _stream(ws_url, token, state, state.last_seq, view):
                    view.done(state)
                    return 0
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                if code in _REFUSED:
                    reason = exc.rcvd.reason if exc.rcvd is not None else ""
                    raise WatchError(f"{_REFUSED[code]} ({code}{': ' + reason if reason else ''})") from None
            except InvalidStatus as exc:
                raise WatchError(f"{ws_url} refused the websocket ({exc.response.status_code})") from None
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                if failures == 0 and state.last_seq == after_seq:
                    raise WatchError(f"cannot reach the Enverif API at {ws_url}: {exc}") from None
            failures += 1
            if failures > MAX_RECONNECTS:
                raise WatchError(f"lost the connection to {ws_url} and could not get it back")
            view.note(f"connection lost; resuming after seq {state.last_seq}")
            await asyncio.sleep(min(failures, 5))


class JsonView:
    """One event per line on stdout, flushed: ``enverif runs watch --json | jq``."""

    def __enter__(self) -> JsonView:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def event(self, event: dict[str, Any], state: TreeState) -> None:
        print(json.dumps(event, separators=(",", ":")), flush=True)

    def note(self, text: str) -> None:
        print(f"enverif: {text}", file=sys.stderr, flush=True)

    def done(self, state: TreeState) -> None:
        return None
