"""The console's assets are complete as shipped: every file under ``app/console/static`` is
package data (so an installed Enverif serves it), and every module and asset the page names
exists. No build step checks this for us."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "app" / "console" / "static"


def test_every_static_file_is_package_data() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "app.console"
    ]
    files = [p.relative_to(STATIC.parent).as_posix() for p in STATIC.rglob("*") if p.is_file()]
    assert files
    unshipped = [f for f in files if not any(fnmatch(f, g) and f.count("/") == g.count("/") for g in globs)]
    assert unshipped == [], f"add these to [tool.setuptools.package-data] in pyproject.toml: {unshipped}"


def test_the_page_names_only_assets_that_exist() -> None:
    html = (STATIC / "index.html").read_text()
    named = re.findall(r'(?:src|href)="(/console/assets/[^"]+)"', html)
    assert len(named) >= 2
    for url in named:
        assert (STATIC / url.removeprefix("/console/assets/")).is_file(), url
    # Nothing from another origin: the console works offline.
    assert not re.search(r'(?:src|href)="(?:https?:)?//', html)


def test_every_module_import_resolves_and_stays_small() -> None:
    for module in (STATIC / "js").glob("*.js"):
        source = module.read_text()
        for target in re.findall(r"^import .* from '([^']+)';$", source, flags=re.MULTILINE):
            assert target.startswith("./"), f"{module.name} imports {target}: only local modules"
            assert (module.parent / target).is_file(), f"{module.name} imports missing {target}"
        assert len(source.splitlines()) <= 300, f"{module.name} is over 300 lines: split it"
