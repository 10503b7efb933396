"""The npm packages of tests/js (pinned in its package-lock.json), installed with ``npm ci``
when any of them is missing. node and npm must be installed: without them the tests that
drive node clients fail (naming what to install) rather than skip."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

JS_DIR = Path(__file__).resolve().parents[1] / "js"


def ensure_js_packages() -> Path:
    """Install tests/js's packages if needed; returns the directory."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed for the node client tests (tests/js); install Node.js >= 18")
    wanted = json.loads((JS_DIR / "package.json").read_text())["dependencies"]
    if not all((JS_DIR / "node_modules" / name).is_dir() for name in wanted):
        result = subprocess.run(
            [npm, "ci", "--prefix", str(JS_DIR), "--no-audit", "--no-fund"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"npm ci --prefix {JS_DIR} failed:\n{result.stdout}\n{result.stderr}")
    return JS_DIR


def beside_js_packages(directory: Path, *programs: Path) -> Path:
    """Copies ``programs`` (the manual's examples, say) into ``directory`` beside tests/js's
    installed packages, as a reader who ran ``npm install`` next to them would have them; returns
    ``directory``. Node resolves a module's packages from where the module is, so the examples
    cannot run from docs/examples itself."""
    for program in programs:
        shutil.copy(program, directory / program.name)
    (directory / "node_modules").symlink_to(ensure_js_packages() / "node_modules")
    return directory
