"""``approvalWebhook``: every requested approval POSTed, HMAC-signed, through the guarded
client, retried with backoff, each delivery visible on the approval (docs/concepts/approvals.md).
A loopback receiver checks the signature the way a customer's would."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.approvals import RETRY_BASE_S
from tests.conftest import stop_worker
from tests.support.runs import scripted_agent, start_run
from tests.support.servers import serve

SECRET_ENV = "TEST_APPROVAL_HOOK_SECRET"
SECRET = "s3cret-for-the-receiver"
SET_HOOK = """
mutation($url: String, $secretEnv: String) {
  setApprovalWebhook(url: $url, secretEnv: $secretEnv) { id approvalWebhook { url secretEnv } }
}
"""
NOTIFICATIONS = """
query($id: ID!) {
  run(id: $id) { status pendingApprovals { id notifications { id at status attempts lastError nextAt } } }
}
"""


@dataclass
class Receiver:
    """Answers 500 to the first ``failures`` POSTs, then 204; keeps what it got."""

    failures: int
    got: list[tuple[float, dict[str, str], bytes]] = field(default_factory=list)

    async def hook(self, request: Request) -> Response:
        self.got.append((time.monotonic(), dict(request.headers), await request.body()))
        return Response(status_code=500 if len(self.got) <= self.failures else 204)


@asynccontextmanager
async def receiving(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The receiver served on loopback (its base URL), the workers holding its secret."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    async with serve(Starlette(routes=[Route("/hook", receiver.hook, methods=["POST"])])) as url:
        yield url


def verified(headers: dict[str, str], body: bytes) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("x-enverif-signature", ""), expected)


async def _notified(
    gql: Any, token: str, run_id: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The run once its first approval's first notification is ``done``."""
    deadline = time.monotonic() + 30
    while True:
        run: dict[str, Any] = (await gql.ok(NOTIFICATIONS, {"id": run_id}, token=token))["run"]
        notes = [n for a in run["pendingApprovals"] for n in a["notifications"]]
        if notes and done(notes[0]):
            return run
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.1)


async def test_a_requested_approval_is_posted_signed_and_retried_until_delivered(
    gql, workspace, worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver(failures=2)
    async with receiving(receiver, monkeypatch) as url:
        data = await gql.ok(SET_HOOK, {"url": url + "/hook", "secretEnv": SECRET_ENV}, token=workspace.admin)
        assert data["setApprovalWebhook"]["approvalWebhook"] == {
            "url": url + "/hook",
            "secretEnv": SECRET_ENV,
        }
        agent = await scripted_agent(
            gql, workspace.admin,
            steps=[{"call": "webhook.post", "args": {"url": url + "/elsewhere", "payload": {"n": 1}}}, {"final": "x"}],
        )  # fmt: skip
        run_id = await start_run(gql, workspace.operator, agent)
        run = await _notified(gql, workspace.viewer, run_id, lambda note: note["status"] == "DELIVERED")
    [approval] = run["pendingApprovals"]
    [note] = approval["notifications"]
    assert (note["status"], note["attempts"], note["nextAt"]) == ("DELIVERED", 3, None)
    assert len(receiver.got) == 3
    for _, headers, body in receiver.got:
        assert verified(headers, body), headers
        assert headers["x-enverif-delivery"] == note["id"]
        assert headers["content-type"] == "application/json"
    sent = json.loads(receiver.got[0][2])
    assert sent["type"] == "APPROVAL_REQUESTED"
    assert sent["approval"]["id"] == approval["id"] and sent["approval"]["runId"] == run_id
    assert sent["approval"]["arguments"] == {"url": url + "/elsewhere", "payload": {"n": 1}}
    # Backoff: the retries were spaced out, the second wait at least as long as the first.
    first, second, third = (t for t, _, _ in receiver.got)
    assert second - first >= RETRY_BASE_S * 0.9 and third - second >= (second - first) * 0.9
    # A tampered body does not verify.
    assert not verified(receiver.got[0][1], receiver.got[0][2] + b" ")


@pytest.mark.parametrize(
    ("variables", "field"),
    [
        ({"url": "ftp://127.0.0.1/x", "secretEnv": SECRET_ENV}, "url"),
        ({"url": "http://127.0.0.1:9/x", "secretEnv": "ENVERIF_DATABASE_URL"}, "secretEnv"),
        ({"url": "http://127.0.0.1:9/x", "secretEnv": "lower-case"}, "secretEnv"),
        ({"url": "http://127.0.0.1:9/x"}, "secretEnv"),
    ],
)
async def test_a_bad_webhook_is_refused(gql, workspace, variables: dict[str, Any], field: str) -> None:
    error = await gql.error(SET_HOOK, variables, token=workspace.admin)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}


async def test_only_admins_set_or_read_the_webhook(gql, workspace) -> None:
    variables = {"url": "http://127.0.0.1:9/hook", "secretEnv": SECRET_ENV}
    refused = await gql.error(SET_HOOK, variables, token=workspace.operator)
    assert refused["extensions"]["code"] == "FORBIDDEN"
    await gql.ok(SET_HOOK, variables, token=workspace.admin)
    read = "query { viewer { workspace { approvalWebhook { url } } } }"
    assert (await gql.error(read, token=workspace.viewer))["extensions"]["code"] == "FORBIDDEN"
    cleared = await gql.ok(SET_HOOK, {}, token=workspace.admin)
    assert cleared["setApprovalWebhook"]["approvalWebhook"] is None


@pytest.fixture
async def public_only_worker(settings) -> AsyncIterator[Any]:
    """A worker (and so its sweeper, which sends the notifications) of a deployment that
    does not allow private networks, as production does."""
    from workers.main import build_worker

    w = build_worker(settings.model_copy(update={"http_allow_private_networks": False}), handle_signals=False)
    task = asyncio.create_task(w.main())
    yield w
    await stop_worker(w, task)


@pytest.mark.usefixtures("public_only_worker")
async def test_a_webhook_that_resolves_to_a_private_address_is_refused_and_says_so(
    gql, workspace, stub_resolver: dict[str, list[str] | OSError], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name resolves (a stubbed resolver, nothing leaves the machine) to loopback, which
    is not public: the guarded client refuses it before any connection, and the approval's
    notification shows why."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    stub_resolver["hooks.localhost"] = ["127.0.0.1"]
    await gql.ok(
        SET_HOOK, {"url": "http://hooks.localhost:9/hook", "secretEnv": SECRET_ENV}, token=workspace.admin
    )
    agent = await scripted_agent(
        gql, workspace.admin,
        steps=[{"call": "webhook.post", "args": {"url": "http://127.0.0.1:9/x", "payload": {}}}, {"final": "x"}],
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, agent)
    run = await _notified(gql, workspace.viewer, run_id, lambda note: note["attempts"] >= 1)
    [note] = [n for a in run["pendingApprovals"] for n in a["notifications"]]
    assert note["status"] != "DELIVERED", note
    assert note["lastError"] == "refused: host 'hooks.localhost' resolves to non-public address 127.0.0.1", (
        note
    )


@pytest.fixture
async def unswept_worker(settings, runtime) -> AsyncIterator[Any]:
    """A worker whose sweeper sweeps once at its start and then not for an hour: whatever
    is delivered meanwhile was sent by the process that requested the approval."""
    from app.keys import sweeper_turn_key
    from workers.main import build_worker

    w = build_worker(settings.model_copy(update={"sweep_interval_s": 3600}), handle_signals=False)
    task = asyncio.create_task(w.main())
    yield w
    await stop_worker(w, task)
    # Its sweeper holds the turn for most of the hour: the next test's workers sweep again.
    await runtime.redis.delete(sweeper_turn_key(settings.redis_prefix))


async def _approval_hook_run(gql, workspace, url: str) -> str:
    await gql.ok(SET_HOOK, {"url": url + "/hook", "secretEnv": SECRET_ENV}, token=workspace.admin)
    agent = await scripted_agent(
        gql, workspace.admin,
        steps=[{"call": "webhook.post", "args": {"url": url + "/elsewhere", "payload": {}}}, {"final": "x"}],
    )  # fmt: skip
    return await start_run(gql, workspace.operator, agent)


@pytest.mark.usefixtures("unswept_worker")
async def test_a_requested_approval_is_posted_at_once_not_at_the_next_sweep(
    gql, workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver(failures=0)
    async with receiving(receiver, monkeypatch) as url:
        run_id = await _approval_hook_run(gql, workspace, url)
        run = await _notified(gql, workspace.viewer, run_id, lambda note: note["status"] == "DELIVERED")
        await asyncio.sleep(0.5)  # a second send would have come by now
    [note] = [n for a in run["pendingApprovals"] for n in a["notifications"]]
    assert (note["status"], note["attempts"]) == ("DELIVERED", 1)
    [(_, headers, body)] = receiver.got
    assert verified(headers, body) and headers["x-enverif-delivery"] == note["id"]


@pytest.mark.usefixtures("unswept_worker")
async def test_a_retry_due_to_several_senders_at_once_is_sent_once(
    gql, workspace, runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt fails; then two sweeps and a late first-delivery task all try the
    due retry at the same moment: the claim lets exactly one of them POST it."""
    from sqlalchemy import select

    from app.db.clock import db_now
    from app.db.orm import ApprovalNotification
    from app.services.approval_webhooks import deliver_due, deliver_requested

    receiver = Receiver(failures=1)
    async with receiving(receiver, monkeypatch) as url:
        run_id = await _approval_hook_run(gql, workspace, url)
        await _notified(gql, workspace.viewer, run_id, lambda note: note["attempts"] == 1)
        assert len(receiver.got) == 1
        async with runtime.read_sessionmaker() as session:
            row = await session.scalar(
                select(ApprovalNotification).where(ApprovalNotification.url == url + "/hook")
            )
            assert row is not None and row.next_at is not None
            later = max(await db_now(session), row.next_at) + timedelta(seconds=1)
        await asyncio.sleep(max(0.0, (row.next_at - datetime.now(UTC)).total_seconds()) + 0.2)
        await asyncio.gather(
            deliver_due(runtime, later),
            deliver_due(runtime, later),
            deliver_requested(runtime, [row.approval_id]),
        )
        run = await _notified(gql, workspace.viewer, run_id, lambda note: note["status"] == "DELIVERED")
    [note] = [n for a in run["pendingApprovals"] for n in a["notifications"]]
    assert (note["status"], note["attempts"]) == ("DELIVERED", 2)
    assert len(receiver.got) == 2


@pytest.mark.usefixtures("unswept_worker")
async def test_an_inbox_page_reads_its_notifications_in_one_query(
    gql, app, workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.integration.test_graphql_runs import count_statements

    receiver = Receiver(failures=0)
    async with receiving(receiver, monkeypatch) as url:
        runs = [await _approval_hook_run(gql, workspace, url) for _ in range(3)]
        for run_id in runs:
            await _notified(gql, workspace.viewer, run_id, lambda note: note["status"] == "DELIVERED")
    inbox = "query($n: Int) { approvals(status: PENDING, first: $n) { edges { node { id notifications { status } } } } }"
    counts = {}
    for n in (1, 3):
        with count_statements(app) as statements:
            data = await gql.ok(inbox, {"n": n}, token=workspace.viewer)
        assert [e["node"]["notifications"] for e in data["approvals"]["edges"]] == [
            [{"status": "DELIVERED"}]
        ] * n
        counts[n] = len([s for s in statements if "approval_notifications" in s])
    assert counts == {1: 1, 3: 1}
