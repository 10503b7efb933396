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
