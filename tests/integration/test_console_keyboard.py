"""The console's inbox, admin, schedules and connectors pages by keyboard alone, in a real
browser against a real server and worker (the ``console`` fixture of test_console.py; the MCP
server of test_mcp.py, on loopback): Tab reaches each control, Enter and Space work it, the
focus is visible, and after a mutation the focus is on its result (the page's result line) or
on its error (beside the control, with its code).
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from playwright.async_api import Locator, Page, expect

from app.domain.agents import Role
from app.graphql.schema import schema
from tests.integration import test_console
from tests.integration.test_console import Console
from tests.integration.test_console_inbox import webhook_agent
from tests.integration.test_mcp import crm_server

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


async def press_on(page: Page, target: Locator, key: str, *, back: bool = False) -> None:
    """Tab to ``target``, see that its focus is visible, and press ``key`` (Enter or Space) on it."""
    await tab_to(page, target, back=back)
    await focus_is_visible(target)
    await page.keyboard.press(key)


async def focused_on(line: Locator, text: str) -> None:
    """The mutation's outcome is said in ``line``, which has the focus."""
    await expect(line).to_have_text(text)
    await expect(line).to_be_focused()


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
    await press_on(inbox, summary, "Enter")
    editor = card.get_by_label("Arguments to run with (JSON)")
    await tab_to(inbox, editor)
    await inbox.keyboard.press("Control+A")
    await inbox.keyboard.type('{"url": 1}')
    send = card.get_by_role("button", name="Approve with these arguments")
    await press_on(inbox, send, " ")
    alert = card.get_by_role("alert")
    await expect(alert).to_contain_text("INVALID_ARGUMENTS")
    await expect(alert).to_be_focused()

    # Back to Approve, and Enter: the card goes, the focus is on what happened.
    approve = card.get_by_role("button", name="Approve", exact=True)
    await press_on(inbox, approve, "Enter", back=True)
    await expect(card).to_have_count(0)
    result = inbox.locator("#result")
    await focused_on(result, f"Approved: webhook.post of {name}.")
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
    await press_on(page, create, "Enter")
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
    await press_on(page, revoke, " ")
    await expect(row).to_contain_text("REVOKED")
    await focused_on(page.locator("#result"), f"Token {token_name} revoked.")

    # An agent's administration: pause it with Enter, the focus on what changed.
    name = await webhook_agent(console, admin)
    await page.goto(f"{console.url}/console#/agents/{await console.agent_id(name)}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text(f"Agent {name}")
    await every_button_is_named(page)
    pause = page.get_by_role("button", name="Pause agent")
    await press_on(page, pause, "Enter")
    await focused_on(page.locator("#result"), f"Agent {name} is PAUSED now.")
    await expect(page.get_by_role("button", name="Resume agent")).to_be_visible()
    await context.close()


async def test_an_agents_schedules_by_keyboard_alone(console: Console) -> None:
    admin = await console.token(Role.ADMIN)
    name = await webhook_agent(console, admin)
    context = await console.context()
    page = await console.signed_in(context, admin, f"#/agents/{await console.agent_id(name)}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text(f"Agent {name}")
    await every_button_is_named(page)
    form = page.get_by_role("form", name="Add a schedule")
    cron = form.get_by_label("Cron")
    add = form.get_by_role("button", name="Add schedule")

    # A bad cron, submitted with Enter from its box: refused, the focus on the refusal and its code.
    await tab_to(page, cron)
    await focus_is_visible(cron)
    await page.keyboard.type("not a cron")
    await page.keyboard.press("Enter")
    refusal = form.get_by_role("alert")
    await expect(refusal).to_contain_text("VALIDATION_FAILED")
    await expect(refusal).to_be_focused()

    # Back to the box, a good cron, Tab to the timezone, Tab on to the button and Space.
    await tab_to(page, cron, back=True)
    await page.keyboard.press("Control+A")
    await page.keyboard.type("0 9 * * 1")
    await page.keyboard.press("Tab")
    await expect(form.get_by_label("Timezone")).to_be_focused()
    await page.keyboard.press("Control+A")
    await page.keyboard.type("Europe/Berlin")
    await press_on(page, add, " ")
    result = page.locator("#result")
    await focused_on(result, "Schedule 0 9 * * 1 added.")
    row = page.locator("#schedules tr[data-schedule]")
    await expect(row).to_contain_text("Europe/Berlin")
    await expect(row.locator("ol.times li")).to_have_count(3)
    schedule_id = await row.get_attribute("data-schedule")

    # Pause it with Enter, resume it with Space: each time the focus is on what changed.
    pause = row.get_by_role("button", name="Pause schedule 0 9 * * 1")
    await press_on(page, pause, "Enter")
    await focused_on(result, "Schedule 0 9 * * 1 paused.")
    await expect(row).to_contain_text("no (paused)")
    resume = row.get_by_role("button", name="Resume schedule 0 9 * * 1")
    await press_on(page, resume, " ")
    await focused_on(result, "Schedule 0 9 * * 1 resumed.")
    await expect(row.locator("td").nth(2)).to_have_text("yes")
    await context.close()
    await console.graphql(admin, "mutation($id: ID!) { deleteSchedule(id: $id) }", {"id": schedule_id})


async def test_the_connectors_page_by_keyboard_alone(console: Console, tmp_path: Path) -> None:
    admin = await console.token(Role.ADMIN)
    context = await console.context()
    page = await console.signed_in(context, admin, "#/connectors")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Connectors (MCP servers)")
    await every_button_is_named(page)
    server = f"kbd_{uuid.uuid4().hex[:6]}"
    result = page.locator("#result")
    async with crm_server(tmp_path) as crm:
        # Register the test server (on loopback): type its name, Tab past the transport (the
        # default, streamable HTTP) to its URL, and submit with Enter from the URL box.
        form = page.get_by_role("form", name="Register an MCP server")
        await tab_to(page, form.get_by_label("Name", exact=True))
        await page.keyboard.type(server)
        await page.keyboard.press("Tab")
        await expect(form.get_by_label("Transport")).to_be_focused()
        await page.keyboard.press("Tab")
        await expect(form.get_by_label("URL (streamable HTTP)")).to_be_focused()
        await page.keyboard.type(f"http://127.0.0.1:{crm.port}/mcp")
        await page.keyboard.press("Enter")
        await expect(result).to_have_text(f"{server} registered.")
        await expect(result).to_be_focused()
        card = page.locator(f"article[data-server='{server}']")
        await expect(card.locator(f"tr[data-tool='mcp.{server}.search_companies']")).to_contain_text("READ")
        await every_button_is_named(page)

        # Sync with Enter, disable with Space, enable with Enter: the focus on the result each time.
        for button, key, said, state in (
            (f"Sync {server}", "Enter", "synced", "ENABLED"),
            (f"Disable {server}", " ", "disabled", "DISABLED"),
            (f"Enable {server}", "Enter", "enabled", "ENABLED"),
        ):
            control = card.get_by_role("button", name=button)
            await tab_to(page, control)
            await focus_is_visible(control)
            await page.keyboard.press(key)
            await expect(result).to_have_text(f"{server} {said}.")
            await expect(result).to_be_focused()
            await expect(card.get_by_role("heading", level=2)).to_contain_text(state)
        await expect(card).to_contain_text("Last synced")

        # And remove it, from the keyboard too.
        remove = card.get_by_role("button", name=f"Remove {server}")
        await tab_to(page, remove)
        await page.keyboard.press("Enter")
        await expect(result).to_have_text(f"{server} removed.")
        await expect(result).to_be_focused()
        await expect(card).to_have_count(0)
    await context.close()
