"""The console's inbox and admin pages by keyboard alone, in a real browser against a real
server and worker (the ``console`` fixture of test_console.py): Tab reaches each control,
Enter and Space work it, the focus is visible, and after a mutation the focus is on its
result (the page's result line) or on its error (beside the control, with its code).
"""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.async_api import Locator, Page, expect

from app.domain.agents import Role
from app.graphql.schema import schema
from tests.integration import test_console
from tests.integration.test_console import Console
from tests.integration.test_console_inbox import webhook_agent

pytestmark = pytest.mark.skipif(
    "approvalEvents" not in schema.as_str(), reason="the API has no approvalEvents subscription yet"
)
console = test_console.console  # the fixture: a real server, worker and browser

# Enough presses to cross a busy page (the demo workspace's pending approvals included).
MAX_TABS = 200


async def tab_to(page: Page, target: Locator, *, back: bool = False) -> None:
    """Press Tab (Shift+Tab with ``back``) until ``target`` has the focus."""
    for _ in range(MAX_TABS):
        if await target.evaluate("el => el === document.activeElement"):
            return
        await page.keyboard.press("Shift+Tab" if back else "Tab")
    raise AssertionError(f"Tab never reached {target}")


async def focus_is_visible(target: Locator) -> None:
    """The focused control draws an outline (the console's :focus-visible rule)."""
    await expect(target).to_be_focused()
    style = await target.evaluate(
        "el => { const s = getComputedStyle(el); return [s.outlineStyle, s.outlineWidth]; }"
    )
    assert style[0] != "none" and style[1] != "0px", style


async def every_button_is_named(page: Page) -> None:
    """No button is an icon only: each has words a screen reader can say (text or aria-label)."""
    names = await page.locator("button").evaluate_all(
        "bs => bs.map((b) => (b.getAttribute('aria-label') || b.textContent || '').trim())"
    )
    assert names and all(re.search(r"[A-Za-z]{2}", n) for n in names), names


async def test_the_inbox_by_keyboard_alone(console: Console) -> None:
    operator = await console.token(Role.OPERATOR)
    admin = await console.token(Role.ADMIN)
    name = await webhook_agent(console, admin)
    agent_id = await console.agent_id(name)
    await console.graphql(operator, "mutation($a: ID!) { startRun(agentId: $a) { id } }", {"a": agent_id})
    context = await console.context()
    inbox = await console.signed_in(context, operator, "#/approvals")
    card = inbox.locator("article[data-approval]").filter(has_text=name)
    await expect(card).to_be_visible()
    await every_button_is_named(inbox)

    # Open the editor with Enter, type a broken edit, send it with Space: the focus moves to
    # the error beside the control, which names its code.
    summary = card.locator("summary", has_text="Edit the arguments")
    await tab_to(inbox, summary)
    await focus_is_visible(summary)
    await inbox.keyboard.press("Enter")
    editor = card.get_by_label("Arguments to run with (JSON)")
    await tab_to(inbox, editor)
    await inbox.keyboard.press("Control+A")
    await inbox.keyboard.type('{"url": 1}')
    send = card.get_by_role("button", name="Approve with these arguments")
    await tab_to(inbox, send)
    await focus_is_visible(send)
    await inbox.keyboard.press(" ")
    alert = card.get_by_role("alert")
    await expect(alert).to_contain_text("INVALID_ARGUMENTS")
    await expect(alert).to_be_focused()

    # Back to Approve, and Enter: the card goes, the focus is on what happened.
    approve = card.get_by_role("button", name="Approve", exact=True)
    await tab_to(inbox, approve, back=True)
    await focus_is_visible(approve)
    await inbox.keyboard.press("Enter")
    await expect(card).to_have_count(0)
    result = inbox.locator("#result")
    await expect(result).to_have_text(f"Approved: webhook.post of {name}.")
    await expect(result).to_be_focused()
    await context.close()


async def test_the_admin_pages_by_keyboard_alone(console: Console) -> None:
    admin = await console.token(Role.ADMIN)
    context = await console.context()
    page = await console.signed_in(context, admin, "#/tokens")
    await expect(page.get_by_role("heading", level=1)).to_have_text("API tokens")
    await every_button_is_named(page)

    # Create a token: type its name, pick a role with the arrow keys, submit with Enter; the
    # focus lands on the new secret (shown once), ready to copy.
    form = page.get_by_role("form", name="Create a token")
    token_name = f"kbd-{uuid.uuid4().hex[:6]}"
    await tab_to(page, form.get_by_label("Name"))
    await page.keyboard.type(token_name)
    await page.keyboard.press("Tab")
    await expect(form.get_by_label("Role")).to_be_focused()
    await page.keyboard.press("ArrowDown")
    await expect(form.get_by_label("Role")).to_have_value("operator")
    create = form.get_by_role("button", name="Create token")
    await tab_to(page, create)
    await focus_is_visible(create)
    await page.keyboard.press("Enter")
    await expect(page.locator("#new-token-value")).to_be_focused()
    row = page.locator(f"tr[data-token='{token_name}']")
    await expect(row).to_contain_text("operator")

    # The same name again: refused, and the focus is on the refusal with its code.
    await tab_to(page, form.get_by_label("Name"))
    await page.keyboard.type(token_name)
    await tab_to(page, create)
    await page.keyboard.press("Enter")
    refusal = form.get_by_role("alert")
    await expect(refusal).to_contain_text("CONFLICT")
    await expect(refusal).to_be_focused()

    # Revoke with Space: the row is redrawn, the focus is on the result.
    revoke = row.get_by_role("button", name=f"Revoke {token_name}")
    await tab_to(page, revoke)
    await focus_is_visible(revoke)
    await page.keyboard.press(" ")
    await expect(row).to_contain_text("REVOKED")
    await expect(page.locator("#result")).to_have_text(f"Token {token_name} revoked.")
    await expect(page.locator("#result")).to_be_focused()

    # An agent's administration: pause it with Enter, the focus on what changed.
    name = await webhook_agent(console, admin)
    await page.goto(f"{console.url}/console#/agents/{await console.agent_id(name)}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text(f"Agent {name}")
    await every_button_is_named(page)
    pause = page.get_by_role("button", name="Pause agent")
    await tab_to(page, pause)
    await focus_is_visible(pause)
    await page.keyboard.press("Enter")
    await expect(page.locator("#result")).to_have_text(f"Agent {name} is PAUSED now.")
    await expect(page.locator("#result")).to_be_focused()
    await expect(page.get_by_role("button", name="Resume agent")).to_be_visible()
    await context.close()
