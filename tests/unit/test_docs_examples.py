"""The manual's whole examples work as the pages say.

* The tool plugin (``docs/examples/text_stats_tool.py``) is loaded from the entry point its
  ``pyproject.toml`` declares, through the registry's own plugin loading, and called through
  the tool registry the way the run loop calls a tool.
* The Python client (``docs/examples/tour.py``) compiles and answers ``--help``; its GraphQL
  operations are validated in ``test_docs_graphql.py``, and it runs against ``enverif dev``
  in ``tests/integration/test_docs_examples.py``.
* Every model config, policy and scripted turn shown as a ``json`` block in the pages passes
  the validation that ``createAgent`` applies.
* Every page includes only examples that exist, and every example is included by a page.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from app.domain.policy import (
    Decision,
    PolicyLink,
    RiskClass,
    effective_decision,
    parse_policy,
    validate_policy,
)
from app.domain.runs import StepStatus
from app.engine.base import ToolContext
from app.engine.calls import call_tool
from app.engine.providers import validate_model_config
from app.engine.tools import registry as registry_module
from app.engine.tools.registry import ENTRY_POINT_GROUP, ToolRegistry, default_registry
from app.settings import Settings

REPO = Path(__file__).parents[2]
DOCS = REPO / "docs"
EXAMPLES = DOCS / "examples"
PLUGIN_PYPROJECT = EXAMPLES / "text_stats_pyproject.toml"

_SNIPPET = re.compile(r'^\s*--8<-- "([^"]+)"\s*$', re.MULTILINE)
_JSON_BLOCK = re.compile(r"^```json\n(.*?)^```", re.MULTILINE | re.DOTALL)


def plugin_entry_points() -> list[EntryPoint]:
    declared = tomllib.loads(PLUGIN_PYPROJECT.read_text())["project"]["entry-points"]
    return [
        EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)
        for name, value in declared[ENTRY_POINT_GROUP].items()
    ]


@pytest.fixture
async def registry(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ToolRegistry]:
    """The registry a worker builds, with the example package installed: its module on the
    path, its entry points where ``importlib.metadata`` would report them."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def entry_points(*, group: str) -> list[EntryPoint]:
        return plugin_entry_points() if group == ENTRY_POINT_GROUP else []

    monkeypatch.setattr(registry_module, "entry_points", entry_points)
    built = default_registry(Settings())
    try:
        yield built
    finally:
        await built.aclose()


def _context(settings: Settings) -> ToolContext:
    return ToolContext(workspace_id=1, agent_id=1, run_id=1, step_id=7, settings=settings)


async def test_the_plugin_loads_from_its_entry_point_and_answers_through_the_registry(
    registry: ToolRegistry,
) -> None:
    assert [ep.value for ep in plugin_entry_points()] == ["text_stats_tool:TextStatsTool"]
    tool = registry.get("text.stats")
    assert tool is not None, f"the example plugin was not registered; tools: {registry.names()}"
    # Offered by a pattern, as the page says; the built-ins are still there beside it.
    assert registry.offered(["text.*"], "text.stats")
    assert not registry.offered(["http.*"], "text.stats")
    assert {"http.get", "webhook.post", "memory.search"} <= set(registry.names())
    # READ: allowed by the default policy, denied by a rule naming it.
    assert registry.risk_of("text.stats") is RiskClass.READ

    def decision(policy: object) -> Decision:
        return effective_decision(
            [PolicyLink("a", parse_policy(policy))], "text.stats", RiskClass.READ
        ).decision

    assert decision(None) is Decision.ALLOW
    assert decision({"rules": [{"tool": "text.stats", "decision": "DENY"}]}) is Decision.DENY

    settings = Settings()
    outcome = await call_tool(tool, _context(settings), {"text": "one two\nthree"}, settings=settings)
    assert outcome.status is StepStatus.SUCCEEDED
    assert outcome.result == {"words": 3, "lines": 2, "characters": 13}

    refused = await call_tool(tool, _context(settings), {"txt": "typo"}, settings=settings)
    assert refused.status is StepStatus.FAILED
    assert refused.result["error"]["code"] == "INVALID_ARGUMENTS"


def test_the_python_client_compiles_and_answers_help() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "tour.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--url" in result.stdout


def _json_blocks() -> list[tuple[str, Any]]:
    blocks = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        for match in _JSON_BLOCK.finditer(text):
            where = f"{page.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}"
            blocks.append((where, json.loads(match[1])))
    return blocks


def _agent_configs() -> list[tuple[str, str, Any]]:
    """(where, kind, value) for the json blocks that show what an agent is written with."""
    found = []
    for where, value in _json_blocks():
        if not isinstance(value, dict):
            continue
        if "provider" in value:
            found.append((where, "model", value))
        elif value.keys() & {"call", "calls", "final"}:
            found.append((where, "turn", value))
        elif value and value.keys() <= {"default", "rules"}:
            found.append((where, "policy", value))
    return found


def test_the_pages_show_agent_configs() -> None:
    kinds = {(where.split(":")[0], kind) for where, kind, _ in AGENT_CONFIGS}
    assert {
        ("docs/extending/providers.md", "model"),
        ("docs/concepts/policy.md", "policy"),
        ("docs/concepts/delegation.md", "turn"),
    } <= kinds, kinds


AGENT_CONFIGS = _agent_configs()


@pytest.mark.parametrize(("where", "kind", "value"), AGENT_CONFIGS, ids=[w for w, _, _ in AGENT_CONFIGS])
def test_each_agent_config_shown_is_valid(where: str, kind: str, value: Any) -> None:
    settings = Settings()
    if kind == "model" and {"api_key_env", "base_url"} <= value.keys():
        # A page that shows a key going elsewhere (a local server) says to bind it there.
        bound = {**settings.provider_keys, value["api_key_env"]: (value["base_url"],)}
        settings = Settings(provider_keys=bound)
    if kind == "model":
        validate_model_config(value, settings)
    elif kind == "turn":
        validate_model_config({"provider": "scripted", "steps": [value]}, settings)
    else:
        validate_policy(value)


def test_every_included_example_exists_and_every_example_is_included() -> None:
    included = set()
    for page in sorted(DOCS.rglob("*.md")):
        for path in _SNIPPET.findall(page.read_text()):
            assert (REPO / path).is_file(), f"{page.relative_to(REPO)} includes {path}, which does not exist"
            included.add(path)
    examples = {str(p.relative_to(REPO)) for p in EXAMPLES.iterdir() if p.is_file()}
    assert examples <= included, f"examples no page includes: {sorted(examples - included)}"


def test_the_readme_links_to_pages_that_exist() -> None:
    # The README is read on the repository's front page, outside the site that `make docs`
    # checks, so its links to the manual are checked here.
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 20, local
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
