"""The approvals inbox on ``approvalEvents`` with every decision kind, in a real browser
against a real server and worker (the ``console`` fixture of test_console.py).

An admin starts a run, the inbox shows its approval within a second without a reload, the
admin edits the waiting call's arguments there and watches the run finish with the edited
call — all without GraphQL. These need the API's EDIT / RESPOND / scope decisions and the
``approvalEvents`` subscription; on an API without them the module is skipped (the older
inbox is covered by test_console.py).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from playwright.async_api import Page, expect

from app.domain.agents import Role
from app.graphql.schema import schema
from tests.integration import test_console
from tests.integration.test_console import Console, open_agent, screenshot

pytestmark = pytest.mark.skipif(
    "approvalEvents" not in schema.as_str(), reason="the API has no approvalEvents subscription yet"
)
console = test_console.console  # the fixture: a real server, worker and browser


async def webhook_agent(console: Console, token: str, steps: int = 1) -> str:
    """An agent whose model posts ``steps`` webhooks (each waiting for approval), then answers."""
    name = f"inbox-{uuid.uuid4().hex[:6]}"
    call = {
        "call": "webhook.post",
        "args": {"url": f"{console.url}/dev/webhook", "payload": {"lead": "original"}},
    }
    model = {"provider": "scripted", "steps": [*([call] * steps), {"final": "{{ results }}"}]}
    await console.graphql(
        token,
        "mutation($i: CreateAgentInput!) { createAgent(input: $i) { id } }",
        {"i": {"name": name, "model": model, "tools": ["webhook.post"]}},
    )
    return name


async def start_from_the_agent_page(page: Page, name: str) -> str:
    await open_agent(page, name)
    await page.get_by_role("button", name="Start run").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("run")
    return "#" + page.url.split("#", 1)[1]


async def run_status(console: Console, token: str, run_hash: str) -> str:
    data = await console.graphql(
        token, "query($id: ID!) { run(id: $id) { status } }", {"id": run_hash.rsplit("/", 1)[1]}
    )
    return str(data["run"]["status"])


async def test_an_edit_in_the_inbox_runs_the_call_with_the_edited_arguments(console: Console) -> None:
    admin = await console.token(Role.ADMIN)
    name = await webhook_agent(console, admin)
    context = await console.context()
    inbox = await console.signed_in(context, admin, "#/approvals")
    await expect(inbox.locator("#inbox-state")).to_contain_text("live")
    await inbox.evaluate("window.__sameDocument = true")

    page = await console.signed_in(context, admin)
    run_hash = await start_from_the_agent_page(page, name)
    deadline = time.monotonic() + 30
    while await run_status(console, admin, run_hash) != "WAITING_APPROVAL":
        assert time.monotonic() < deadline, "the run never waited for approval"
        await page.wait_for_timeout(20)
    seen_waiting = time.monotonic()
    card = inbox.locator("article[data-approval]").filter(has_text=name)
    # Within a second of the run waiting, on the event: a 2 s poll would miss this often.
    await expect(card).to_be_visible(timeout=1000)
    assert time.monotonic() - seen_waiting < 1.5
    assert await inbox.evaluate("window.__sameDocument === true"), "the inbox was reloaded"

    await card.get_by_text("Edit the arguments").click()
    editor = card.get_by_label("Arguments to run with (JSON)")
    await editor.fill("not json")
    await card.get_by_role("button", name="Approve with these arguments").click()
    await expect(card.get_by_role("alert")).to_contain_text("INVALID_JSON")
    # A built-in tool's schema (Query.tools) is shown, and an edit that does not fit it is
    # refused in the page: nothing is sent, the call still waits.
    await card.get_by_text("The tool's input schema").click()
    await expect(card.locator("details pre")).to_contain_text('"required"')
    await editor.fill(f'{{"url": "{console.url}/dev/webhook", "body": 1}}')
    await card.get_by_role("button", name="Approve with these arguments").click()
    alert = card.get_by_role("alert")
    await expect(alert).to_contain_text("/payload: is required")
    await expect(alert).to_contain_text("/body: is not an argument of this tool")
    await expect(alert).to_contain_text("INVALID_ARGUMENTS")
    assert await run_status(console, admin, run_hash) == "WAITING_APPROVAL"
    await screenshot(inbox, "console-inbox.png")
    await editor.fill(f'{{"url": "{console.url}/dev/webhook", "payload": {{"lead": "edited in the inbox"}}}}')
    await card.get_by_role("button", name="Approve with these arguments").click()
    await expect(card).to_have_count(0)

    await page.goto(f"{console.url}/console{run_hash}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("SUCCEEDED")
    await expect(page.locator("#steps")).to_contain_text("edited in the inbox")
    await context.close()


async def test_respond_reject_and_approve_for_the_run_from_the_inbox(console: Console) -> None:
    admin = await console.token(Role.ADMIN)
    context = await console.context()
    inbox = await console.signed_in(context, admin, "#/approvals")
    await expect(inbox.locator("#inbox-state")).to_contain_text("live")
    page = await console.signed_in(context, admin)

    async def waiting_card(name: str) -> Any:
        card = inbox.locator("article[data-approval]").filter(has_text=name)
        await expect(card).to_be_visible()
        return card

    # RESPOND: the tool does not run; the model's result is the response.
    name = await webhook_agent(console, admin)
    run_hash = await start_from_the_agent_page(page, name)
    card = await waiting_card(name)
    await card.get_by_text("Respond instead").click()
    await card.get_by_label("Response the model receives").fill('{"note": "posted by hand"}')
    await card.get_by_role("button", name="Send response").click()
    await expect(card).to_have_count(0)
    await page.goto(f"{console.url}/console{run_hash}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("SUCCEEDED")
    await expect(page.locator("#steps")).to_contain_text("posted by hand")

    # REJECT with a message: the reason reaches the model's result.
    name = await webhook_agent(console, admin)
    run_hash = await start_from_the_agent_page(page, name)
    card = await waiting_card(name)
    await card.get_by_label("Reason").fill("not this lead")
    await card.get_by_role("button", name="Reject").click()
    await expect(card).to_have_count(0)
    await page.goto(f"{console.url}/console{run_hash}")
    await expect(page.locator("#steps")).to_contain_text("not this lead")

    # Approve for this run: the second call of the tool in the same run does not ask again.
    name = await webhook_agent(console, admin, steps=2)
    run_hash = await start_from_the_agent_page(page, name)
    card = await waiting_card(name)
    await card.get_by_role("button", name="Approve for this run").click()
    await expect(card).to_have_count(0)
    await page.goto(f"{console.url}/console{run_hash}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("SUCCEEDED")
    await expect(page.locator("#steps tr[data-step]")).to_have_count(3)
    assert await inbox.locator("article[data-approval]").filter(has_text=name).count() == 0
    await context.close()
