"""``approvalWebhook``: every requested approval POSTed to the workspace's URL, signed
``X-Enverif-Signature: sha256=<HMAC of the body>`` with the secret in the environment
variable it names, through the guarded HTTP client (app/engine/net.py), retried with backoff
(docs/concepts/approvals.md).

A notification is written with its approval request (``TreeTx.request_approval``), so none
is lost. The process that requested the approval sends it right after that transaction
commits (``deliver_requested``, a background task: an operator hears of a waiting call at
once, not one sweep interval later); the sweeper sends the due ones (``deliver_due``): the
retries, with backoff, and any whose first send never happened (the process died first). Each
is claimed first by a conditional UPDATE that pushes its ``next_at`` ahead, so the requesting
process and the sweepers never send one attempt twice.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import select, update

from app.db.clock import db_now
from app.db.orm import Approval, ApprovalNotification, Workspace
from app.domain.agents import Role
from app.domain.approvals import NotificationStatus, after_attempt, check_webhook, signature
from app.domain.global_ids import object_id, to_global_id
from app.engine.net import URLRefused, guarded_client
from app.services import audit
from app.services.auth import Principal
from app.services.runtime import Runtime

log = logging.getLogger(__name__)

BATCH = 100
# How long a claimed notification is left alone by other sweepers while being sent.
CLAIM_S = 60
USER_AGENT = "enverif-webhooks/0.1"


async def set_approval_webhook(
    rt: Runtime, principal: Principal, *, url: str | None, secret_env: str | None
) -> Workspace:
    """Set (or, with no url, clear) the workspace's approvalWebhook. Audited."""
    principal.require(Role.ADMIN)
    hook: dict[str, str] | None = None
    if url is not None or secret_env is not None:
        checked_url, checked_env = check_webhook(url or "", secret_env or "")
        hook = {"url": checked_url, "secretEnv": checked_env}
    async with rt.sessionmaker() as session, session.begin():
        workspace = await session.scalar(
            select(Workspace).where(Workspace.id == principal.workspace_id).with_for_update()
        )
        assert workspace is not None
        before, workspace.approval_webhook = workspace.approval_webhook, hook
        await audit.append(
            session, workspace_id=workspace.id, actor=principal.actor, action="workspace.approval_webhook",
            object_type="Workspace", object_id=workspace.id,
            summary="set the approval webhook" if hook else "removed the approval webhook",
            diff={"approvalWebhook": {"before": before, "after": hook}},
        )  # fmt: skip
    return workspace


def body_of(approval: Approval) -> bytes:
    """What is POSTed: the approval as a client would read it, with global ids."""
    doc: dict[str, Any] = {
        "type": "APPROVAL_REQUESTED",
        "approval": {
            "id": to_global_id("Approval", approval.id),
            "runId": to_global_id("Run", approval.run_id),
            "tool": approval.tool,
            "arguments": approval.arguments,
            "status": approval.status,
            "requestedAt": approval.requested_at.isoformat(),
            "expiresAt": None if approval.expires_at is None else approval.expires_at.isoformat(),
        },
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


async def deliver_due(rt: Runtime, now: datetime) -> int:
    """Send the notifications due at ``now`` (the database's clock); returns how many went
    out (delivered or not)."""
    async with rt.read_sessionmaker() as session:
        due = list(
            await session.scalars(
                select(ApprovalNotification.id)
                .where(ApprovalNotification.status == NotificationStatus.PENDING.value,
                       ApprovalNotification.next_at <= now)
                .order_by(ApprovalNotification.next_at)
                .limit(BATCH)
            )
        )  # fmt: skip
    return await _deliver(rt, due, now)


async def deliver_requested(rt: Runtime, approval_ids: list[int]) -> None:
    """First attempt at the notifications of approvals just requested (after their commit).
    Run as a background task of the requesting process: it never raises, since whatever it
    did not send stays PENDING and due, for the sweeper."""
    try:
        async with rt.read_sessionmaker() as session:
            now = await db_now(session)
            due = list(
                await session.scalars(
                    select(ApprovalNotification.id)
                    .where(ApprovalNotification.approval_id.in_(approval_ids),
                           ApprovalNotification.status == NotificationStatus.PENDING.value)
                    .order_by(ApprovalNotification.id)
                )
            )  # fmt: skip
        await _deliver(rt, due, now)
    except Exception:
        log.warning("approval webhook: first delivery for approvals %s failed; the sweeper retries",
                    approval_ids, exc_info=True)  # fmt: skip


async def _deliver(rt: Runtime, notification_ids: list[int], now: datetime) -> int:
    if not notification_ids:
        return 0
    sent = 0
    async with guarded_client(
        rt.settings, timeout_s=rt.settings.http_timeout_s, user_agent=USER_AGENT
    ) as client:
        for notification_id in notification_ids:
            if await _send(rt, client, notification_id, now):
                sent += 1
    return sent


async def _send(rt: Runtime, client: httpx.AsyncClient, notification_id: int, now: datetime) -> bool:
    async with rt.sessionmaker() as session, session.begin():
        claimed = await session.execute(
            update(ApprovalNotification)
            .where(ApprovalNotification.id == notification_id,
                   ApprovalNotification.status == NotificationStatus.PENDING.value,
                   ApprovalNotification.next_at <= now)
            .values(next_at=now + timedelta(seconds=CLAIM_S))
        )  # fmt: skip
        if not claimed.rowcount:  # type: ignore[attr-defined]
            return False  # another process has it, or it is not due (a retry waits its backoff)
        notification = await session.get_one(ApprovalNotification, notification_id)
        approval = await session.get_one(Approval, notification.approval_id)
        body = body_of(approval)
    error = await _post(client, notification.url, notification.secret_env, body, notification_id)
    attempts = notification.attempts + 1
    status, delay_s = after_attempt(attempts, delivered=error is None)
    async with rt.sessionmaker() as session, session.begin():
        await session.execute(
            update(ApprovalNotification)
            .where(ApprovalNotification.id == notification_id)
            .values(status=status.value, attempts=attempts, last_attempt_at=now, last_error=error,
                    next_at=None if delay_s is None else now + timedelta(seconds=delay_s))
        )  # fmt: skip
    if error is not None:
        log.warning(
            "approval webhook: notification %s attempt %s failed: %s", notification_id, attempts, error
        )
    return True


async def _post(
    client: httpx.AsyncClient, url: str, secret_env: str, body: bytes, delivery: int
) -> str | None:
    """POST ``body``; None when the receiver took it (2xx), else why not (never the secret)."""
    secret = os.environ.get(secret_env)
    if not secret:
        return f"the environment variable {secret_env} is not set on the worker"
    headers = {
        "Content-Type": "application/json",
        "X-Enverif-Signature": signature(secret.encode(), body),
        "X-Enverif-Delivery": object_id("ApprovalNotification", delivery),
    }
    try:
        response = await client.post(url, content=body, headers=headers)
    except URLRefused as exc:
        return f"refused: {exc}"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}"
    if 200 <= response.status_code < 300:
        return None
    return f"HTTP {response.status_code}"
