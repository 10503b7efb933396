"""The vendor SDKs (``openai``, ``anthropic``) and the MCP SDK are imported when a model or an
MCP server is first asked, not when a process starts: together they cost seconds of CPU that
the API, every worker and every ``enverif`` command would otherwise pay before doing anything
(``app.engine.providers.remote.sdk``, ``app.engine.mcp_client.mcp_error``).

Each entry point is imported in a fresh interpreter, since this one has long imported them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SDKS = ("mcp", "openai", "anthropic")


@pytest.mark.parametrize("entry", ["app.main", "workers.main", "app.cli"])
def test_starting_a_process_imports_no_sdk(entry: str) -> None:
    probe = f"import sys, {entry}; print(' '.join(m for m in {SDKS!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "", f"importing {entry} imported {out.stdout.strip()}"
