"""The vendored GraphiQL files are the ones recorded: same bytes (sha384) as manifest.json,
the versions pinned in tools/graphiql/package.json, and a page that loads nothing else."""

from __future__ import annotations

import json
import re
from pathlib import Path

from app.graphql import graphiql_page

ROOT = Path(__file__).resolve().parents[2]


def test_every_vendored_file_matches_its_recorded_sha384() -> None:
    manifest = graphiql_page.manifest()
    assert manifest, "manifest.json lists no files"
    for name, entry in manifest.items():
        data = (ROOT / "app" / "graphql" / "graphiql" / name).read_bytes()
        assert graphiql_page.sha384(data) == entry["sha384"], f"{name} differs from manifest.json"


def test_vendored_versions_are_the_pinned_ones() -> None:
    pins = json.loads((ROOT / "tools" / "graphiql" / "package.json").read_text())["dependencies"]
    lock = json.loads((ROOT / "tools" / "graphiql" / "package-lock.json").read_text())["packages"]
    for entry in graphiql_page.manifest().values():
        assert pins[entry["package"]] == entry["version"], entry
        assert lock[f"node_modules/{entry['package']}"]["version"] == entry["version"], entry


def test_the_page_loads_only_vendored_assets_each_with_integrity() -> None:
    page = graphiql_page.page_html()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources, page
    assert all(s.startswith("graphiql/") or s.startswith("data:") for s in sources), sources
    for entry in graphiql_page.manifest().values():
        assert f'graphiql/{entry["file"]}" integrity="{entry["sha384"]}"' in page


def test_the_policy_allows_exactly_the_page_s_inline_script() -> None:
    import base64
    import hashlib

    (script,) = re.findall(r"<script>(.*?)</script>", graphiql_page.page_html(), re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = graphiql_page.page_headers()["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["script-src"] == f"'self' 'sha256-{digest}'"
    assert directives["frame-ancestors"] == "'none'" and directives["connect-src"] == "'self'"
    assert directives["default-src"] == "'none'"
    # The vendored code needs no eval: its one `new Function` is webpack's guarded fallback
    # for a missing globalThis.
    assert "unsafe-eval" not in csp


def test_a_token_from_the_link_is_stored_only_after_confirm() -> None:
    page = graphiql_page.page_html()
    block = page[page.index("if (fromHash) {") :]
    block = block[: block.index("\n      }\n")]
    assert block.index("window.confirm(") < block.index("localStorage.setItem")
    assert block.index("replaceState") < block.index("window.confirm(")  # gone from the URL first
