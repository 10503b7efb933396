"""``enverif runs watch RUN_ID``: a run tree, live, in a terminal.

A client of the public API like any other: one GraphQL query over HTTP draws the tree as it
is (and turns a bad token, an unknown run or a server that does not answer into one clear
line), then the ``runTree`` subscription over graphql-transport-ws (the token in
``connection_init``'s payload) updates it in place until the server sends ``complete`` —
the root run is terminal and every event of the tree was delivered.

A lost stream is taken up again with ``afterSeq`` set to the last event printed, so nothing
is missed or repeated: after ``UNAVAILABLE`` (the server's database or Redis is away, the
answer the API documents as "resubscribe with afterSeq"), a dropped connection or a server
restart. ``reconnect.Reconnects`` decides how long to wait and when to give up.

``--json`` prints each event as one JSON object per line instead (for scripts).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from app.cli.watch.reconnect import Reconnects
from app.cli.watch.state import TERMINAL, TreeState
from app.cli.watch.view import JsonView, LiveView, View
from app.graphql.ids import parse_global_id, to_global_id

PROTOCOL = Subprotocol("graphql-transport-ws")
TIMEOUT_S = 10.0
UNAVAILABLE = "UNAVAILABLE"
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
OUTPUT = """
subscription Output($run: ID!) { runOutput(runId: $run) { runId stepSeq text done } }
"""
# Live output is followed for this many runs of a tree per connection (the server caps a
# connection's operations; the tree's own stream is one of them).
MAX_OUTPUT_RUNS = 10
OUTPUT_OP = "o:"


class WatchError(Exception):
    """An expected failure: its message is the whole story (printed as one line)."""


class StreamLost(Exception):
    """The stream broke off in a way that another try may mend (see the module docstring).
    ``reached``: the server answered at all (not so for a refused or timed-out connection)."""

    def __init__(self, why: str, *, retry_after_s: float = 0.0, reached: bool = True) -> None:
        super().__init__(why)
        self.why = why
        self.retry_after_s = retry_after_s
        self.reached = reached


@dataclass
class Attempt:
    """One connection's worth of stream: what it delivered, and since when it was subscribed."""

    delivered: int = 0
    subscribed_at: float | None = None

    def subscribed_s(self) -> float:
        return 0.0 if self.subscribed_at is None else time.monotonic() - self.subscribed_at


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


def describe_errors(errors: list[dict[str, Any]]) -> str:
    first = errors[0] if errors else {}
    code = (first.get("extensions") or {}).get("code")
    message = first.get("message") or "the server refused the request"
    if code == "UNAUTHENTICATED":
        return f"UNAUTHENTICATED: the token (--token or ENVERIF_TOKEN) was refused: {message}"
    return f"{code}: {message}" if code else message


def refusal(errors: list[dict[str, Any]]) -> Exception:
    """GraphQL errors as what they mean here: ``UNAVAILABLE`` is worth another try, the rest
    (a refused token, an unknown run) is the final answer."""
    for error in errors:
        extensions = error.get("extensions") or {}
        if extensions.get("code") == UNAVAILABLE:
            retry_after = extensions.get("retryAfter")
            return StreamLost(
                f"the server is unavailable ({describe_errors([error])})",
                retry_after_s=float(retry_after) if isinstance(retry_after, int | float) else 0.0,
            )
    return WatchError(describe_errors(errors))


async def load_tree(http_url: str, token: str, run_id: str) -> TreeState:
    """The tree as it is now, by one query; refusals become a ``WatchError``, an
    ``UNAVAILABLE`` a ``StreamLost``."""
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
        raise refusal(body["errors"])
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


async def _receive(ws: ClientConnection) -> dict[str, Any]:
    while True:
        message: dict[str, Any] = json.loads(await ws.recv())
        if message.get("type") == "ping":
            await ws.send(json.dumps({"type": "pong"}))
            continue
        return message


async def stream(ws_url: str, token: str, state: TreeState, view: View, attempt: Attempt) -> None:
    """Follow the subscription on one connection until the server sends ``complete``."""
    async with connect(ws_url, subprotocols=[PROTOCOL], open_timeout=TIMEOUT_S) as ws:
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        )
        ack = await asyncio.wait_for(_receive(ws), TIMEOUT_S)
        if ack.get("type") != "connection_ack":
            raise WatchError(f"the server did not acknowledge the connection: {ack}")
        variables = {"root": state.root_id, "after": state.last_seq}
        await ws.send(json.dumps({"id": "1", "type": "subscribe",
                                  "payload": {"query": SUBSCRIPTION, "variables": variables}}))  # fmt: skip
        attempt.subscribed_at = time.monotonic()
        following: set[str] = set()

        async def follow_output() -> None:
            """``runOutput`` of every live run of the tree (up to ``MAX_OUTPUT_RUNS``)."""
            for run in list(state.runs.values()):
                if (
                    run.id not in following
                    and run.status not in TERMINAL
                    and len(following) < MAX_OUTPUT_RUNS
                ):
                    following.add(run.id)
                    await ws.send(json.dumps({"id": OUTPUT_OP + run.id, "type": "subscribe",
                                              "payload": {"query": OUTPUT, "variables": {"run": run.id}}}))  # fmt: skip

        await follow_output()
        while True:
            message = await _receive(ws)
            kind = message.get("type")
            if str(message.get("id", "")).startswith(OUTPUT_OP):
                # Live output is a view: its end or its refusal never ends the watch.
                payload = message.get("payload") or {}
                if kind == "next" and not payload.get("errors"):
                    chunk = payload["data"]["runOutput"]
                    view.output(chunk["runId"], state.apply_output(chunk), state)
                continue
            if kind == "complete":
                return
            if kind == "error":
                raise refusal(message.get("payload") or [])
            if kind == "next":
                payload = message.get("payload") or {}
                if payload.get("errors"):
                    raise refusal(payload["errors"])
                event = payload["data"]["runTree"]
                if state.is_new(event):
                    state.apply(event)
                    view.event(event, state)
                    attempt.delivered += 1
                    await follow_output()


async def stream_once(ws_url: str, token: str, state: TreeState, view: View, attempt: Attempt) -> None:
    """``stream``, with what can go wrong on the wire sorted into final and worth retrying."""
    try:
        await stream(ws_url, token, state, view, attempt)
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        if code in _REFUSED:
            raise WatchError(f"{_REFUSED[code]} ({code}{': ' + reason if reason else ''})") from None
        # A server restart (1001, or no close frame at all), a subscriber closed for being
        # too slow (1013): the same subscription, resumed, picks up where this one stopped.
        raise StreamLost("connection lost") from None
    except InvalidStatus as exc:
        status = exc.response.status_code
        if status < 500:
            raise WatchError(f"{ws_url} refused the websocket ({status})") from None
        raise StreamLost(f"{ws_url} answered {status}") from None  # a proxy while the API restarts
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        raise StreamLost(
            f"cannot reach the Enverif API at {ws_url}: {exc or type(exc).__name__}", reached=False
        ) from None


async def watch(
    *, url: str, token: str, run_id: str, after_seq: int, as_json: bool, reconnects: Reconnects
) -> int:
    http_url, ws_url = endpoints(url)
    run_gid = run_global_id(run_id)
    note = JsonView().note
    while True:
        try:
            state = await load_tree(http_url, token, run_gid)
            break
        except StreamLost as lost:
            await _pause(reconnects, lost, Attempt(), note, run_gid, after_seq)
    state.last_seq = after_seq
    view: View = JsonView() if as_json else LiveView(state)
    connected_once = False
    with view:
        while True:
            attempt = Attempt()
            try:
                await stream_once(ws_url, token, state, view, attempt)
                view.done(state)
                return 0
            except StreamLost as lost:
                if not lost.reached and not connected_once:
                    # Never got through at all: a wrong URL, not an outage to wait out.
                    raise WatchError(lost.why) from None
                await _pause(reconnects, lost, attempt, view.note, run_gid, state.last_seq)
            finally:
                connected_once = connected_once or attempt.subscribed_at is not None


async def _pause(
    reconnects: Reconnects,
    lost: StreamLost,
    attempt: Attempt,
    note: Callable[[str], None],
    run_id: str,
    last_seq: int,
) -> None:
    progressed = reconnects.progressed(delivered=attempt.delivered, subscribed_s=attempt.subscribed_s())
    delay_s = reconnects.next_delay(progressed=progressed, retry_after_s=lost.retry_after_s)
    if delay_s is None:
        raise WatchError(
            f"{lost.why}; gave up after {reconnects.max_failures} tries in a row "
            f"(go on with `enverif runs watch {run_id} --after-seq {last_seq}`)"
        )
    tries = (
        f", {reconnects.failures} of {reconnects.max_failures} tries failed" if reconnects.failures else ""
    )
    note(f"{lost.why}; resuming after seq {last_seq} in {delay_s:.1f} s{tries}")
    await asyncio.sleep(delay_s)
