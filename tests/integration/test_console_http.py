"""``/console`` over HTTP: the page and its assets come from the API itself, under a
Content-Security-Policy that allows only this origin."""

from __future__ import annotations

from typing import Any

CSP_PARTS = ("default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'")


async def test_the_console_page_and_its_assets_are_served_with_a_strict_policy(client: Any) -> None:
    page = await client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/console/assets/js/app.js">' in page.text
    for response in (
        page,
        await client.get("/console/assets/js/app.js"),
        await client.get("/console/assets/console.css"),
    ):
        assert response.status_code == 200
        csp = response.headers["content-security-policy"]
        assert all(part in csp for part in CSP_PARTS), csp
        assert response.headers["x-content-type-options"] == "nosniff"
    script = await client.get("/console/assets/js/app.js")
    assert script.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript")
    assert "import" in script.text


async def test_a_trailing_slash_redirects_and_unknown_or_escaping_paths_are_not_found(client: Any) -> None:
    response = await client.get("/console/", follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (308, "/console")
    assert (await client.get("/console/assets/js/nothing.js")).status_code == 404
    assert (await client.get("/console/assets/%2e%2e/__init__.py")).status_code == 404
