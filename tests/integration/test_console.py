"""The operator console in a real browser: Debian's chromium driven by playwright, against a
real uvicorn server (the dev-mode app, so the demo agents' /dev routes answer) and a real
``enverif worker`` process, on this session's database and Redis.

The browser may reach only loopback: every request to another host is aborted (and recorded,
so a test fails if the console ever asks for one), and chromium's resolver knows no name but
localhost. ``ENVERIF_CONSOLE_SCREENSHOTS=DIR`` writes the screenshots of docs/console.md into DIR.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, Route, async_playwright, expect

from app.clock import utcnow
from app.dev.demo import DEMO_WORKSPACE, seed_demo
from app.domain.agents import Role
from app.main import create_app
from app.services import auth
from tests.support.servers import serve
from tests.support.workers import spawn_worker

CHROMIUM = "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
SCREENSHOTS = os.environ.get("ENVERIF_CONSOLE_SCREENSHOTS")
LAPTOP = {"width": 1280, "height": 900}
TABLET = {"width": 768, "height": 1024}

pytestmark = pytest.mark.timeout(240)
# How long the "expired" case's token lives: long enough to sign in on a busy machine.
EXPIRY_S = 20
expect.set_options(timeout=30_000)


@dataclass
class Console:
    url: str
    sessionmaker: Any
    browser: Browser
    runtime: Any
    refused: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    async def token(self, role: Role) -> str:
        name = f"console-test-{role.value}-{uuid.uuid4().hex[:8]}"
        async with self.sessionmaker() as session:
            return await auth.create_token(session, workspace_name=DEMO_WORKSPACE, role=role, name=name)

    async def graphql(
        self, token: str, query: str, variables: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.url) as http:
            response = await http.post(
                "/graphql",
                json={"query": query, "variables": variables or {}},
                headers={"Authorization": f"Bearer {token}"},
            )
        body: dict[str, Any] = response.json()
        assert not body.get("errors"), body
        return body["data"]  # type: ignore[no-any-return]

    async def agent_id(self, name: str) -> str:
        data = await self.graphql(
            await self.token(Role.VIEWER), "{ agents(first: 100) { edges { node { id name } } } }"
        )
        [agent_id] = [e["node"]["id"] for e in data["agents"]["edges"] if e["node"]["name"] == name]
        return str(agent_id)

    async def context(self, viewport: dict[str, int] = LAPTOP) -> BrowserContext:
        context = await self.browser.new_context(viewport=viewport)
        await context.route("**/*", self._loopback_only)
        # What the pages said, for a failing test's report.
        context.on("console", lambda message: self.log.append(f"console {message.type}: {message.text}"))
        context.on("page", lambda page: page.on("framenavigated", lambda f: self.log.append(f"at {f.url}")))
        return context

    async def _loopback_only(self, route: Route) -> None:
        host = urlsplit(route.request.url).hostname or ""
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if loopback:
            await route.continue_()
        else:
            self.refused.append(route.request.url)
            await route.abort()

    async def signed_in(self, context: BrowserContext, token: str, hash: str = "#/runs") -> Page:
        page = await context.new_page()
        await page.goto(f"{self.url}/console{hash}")
        await page.get_by_label("API token").fill(token)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("navigation", name="Main")).to_be_visible()
        if hash != "#/runs":
            await page.goto(f"{self.url}/console{hash}")
        return page


@pytest.fixture
async def console(settings: Any, sessionmaker: Any, processes: list[Any]) -> AsyncIterator[Console]:
    if not HAVE_CHROMIUM:
        pytest.fail(f"{CHROMIUM} is missing: the console's browser tests need it (apt-get install chromium)")
    app = create_app(settings.model_copy(update={"dev_mode": True}))
    async with serve(app, lifespan="on") as url:
        await seed_demo(sessionmaker, base_url=url)
        processes.append(spawn_worker(settings))
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                # As root chromium needs --no-sandbox; the resolver rule keeps it off the network.
                args=[
                    "--no-sandbox",
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
                ],
            )
            console = Console(url=url, sessionmaker=sessionmaker, browser=browser, runtime=app.state.runtime)
            try:
                yield console
            finally:
                await browser.close()
                print("\n".join(console.log))  # pytest shows it when the test failed
        assert console.refused == [], f"the console asked for non-loopback URLs: {console.refused}"


async def open_agent(page: Page, name: str) -> None:
    await page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    await page.get_by_role("link", name=name, exact=True).click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(f"Agent {name}")


async def screenshot(page: Page, name: str) -> None:
    if SCREENSHOTS:
        # playwright creates the directory.
        await page.screenshot(path=str(Path(SCREENSHOTS) / name), full_page=True)


def tree_item(page: Page, agent: str) -> Any:
    return page.locator("#tree li").filter(has=page.get_by_role("link", name=agent, exact=True)).first


async def test_a_delegation_tree_grows_live_and_resumes_after_an_inbox_approval(console: Console) -> None:
    operator = await console.token(Role.OPERATOR)
    context = await console.context()
    page = await console.signed_in(context, operator)
    await open_agent(page, "research-director")
    await page.get_by_label("Run input (JSON)").fill('{"company": "acme.example"}')
    await page.get_by_role("button", name="Start run").click()
    await expect(page).to_have_url(re.compile(r"/console#/runs/.+"))
    root_url = page.url
    # A marker that a reload would wipe: the tree must update in this very document.
    await page.evaluate("window.__sameDocument = true")

    # The tree grows live to three levels; the grandchild waits for approval of its post.
    grandchild = page.locator("#tree ul ul li").filter(has_text="enricher")
    await expect(grandchild).to_contain_text("WAITING_APPROVAL")
    await expect(tree_item(page, "research-director")).to_contain_text("WAITING_CHILD")
    await expect(page.locator("#tree > li > ul > li").first).to_contain_text("lead-researcher")

    # The inbox, in a second tab: the tool, the exact arguments, the path root → … → run.
    inbox_page = await console.signed_in(context, operator, "#/approvals")
    card = (
        inbox_page.locator("article[data-approval]")
        .filter(has_text="research-director")
        .filter(has_text="webhook.post")
        .first
    )
    await expect(card.get_by_role("navigation", name="Run path")).to_have_text(
        re.compile(r"root: research-director\s*lead-researcher\s*enricher")
    )
    await expect(card.locator("pre[id^='args-']")).to_contain_text('"task": "Enrich acme.example"')
    # Keyboard only: type the reason, tab to Approve, press Enter.
    await card.get_by_label("Reason").fill("checked by the console test")
    await card.get_by_label("Reason").press("Tab")
    await inbox_page.keyboard.press("Enter")
    await expect(card).to_have_count(0)

    # The first tab: the whole tree resumes to SUCCEEDED, without a reload.
    for agent in ("research-director", "lead-researcher", "enricher"):
        await expect(tree_item(page, agent).locator(".status").first).to_have_text("SUCCEEDED")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("SUCCEEDED")
    assert await page.evaluate("window.__sameDocument === true"), "the run page was reloaded"
    # runTree sends complete once the tree has ended; the page says so and stops listening.
    await expect(page.locator("#live")).to_have_text("The tree has ended: the live stream is complete.")
    await expect(page.locator("#steps")).to_contain_text("agents.delegate")

    # Links both ways: grandchild → parent → root, and root → child.
    await tree_item(page, "enricher").get_by_role("link", name="enricher", exact=True).click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("enricher run")
    await expect(page.locator("#steps")).to_contain_text("approval APPROVED: checked by the console test")
    await expect(page.locator("#steps")).to_contain_text("REQUIRE_APPROVAL")
    await screenshot(page, "console-run.png")
    await page.get_by_role("link", name="lead-researcher (parent)").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("lead-researcher run")
    await page.get_by_role("link", name="research-director (root)").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("research-director run")
    assert page.url == root_url
    await page.get_by_role("link", name="lead-researcher (child)").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("lead-researcher run")

    # Tablet width: the page reflows instead of scrolling sideways.
    await page.set_viewport_size(TABLET)
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    await context.close()


async def test_an_operator_reviews_memory_and_a_credential_is_refused_with_its_rule(console: Console) -> None:
    operator = await console.token(Role.OPERATOR)
    context = await console.context()
    page = await console.signed_in(context, operator)
    await open_agent(page, "scout")
    key = f"console-{uuid.uuid4().hex[:6]}"
    new = page.get_by_role("form", name="Add a memory")
    await new.get_by_label("Key").fill(key)
    await new.get_by_label("Value").fill("Call ACME on Mondays")
    await new.get_by_label("Tags").fill("ops, accounts")
    await new.get_by_role("button", name="Add memory").click()
    card = page.locator(f"article[data-memory='{key}']")
    await expect(card).to_contain_text("Call ACME on Mondays")

    await card.get_by_role("button", name=f"Edit {key}").click()
    await card.get_by_label("Value").fill("Call ACME on Tuesdays")
    await card.get_by_role("button", name="Save changes").click()
    card = page.locator(f"article[data-memory='{key}']")
    await expect(card).to_contain_text("Call ACME on Tuesdays")
    await card.get_by_text("Revisions (2)").click()
    revisions = card.locator("details.revisions li")
    await expect(revisions.nth(0)).to_contain_text("CREATE")
    await expect(revisions.nth(0)).to_contain_text("by operator token")
    await expect(revisions.nth(1)).to_contain_text("UPDATE")
    await expect(revisions.nth(1)).to_contain_text('"Call ACME on Mondays" → "Call ACME on Tuesdays"')
    await screenshot(page, "console-agent.png")

    # The tag filter and the search find it; a tag it lacks does not.
    await page.get_by_label("Tags (all of)").fill("accounts")
    await page.get_by_role("button", name="Search", exact=True).click()
    await expect(page.locator("article[data-memory]")).to_have_count(1)
    await page.get_by_label("Tags (all of)").fill("nothing-has-this")
    await page.get_by_role("button", name="Search", exact=True).click()
    await expect(page.locator("#memories")).to_contain_text("No memories match.")
    await page.get_by_label("Tags (all of)").fill("")
    await page.get_by_label("Search", exact=True).fill("tuesdays")
    await page.get_by_role("button", name="Search", exact=True).click()
    await expect(page.locator(f"article[data-memory='{key}']")).to_be_visible()
    await page.get_by_label("Search", exact=True).fill("")
    await page.get_by_role("button", name="Search", exact=True).click()

    # A credential is refused: the rule and the code beside the form, never the value.
    secret = "abc123" + uuid.uuid4().hex[:6]
    await new.get_by_label("Key").fill("deploy-note")
    await new.get_by_label("Value").fill(f"deploy with token={secret}")
    await new.get_by_role("button", name="Add memory").click()
    alert = new.get_by_role("alert")
    await expect(alert).to_contain_text("CREDENTIAL_REJECTED")
    await expect(alert).to_contain_text("rule:")
    assert secret not in (await alert.inner_text())
    await expect(page.locator("article[data-memory='deploy-note']")).to_have_count(0)

    # A failed mutation shows message and code by its control, and nothing changes.
    await new.get_by_label("Key").fill(key)
    await new.get_by_label("Value").fill("a second memory under a taken key")
    await new.get_by_role("button", name="Add memory").click()
    await expect(alert).to_contain_text("CONFLICT")
    await expect(page.locator(f"article[data-memory='{key}']")).to_contain_text("Call ACME on Tuesdays")

    await card.get_by_role("button", name=f"Delete {key}").click()
    await card.get_by_role("button", name=f"Confirm: delete {key}").click()
    await expect(page.locator(f"article[data-memory='{key}']")).to_have_count(0)
    await context.close()


async def test_a_viewer_sees_no_approve_edit_or_cancel_controls(console: Console) -> None:
    operator = await console.token(Role.OPERATOR)
    viewer = await console.token(Role.VIEWER)
    context = await console.context()
    # A run waiting for approval, started by an operator.
    page = await console.signed_in(context, operator)
    await open_agent(page, "researcher")
    await page.get_by_role("button", name="Start run").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("WAITING_APPROVAL")
    run_hash = "#" + page.url.split("#", 1)[1]
    await context.close()

    context = await console.context()
    page = await console.signed_in(context, viewer, run_hash)
    await expect(page.get_by_role("heading", level=1)).to_contain_text("researcher run")
    await expect(page.locator("#steps")).to_contain_text("webhook.post")
    assert await page.get_by_role("button", name="Cancel run and its subtree").count() == 0
    await page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals").click()
    await expect(page.locator("article[data-approval]").first).to_contain_text("an operator decides them")
    assert await page.get_by_role("button", name="Approve").count() == 0
    assert await page.get_by_role("button", name="Reject").count() == 0
    cron = f"{uuid.uuid4().int % 60} 9 * * 1"
    created = await console.graphql(
        operator,
        'mutation($a: ID!, $c: String!) { createSchedule(agentId: $a, input: {cron: $c, timezone: "Europe/Berlin"}) { id } }',
        {"a": await console.agent_id("scout"), "c": cron},
    )
    await open_agent(page, "scout")
    await expect(page.locator("#memories article").first).to_be_visible()
    await expect(page.locator("#schedules")).to_contain_text(cron)
    await expect(page.locator("#schedules")).to_contain_text("Europe/Berlin")
    for name in ("Start run", "Add memory"):
        assert await page.get_by_role("button", name=name).count() == 0
    assert await page.get_by_role("button", name=re.compile("^(Edit|Delete) ")).count() == 0
    await context.close()
    # Nothing left to fire in later tests.
    schedule_id = created["createSchedule"]["id"]
    await console.graphql(operator, "mutation($id: ID!) { deleteSchedule(id: $id) }", {"id": schedule_id})

    # The operator cancels it, with a reason, from the run page.
    context = await console.context()
    page = await console.signed_in(context, operator, run_hash)
    await expect(page.get_by_role("heading", level=1)).to_contain_text("WAITING_APPROVAL")
    await page.get_by_label("Cancel reason").fill("not needed any more")
    await page.get_by_role("button", name="Cancel run and its subtree").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("CANCELLED")
    await expect(page.get_by_text("Cancel reason: not needed any more")).to_be_visible()
    assert await page.get_by_role("button", name="Cancel run and its subtree").count() == 0
    await context.close()


@pytest.mark.parametrize("how", ["revoked", "expired", "revoked while watching a live tree"])
async def test_a_token_that_stops_working_returns_to_sign_in_with_a_message(
    console: Console, how: str
) -> None:
    name = f"console-{uuid.uuid4().hex[:8]}"
    # An expiring token is made to expire for real: the API trusts a token's cached expiry.
    expires_at = utcnow() + timedelta(seconds=EXPIRY_S) if how == "expired" else None
    async with console.sessionmaker() as session:
        token = await auth.create_token(
            session, workspace_name=DEMO_WORKSPACE, role=Role.OPERATOR, name=name, expires_at=expires_at
        )
    context = await console.context()
    page = await console.signed_in(context, token)
    # The list has loaded (its paging buttons are drawn last): no request of it is in flight.
    await expect(page.get_by_role("button", name="Next page")).to_be_visible()
    watching = how.endswith("live tree")
    if watching:
        # A run that waits for approval: its page keeps the runTree websocket open.
        await open_agent(page, "researcher")
        await page.get_by_role("button", name="Start run").click()
        await expect(page.get_by_role("heading", level=1)).to_contain_text("WAITING_APPROVAL")
        await expect(page.locator("#live")).to_contain_text("Live: event")
    if expires_at is not None:
        assert utcnow() < expires_at, "signing in took longer than the token lived"
        await asyncio.sleep((expires_at - utcnow()).total_seconds() + 0.5)
    else:
        # As `enverif token revoke` does: revoke, then tell every API process's token cache.
        async with console.sessionmaker() as session:
            row = await auth.revoke_token(session, workspace_name=DEMO_WORKSPACE, name=name)
        await auth.announce_revocation(console.runtime, row.id)
    if not watching:
        # The next request finds out.
        await page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    # While watching, nothing is clicked: the API closes the socket and the page signs out.
    await expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    await expect(page.get_by_role("status")).to_contain_text("Signed out:")
    await expect(page.get_by_role("status")).to_contain_text("token")
    assert await page.evaluate("sessionStorage.getItem('enverif.token')") is None
    await context.close()
