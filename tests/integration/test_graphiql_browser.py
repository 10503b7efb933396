"""GraphiQL offline, in a real headless browser (issue 11): Debian's chromium driven by
playwright against a real uvicorn server, a real worker and the real database and Redis.

The browser may talk to loopback only. Every request the page makes goes through a route
that aborts (and records) anything not for 127.0.0.1, and chromium is told to resolve no
other host at all; the test asserts nothing was attempted. So the page loading, a query
returning data and a subscription showing live events prove the page needs no network.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.settings import Settings
from tests.support.runs import DECIDE, PENDING_APPROVALS, scripted_agent, start_run, wait_run
from tests.support.servers import serve

CHROMIUM = "/usr/bin/chromium"
LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}
# Chromium's own background traffic (updates, safe browsing, sync) is switched off, and any
# host but 127.0.0.1 resolves to nothing, whatever the page asks for.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
TIMEOUT_MS = 30_000

TREE = "subscription($root: ID!) { runTree(rootRunId: $root) { seq type runId status stepId } }"


def _chromium() -> str:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: the GraphiQL browser test needs Debian's chromium "
            "(apt-get install chromium); playwright drives it, nothing is downloaded"
        )
    return CHROMIUM


@pytest.fixture
async def graphiql_url(settings: Settings) -> AsyncIterator[str]:
    from app.main import create_app

    app = create_app(settings.model_copy(update={"graphiql": True}))
    async with serve(app, lifespan="on") as base_url:
        yield f"{base_url}/graphql"


class Page:
    """The GraphiQL page in chromium, with its off-loopback traffic refused and recorded."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.refused: list[str] = []
        self.sockets: list[str] = []
        self.errors: list[str] = []
        # What the page's Content-Security-Policy refused: must stay empty while it works.
        self.csp: list[str] = []

    async def attach(self) -> None:
        async def guard(route: Any) -> None:
            host = urlsplit(route.request.url).hostname or ""
            if route.request.url.startswith(("data:", "blob:")) or host in LOOPBACK:
                await route.continue_()
            else:
                self.refused.append(route.request.url)
                await route.abort()

        await self.page.route("**/*", guard)
        self.page.on("websocket", lambda ws: self.sockets.append(ws.url))
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on(
            "console",
            lambda msg: self.csp.append(msg.text) if "Content Security Policy" in msg.text else None,
        )

    async def set_token(self, token: str) -> None:
        await self.page.fill("#enverif-token", token)
        await self.page.click("#enverif-token-save")
        await self.page.wait_for_function(
            "t => document.getElementById('enverif-token-state').textContent.endsWith(t)", arg=token[-4:]
        )

    async def run(self, query: str, variables: str = "") -> None:
        await self.page.evaluate(
            """([query, variables]) => {
                 document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.setValue(query);
                 const vars = document.querySelector('.graphiql-editor-tool .CodeMirror');
                 if (vars) vars.CodeMirror.setValue(variables);
               }""",
            [query, variables],
        )
        # GraphiQL sends an operation over the websocket when the document it parsed from the
        # editor (a moment after an edit, as when typing) says it is a subscription: wait for
        # that parse, as a person's click would come after it.
        kind = "subscription" if query.lstrip().startswith("subscription") else "query"
        await self.page.wait_for_function(
            """([query, kind]) => {
                 const cm = document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror;
                 return cm.getValue() === query && cm.operations && cm.operations.length === 1
                   && cm.operations[0].operation === kind;
               }""",
            arg=[query, kind],
        )
        await self.page.click(".graphiql-execute-button")

    async def response_containing(self, *needles: str) -> str:
        """The response pane's text, once it contains every needle."""
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        text = ""
        while time.monotonic() < deadline:
            text = await self.page.evaluate(
                "() => document.querySelector('.graphiql-response .CodeMirror').CodeMirror.getValue()"
            )
            if all(n in text for n in needles):
                return str(text)
            await asyncio.sleep(0.1)
        raise AssertionError(f"the response pane never showed {needles}: {text!r}")


@pytest.fixture
async def browser_page() -> AsyncIterator[Page]:
    from playwright.async_api import async_playwright

    executable = _chromium()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context()
            context.set_default_timeout(TIMEOUT_MS)
            page = Page(await context.new_page())
            await page.attach()
            yield page
        finally:
            await browser.close()


async def test_graphiql_runs_a_query_and_a_live_subscription_without_network(
    graphiql_url, browser_page, gql, workspace, worker
) -> None:
    page = browser_page
    agent = await scripted_agent(
        gql,
        workspace.admin,
        steps=[{"call": "http.get", "args": {"url": "http://127.0.0.1:9/never"}}, {"final": "done"}],
        policy={"rules": [{"tool": "http.get", "decision": "REQUIRE_APPROVAL"}]},
    )
    run_id = await start_run(gql, workspace.operator, agent)
    await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")

    response = await page.page.goto(graphiql_url, wait_until="load")
    assert response is not None and response.status == 200
    await page.page.wait_for_selector(".graphiql-execute-button")
    await page.set_token(workspace.viewer)

    # A query over HTTP, with the token from the bar as its Authorization header.
    await page.run("{ viewer { role workspace { name } } }")
    await page.response_containing('"role": "viewer"', workspace.name)

    # A subscription over the websocket (token in connection_init): the replay, then a live
    # event written after it started (the run resumes once its approval is decided).
    await page.run(TREE, f'{{"root": "{run_id}"}}')
    await page.response_containing('"runTree"', '"WAITING_APPROVAL"')
    pending = await gql.ok(PENDING_APPROVALS, token=workspace.viewer)
    approval = next(
        e["node"]["id"] for e in pending["approvals"]["edges"] if e["node"]["run"]["id"] == run_id
    )
    await gql.ok(DECIDE, {"id": approval, "approve": False, "reason": "no"}, token=workspace.operator)
    await page.response_containing('"RUN_STATUS_CHANGED"', '"SUCCEEDED"')

    assert page.refused == [], f"the page tried to leave loopback: {page.refused}"
    assert page.sockets and all(urlsplit(u).hostname in LOOPBACK for u in page.sockets), page.sockets
    assert page.errors == [], page.errors
    assert page.csp == [], f"the page's CSP refused what it needs: {page.csp}"


@pytest.mark.parametrize("accept", [False, True])
async def test_a_token_in_the_link_is_used_only_once_the_user_agrees(
    graphiql_url, browser_page, workspace, accept: bool
) -> None:
    page = browser_page
    asked: list[str] = []

    async def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        await (dialog.accept() if accept else dialog.dismiss())

    page.page.on("dialog", answer)
    await page.page.goto(f"{graphiql_url}#token={workspace.viewer}", wait_until="load")
    await page.page.wait_for_selector(".graphiql-execute-button")
    assert len(asked) == 1 and workspace.viewer[:8] in asked[0] and workspace.viewer not in asked[0]
    assert "#token" not in page.page.url  # dropped from the address bar either way
    stored = await page.page.evaluate("() => window.localStorage.getItem('enverif.token')")
    assert stored == (workspace.viewer if accept else None)
    state = await page.page.text_content("#enverif-token-state")
    assert (state or "").endswith(workspace.viewer[-4:]) is accept
    assert page.csp == [] and page.errors == []


async def test_graphiql_assets_are_served_with_their_recorded_integrity(graphiql_url) -> None:
    import httpx

    from app.graphql import graphiql_page

    base = graphiql_url.removesuffix("/graphql")
    async with httpx.AsyncClient() as client:
        page = await client.get(graphiql_url, headers={"Accept": "text/html"})
        assert page.status_code == 200 and "Enverif GraphiQL" in page.text
        # The console's headers: only this origin's scripts (and the page's own inline one,
        # by hash), connections to this origin, and no framing by another page.
        csp = page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "connect-src 'self'" in csp
        assert "script-src 'self' 'sha256-" in csp and "unsafe-eval" not in csp
        assert page.headers["x-frame-options"] == "DENY"
        assert "https://" not in page.text and "unpkg" not in page.text
        for name, entry in graphiql_page.manifest().items():
            assert f'integrity="{entry["sha384"]}"' in page.text
            served = await client.get(f"{base}/graphiql/{name}")
            assert served.status_code == 200
            assert graphiql_page.sha384(served.content) == entry["sha384"], name
        assert (await client.get(f"{base}/graphiql/manifest.json")).status_code == 404
        assert (await client.get(f"{base}/graphiql/..%2Fview.py")).status_code == 404
