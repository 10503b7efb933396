"""The console's admin pages and the run page's timeline, usage and live output, in a real
browser against a real server and worker (the ``console`` fixture of test_console.py: only
loopback is reachable). An admin creates an agent, edits it against a diff, pauses it, reads
its versions, schedules it, previews its policy, registers an MCP server and manages tokens —
without GraphQL; a viewer sees none of those controls; every page fits a tablet's width.
``ENVERIF_CONSOLE_SCREENSHOTS=DIR`` writes the screenshots of docs/console.md into DIR.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, expect

from app.domain.agents import Role
from app.domain.policy import PolicyLink, RiskClass, effective_decision, parse_policy
from tests.integration import test_console
from tests.integration.test_console import LAPTOP, TABLET, Console, open_agent, screenshot
from tests.integration.test_mcp import crm_server

console = test_console.console  # the fixture: a real server, worker and browser

AGENT_POLICY = """{"default": null, "rules": [{"tool": "webhook.*", "decision": "REQUIRE_APPROVAL"}]}"""


async def nav(page: Page, name: str) -> None:
    await page.get_by_role("navigation", name="Main").get_by_role("link", name=name).click()
    await expect(page.get_by_role("heading", level=1)).to_be_visible()


async def watch_first_showing(page: Page, facts: str) -> None:
    """Notes what the page shows as soon as the script that first drew ``facts`` in the
    agent's facts is done (before a click or a paint can come): the result line's text and
    the focused element's id. Read with ``first_showing``."""
    await page.evaluate(
        """(facts) => {
          const observer = new MutationObserver(() => {
            if (!document.querySelector('dl.facts')?.textContent.includes(facts)) return;
            observer.disconnect();
            setTimeout(() => {
              window.__firstShowing = [document.getElementById('result')?.textContent ?? null,
                document.activeElement?.id ?? null];
            });
          });
          observer.observe(document.getElementById('main'), { childList: true, subtree: true });
        }""",
        facts,
    )


async def first_showing(page: Page) -> Any:
    await page.wait_for_function("window.__firstShowing !== undefined")
    return await page.evaluate("window.__firstShowing")


async def fits_a_tablet(page: Page) -> None:
    await page.set_viewport_size(TABLET)
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), page.url


async def test_an_admin_creates_edits_pauses_and_schedules_an_agent_and_previews_its_policy(
    console: Console,
) -> None:
    admin = await console.token(Role.ADMIN)
    context = await console.context()
    page = await console.signed_in(context, admin)
    name = f"console-{uuid.uuid4().hex[:6]}"

    # Create, from the agents list.
    await nav(page, "Agents")
    create = page.get_by_role("form", name="Create an agent")
    await create.get_by_label("Name").fill(name)
    await create.get_by_label("Instructions").fill("Say hello.")
    await create.get_by_label("Policy (JSON)").fill(AGENT_POLICY)
    await create.get_by_role("button", name="Create agent").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(f"Agent {name}")
    await expect(page.locator("dl.facts")).to_contain_text("1 (new runs are pinned to it)")
    agent_hash = "#" + page.url.split("#", 1)[1]

    # A refusal is shown beside its control, with its code and field.
    await nav(page, "Agents")
    await create.get_by_label("Name").fill(name)
    await create.get_by_role("button", name="Create agent").click()
    await expect(create.get_by_role("alert")).to_contain_text("CONFLICT")

    # Edit: the diff against version 1 names exactly the changed fields; saving makes version 2.
    await open_agent(page, name)
    await page.get_by_text("Edit configuration").click()
    edit = page.get_by_role("form", name="Edit the agent")
    await edit.get_by_label("Instructions").fill("Say hello twice.")
    await edit.get_by_label(re.compile("^Budget")).fill('{"maxTurns": -1}')
    await edit.get_by_role("button", name="Review changes").click()
    diff = page.locator("#diff")
    await expect(diff.locator("tr[data-field]")).to_have_count(2)
    await expect(diff.locator("tr[data-field='instructions'] td.before")).to_contain_text('"Say hello."')
    await expect(diff.locator("tr[data-field='instructions'] td.after")).to_contain_text('"Say hello twice."')
    await diff.get_by_role("button", name="Save as version 2").click()
    await expect(page.locator("#edit-agent").get_by_role("alert")).to_contain_text("VALIDATION_FAILED")
    await expect(page.locator("#edit-agent").get_by_role("alert")).to_contain_text("budget")
    await edit.get_by_label(re.compile("^Budget")).fill('{"maxTurns": 7}')
    await edit.get_by_role("button", name="Review changes").click()
    await expect(diff.locator("tr[data-field='budget'] td.after")).to_contain_text('"maxTurns": 7')
    await screenshot(page, "console-agent-edit.png")
    # Keyboard only: the focus is on the save button once the diff is drawn.
    await expect(diff.get_by_role("button", name="Save as version 2")).to_be_focused()
    await watch_first_showing(page, "2 (new runs are pinned to it)")
    await page.keyboard.press("Enter")
    await expect(page.locator("dl.facts")).to_contain_text("2 (new runs are pinned to it)")
    await expect(page.locator("dl.facts")).to_contain_text('"maxTurns": 7')
    # The page is drawn settled: the moment it shows version 2 its result line says so and has
    # the focus. A result line still to come would scroll the page to the top between pressing
    # and releasing a click made then (CI's MariaDB leg lost this very click that way).
    assert await first_showing(page) == ["Saved as version 2.", "result"]
    await page.get_by_text("Version history (2)").click()
    await expect(page.locator("#versions li[data-version]")).to_have_count(2)

    # Pause and resume, from the keyboard.
    await page.get_by_role("button", name="Pause agent").focus()
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("PAUSED")
    # The page has settled (its result line says so, and has the focus) before the next click.
    await expect(page.locator("#result")).to_contain_text("is PAUSED now")
    await expect(page.locator("#result")).to_be_focused()
    await page.get_by_role("button", name="Resume agent").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("ACTIVE")

    # Schedule it: the next fire times as the server computes them; pause; a bad cron refused.
    form = page.get_by_role("form", name="Add a schedule")
    await form.get_by_label("Cron").fill("not a cron")
    await form.get_by_role("button", name="Add schedule").click()
    await expect(form.get_by_role("alert")).to_contain_text("VALIDATION_FAILED")
    await form.get_by_label("Cron").fill("0 9 * * 1")
    await form.get_by_label("Timezone").fill("Europe/Berlin")
    await form.get_by_role("button", name="Add schedule").click()
    row = page.locator("#schedules tr[data-schedule]")
    await expect(row.locator("ol.times li")).to_have_count(3)
    times = [await t.get_attribute("datetime") for t in await row.locator("ol.times time").all()]
    assert times == sorted(times) and len(set(times)) == 3, times
    await screenshot(page, "console-schedules.png")
    await row.get_by_role("button", name="Pause schedule 0 9 * * 1").click()
    await expect(page.locator("#schedules tr[data-schedule]")).to_contain_text("no (paused)")
    row = page.locator("#schedules tr[data-schedule]")
    await row.get_by_text("Edit", exact=True).click()
    edit_form = row.get_by_role("form", name="Edit schedule 0 9 * * 1")
    await edit_form.get_by_label("Cron").fill("15 10 * * 1")
    await edit_form.get_by_role("button", name="Save schedule").click()
    await expect(page.locator("#schedules tr[data-schedule]")).to_contain_text("15 10 * * 1")
    await expect(page.get_by_role("button", name="Resume schedule 15 10 * * 1")).to_be_visible()
    schedule_id = await page.locator("#schedules tr[data-schedule]").get_attribute("data-schedule")

    # The policy preview, along a path: this agent delegating to scout. The answer is what the
    # engine's own policy code says for the same chain.
    await nav(page, "Policies")
    preview = page.get_by_role("form", name="Preview a decision")
    await preview.get_by_label("Tool").fill("webhook.post")
    await preview.get_by_label("Root agent").select_option(label=name)
    await preview.get_by_role("button", name="Add a delegation level").click()
    await preview.get_by_label("Delegated to (level 1)").select_option(label="scout")
    await preview.get_by_role("button", name="Preview decision").click()
    chain = [await policy_link(console, admin, name), await policy_link(console, admin, "scout")]
    expected = effective_decision(chain, "webhook.post", RiskClass.EXTERNAL_WRITE)
    await expect(page.locator("#preview-reason")).to_have_text(f"Reason: {expected.reason}")
    await expect(page.locator("#preview-result .verdict")).to_contain_text(expected.decision.value)
    await screenshot(page, "console-policies.png")
    await preview.get_by_label("Tool").fill("no.such.tool")
    await preview.get_by_role("button", name="Preview decision").click()
    await expect(page.get_by_role("alert")).to_contain_text("VALIDATION_FAILED")

    for hash in ("#/agents", "#/policies", agent_hash):
        await page.goto(f"{console.url}/console{hash}")
        await expect(page.get_by_role("heading", level=1)).to_be_visible()
        await fits_a_tablet(page)
    await context.close()
    await console.graphql(admin, "mutation($id: ID!) { deleteSchedule(id: $id) }", {"id": schedule_id})


async def policy_link(console: Console, token: str, name: str) -> PolicyLink:
    data = await console.graphql(
        token,
        "query($n: String!) { agentByName(name: $n) { policy { default rules { tool decision } } } }",
        {"n": name},
    )
    policy = data["agentByName"]["policy"]
    return PolicyLink(name, parse_policy({"default": policy["default"], "rules": policy["rules"]}))


async def test_an_admin_registers_an_mcp_server_and_manages_tokens(console: Console, tmp_path: Path) -> None:
    admin = await console.token(Role.ADMIN)
    context = await console.context()
    page = await console.signed_in(context, admin)
    server = f"crm_{uuid.uuid4().hex[:6]}"
    async with crm_server(tmp_path) as crm:
        await nav(page, "Connectors")
        form = page.get_by_role("form", name="Register an MCP server")
        await form.get_by_label("Name", exact=True).fill(server)
        await form.get_by_label("URL (streamable HTTP)").fill(f"http://127.0.0.1:{crm.port}/mcp")
        await refused_then_accepted(
            form, "Headers", "Register server", '{"Authorization": "NOT_ALLOWED_ENV"}', "{}"
        )
        card = page.locator(f"article[data-server='{server}']")
        await expect(card.locator(f"tr[data-tool='mcp.{server}.search_companies']")).to_contain_text("READ")
        await expect(card.locator(f"tr[data-tool='mcp.{server}.create_lead']")).to_contain_text("DESTRUCTIVE")
        await screenshot(page, "console-connectors.png")
        await fits_a_tablet(page)
        await page.set_viewport_size(LAPTOP)
        # An override of what the annotations say: create_lead treated as an external write.
        await card.get_by_text("Tool risk overrides").click()
        await refused_then_accepted(
            card,
            "Tool → risk class (JSON)",
            "Save overrides",
            '{"create_lead": "NOT_A_RISK"}',
            '{"create_lead": "EXTERNAL_WRITE"}',
        )
        card = page.locator(f"article[data-server='{server}']")
        await expect(card.locator(f"tr[data-tool='mcp.{server}.create_lead']")).to_contain_text(
            "EXTERNAL_WRITE"
        )
        await card.get_by_role("button", name=f"Sync {server}").click()
        await expect(page.locator(f"article[data-server='{server}']")).to_contain_text("Last synced")

        # An agent whose patterns name the server sees its tools on its page; the preview
        # decides an MCP tool by its annotations' risk.
        name = f"console-mcp-{uuid.uuid4().hex[:6]}"
        await console.graphql(
            admin,
            "mutation($i: CreateAgentInput!) { createAgent(input: $i) { id } }",
            {
                "i": {
                    "name": name,
                    "model": {"provider": "scripted", "steps": [{"final": "ok"}]},
                    "tools": [f"mcp.{server}.*"],
                }
            },
        )
        await open_agent(page, name)
        await expect(page.locator("#agent-mcp")).to_contain_text(f"mcp.{server}.create_lead")
        await nav(page, "Policies")
        preview = page.get_by_role("form", name="Preview a decision")
        await preview.get_by_label("Tool").fill(f"mcp.{server}.create_lead")
        await preview.get_by_label("Root agent").select_option(label=name)
        await preview.get_by_role("button", name="Preview decision").click()
        await expect(page.locator("#preview-result .verdict")).to_contain_text(
            "(EXTERNAL_WRITE): REQUIRE_APPROVAL"
        )
        await expect(page.locator("#preview-reason")).to_contain_text("risk default for EXTERNAL_WRITE")

        await nav(page, "Connectors")
        await page.get_by_role("button", name=f"Remove {server}").click()
        await expect(page.locator(f"article[data-server='{server}']")).to_have_count(0)

    # Tokens: the secret shown once; it works; last use shown; revoked, it stops working.
    await nav(page, "Tokens")
    token_name = f"console-made-{uuid.uuid4().hex[:6]}"
    form = page.get_by_role("form", name="Create a token")
    await form.get_by_label("Name", exact=True).fill(token_name)
    await form.get_by_label("Role").select_option("viewer")
    await form.get_by_role("button", name="Create token").click()
    secret = await page.get_by_label("New token").input_value()
    assert secret and len(secret) > 20
    assert (await viewer_query(console, secret)).get("data"), "the new token does not work"
    await fits_a_tablet(page)
    await page.set_viewport_size(LAPTOP)
    await nav(page, "Runs")
    await nav(page, "Tokens")
    assert await page.get_by_label("New token").count() == 0, "the secret is shown again"
    assert secret not in await page.content()
    row = page.locator(f"tr[data-token='{token_name}']")
    for _ in range(50):  # a token's use is recorded in the background
        if await row.locator(".last-used").inner_text() != "never":
            break
        await asyncio.sleep(0.2)
        await nav(page, "Runs")
        await nav(page, "Tokens")
    assert await row.locator(".last-used time").count() == 1
    await screenshot(page, "console-tokens.png")
    await row.get_by_role("button", name=f"Revoke {token_name}").click()
    await expect(page.locator(f"tr[data-token='{token_name}']")).to_contain_text("REVOKED")
    body = await viewer_query(console, secret)
    assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED", body
    await context.close()


async def refused_then_accepted(box: Any, label: str, button: str, bad: str, good: str) -> None:
    """A bad value is refused beside its control with VALIDATION_FAILED; the good one goes through."""
    await box.get_by_label(label).fill(bad)
    await box.get_by_role("button", name=button).click()
    await expect(box.get_by_role("alert")).to_contain_text("VALIDATION_FAILED")
    await box.get_by_label(label).fill(good)
    await box.get_by_role("button", name=button).click()


async def viewer_query(console: Console, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=console.url) as http:
        response = await http.post(
            "/graphql", json={"query": "{ viewer { role } }"}, headers={"Authorization": f"Bearer {token}"}
        )
    body: dict[str, Any] = response.json()
    return body


async def test_a_viewer_sees_no_admin_controls_but_can_preview(console: Console) -> None:
    viewer = await console.token(Role.VIEWER)
    context = await console.context()
    page = await console.signed_in(context, viewer)
    main_nav = page.get_by_role("navigation", name="Main")
    assert await main_nav.get_by_role("link", name="Tokens").count() == 0
    await nav(page, "Agents")
    assert await page.get_by_role("form", name="Create an agent").count() == 0
    await open_agent(page, "scout")
    await expect(page.locator("#agent-mcp")).to_be_visible()
    assert await page.locator("#admin").count() == 0
    assert await page.get_by_role("button", name=re.compile("(Pause|Archive|Resume) agent")).count() == 0
    assert await page.get_by_role("form", name="Add a schedule").count() == 0
    await nav(page, "Connectors")
    assert await page.get_by_role("form", name="Register an MCP server").count() == 0
    assert await page.get_by_role("button", name=re.compile("^(Sync|Remove|Disable) ")).count() == 0
    await page.goto(f"{console.url}/console#/tokens")
    await expect(page.get_by_role("heading", level=1)).to_have_text("API tokens")
    await expect(page.get_by_text("Only admins see and manage tokens.")).to_be_visible()
    # Reading is every role's: the preview changes nothing. Keyboard only: type the tool, pick
    # the root agent with the arrow keys, tab on to the button and press Enter.
    await nav(page, "Policies")
    preview = page.get_by_role("form", name="Preview a decision")
    await preview.get_by_label("Tool").focus()
    await page.keyboard.type("memory.forget")
    await page.keyboard.press("Tab")
    await expect(preview.get_by_label("Root agent")).to_be_focused()
    for _ in range(100):
        if await preview.get_by_label("Root agent").evaluate("s => s.selectedOptions[0].text") == "scout":
            break
        await page.keyboard.press("ArrowDown")
    for _ in range(3):
        await page.keyboard.press("Tab")
    await expect(preview.get_by_role("button", name="Preview decision")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#preview-result .verdict")).to_contain_text("(DESTRUCTIVE): REQUIRE_APPROVAL")
    await context.close()


async def test_the_run_page_shows_the_timeline_usage_budget_and_streams_the_output(console: Console) -> None:
    admin = await console.token(Role.ADMIN)
    final = " ".join(
        ["The answer, streamed to the console piece by piece while the turn is in progress."] * 3
    )
    model = {
        "provider": "scripted",
        "steps": [
            {
                "call": "webhook.post",
                "args": {"url": f"{console.url}/dev/webhook", "payload": {"hello": "console"}},
                "usage": {"input_tokens": 120, "output_tokens": 30},
            },
            {"final": final, "usage": {"input_tokens": 200, "output_tokens": 50}},
        ],
    }
    name = f"console-run-{uuid.uuid4().hex[:6]}"
    data = await console.graphql(
        admin,
        "mutation($i: CreateAgentInput!) { createAgent(input: $i) { id } }",
        {"i": {"name": name, "model": model, "tools": ["webhook.post"], "budget": {"maxTokens": 5000}}},
    )
    run = await console.graphql(
        admin, "mutation($a: ID!) { startRun(agentId: $a) { id } }", {"a": data["createAgent"]["id"]}
    )
    run_id = run["startRun"]["id"]
    context = await console.context()
    page = await console.signed_in(context, admin, f"#/runs/{run_id}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("WAITING_APPROVAL")
    timeline = page.locator("#timeline")
    await expect(timeline.locator("li[data-kind='queue']")).to_contain_text("waiting in the queue")
    await expect(timeline.locator("li[data-kind='approval']")).to_contain_text(
        "waiting for approval of webhook.post"
    )
    await expect(timeline.locator("li[data-kind='approval']")).to_contain_text("so far")
    await expect(page.locator("#usage tr[data-usage='inputTokens']")).to_contain_text("120")
    await expect(page.locator("#budget tr[data-limit='maxTokens']")).to_contain_text("5000")
    await expect(page.locator("#budget tr[data-limit='maxTokens']")).to_contain_text("4850")
    await expect(page.locator("#output-state")).to_be_visible()

    # Approved elsewhere: the final answer streams into this page, in pieces, without a reload.
    await page.evaluate("window.__sameDocument = true")
    pending = await console.graphql(
        admin, "query($id: ID!) { run(id: $id) { pendingApprovals { id } } }", {"id": run_id}
    )
    [approval] = pending["run"]["pendingApprovals"]
    await console.graphql(
        admin, "mutation($id: ID!) { decideApproval(id: $id, approve: true) { id } }", {"id": approval["id"]}
    )
    await expect(page.locator("#output")).to_have_text(final)
    await expect(page.get_by_role("heading", level=1)).to_contain_text("SUCCEEDED")
    assert await page.evaluate("window.__sameDocument === true")
    await expect(page.locator("#usage tr[data-usage='inputTokens']")).to_contain_text("320")
    await expect(timeline.locator("li[data-kind='approval']")).not_to_contain_text("so far")
    await expect(timeline.locator("li[data-kind='step']").first).to_contain_text("webhook.post")
    # Each model turn is a bar of its own, with its tokens, before the calls it asked for.
    turns = timeline.locator("li[data-kind='model']")
    await expect(turns).to_have_count(2)
    await expect(turns.nth(0)).to_contain_text("turn 1: the model, 120 in / 30 out tokens")
    await expect(turns.nth(1)).to_contain_text("turn 2: the model, 200 in / 50 out tokens")
    kinds = await timeline.locator("li").evaluate_all("items => items.map((li) => li.dataset.kind)")
    assert kinds.index("model") < kinds.index("approval") < kinds.index("step"), kinds
    await expect(page.locator("#steps tr[data-step='1']")).to_contain_text("turn used 120 in / 30 out tokens")
    await screenshot(page, "console-run-timeline.png")
    await fits_a_tablet(page)
    await page.set_viewport_size(LAPTOP)

    # From the run to the preview along its path: the same agents, ready to ask.
    await page.get_by_role("link", name="What would be decided along this path").click()
    preview = page.get_by_role("form", name="Preview a decision")
    await expect(preview.get_by_label("Root agent")).to_have_value(data["createAgent"]["id"])
    assert await preview.locator("select").count() == 1
    await preview.get_by_label("Tool").fill("webhook.post")
    await preview.get_by_role("button", name="Preview decision").click()
    await expect(page.locator("#preview-reason")).to_have_text(
        f"Reason: agent '{name}' risk default for EXTERNAL_WRITE -> REQUIRE_APPROVAL"
    )
    assert json.dumps(console.refused) == "[]"
    await context.close()
