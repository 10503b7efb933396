"""The inbox's check of an edited call (app/console/static/js/schema_check.js) agrees with
the server's full validator (jsonschema, as ``decideApproval`` uses it) on the tools' own
schemas: what the page refuses the server would refuse, and what it lets through the server
accepts. Run in node over a table of cases, one process for all of them."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.engine.tools.registry import registered_tool_specs

CHECKER = Path(__file__).parents[2] / "app" / "console" / "static" / "js" / "schema_check.js"
NODE = shutil.which("node")

# An MCP tool's schema uses more of JSON Schema than the built-ins do.
LEAD = {
    "type": "object",
    "properties": {
        "company": {"type": "string", "minLength": 2, "pattern": "^[a-z]"},
        "email": {"type": "string"},
        "size": {"enum": ["S", "M", "L"]},
        "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
        "owner": {"$ref": "#/$defs/person"},
        "contact": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    },
    "required": ["company", "email"],
    "additionalProperties": {"type": "string"},
    "$defs": {"person": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
}

VALUES: list[Any] = [
    {},
    {"url": "http://127.0.0.1:9/x"},
    {"url": 1},
    {"url": "http://127.0.0.1:9/x", "payload": None},
    {"url": "http://127.0.0.1:9/x", "payload": {"a": [1]}, "extra": True},
    {"key": "k", "value": "v", "importance": 0.5, "tags": ["a"]},
    {"key": "k", "value": "v", "importance": 2},
    {"key": "k" * 256, "value": "v"},
    {"key": "k", "value": 3, "tags": ["a", 1]},
    {"query": "q", "limit": 1.5},
    {"query": "q", "limit": 50},
    {"agent": "a", "task": "t", "input": []},
    {"agent": "a", "task": "t", "input": {"x": 1}},
    {"company": "acme", "email": "e"},
    {"company": "A", "email": "e"},
    {"company": "acme", "email": "e", "size": "XL"},
    {"company": "acme", "email": "e", "score": 10},
    {"company": "acme", "email": "e", "score": 0.1, "owner": {}},
    {"company": "acme", "email": "e", "owner": {"name": "n"}, "contact": 3, "tags": ["x"]},
    {"company": "acme", "email": "e", "contact": 1.5},
    {"company": "acme", "email": "e", "tags": []},
    {"company": "acme", "email": "e", "note": 1},
    {"company": "acme", "email": "e", "note": "ok"},
    [],
    "text",
]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_the_pages_check_agrees_with_the_servers(settings) -> None:
    schemas = {name: spec.parameters for name, spec in (await registered_tool_specs(settings)).items()}
    schemas["mcp.crm.create_lead"] = LEAD
    cases = [(name, value) for name in sorted(schemas) for value in VALUES]
    program = (
        f"import {{ schemaProblems }} from {json.dumps(CHECKER.as_uri())};\n"
        "let text = ''; process.stdin.on('data', (d) => { text += d; });\n"
        "process.stdin.on('end', () => { const { schemas, cases } = JSON.parse(text);\n"
        "  console.log(JSON.stringify(cases.map(([n, v]) => schemaProblems(schemas[n], v)))); });\n"
    )
    node = await asyncio.create_subprocess_exec(
        str(NODE), "--input-type=module", "-e", program,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(
        node.communicate(json.dumps({"schemas": schemas, "cases": cases}).encode()), 60
    )
    assert node.returncode == 0
    page = json.loads(out)
    disagree = []
    for (name, value), problems in zip(cases, page, strict=True):
        validator = jsonschema.validators.validator_for(schemas[name])(schemas[name])
        server = [e.message for e in validator.iter_errors(value)]
        if bool(problems) != bool(server):
            disagree.append((name, value, problems, server))
    assert not disagree, disagree
    refused = sum(1 for problems in page if problems)
    assert 0 < refused < len(cases)  # the table has both kinds for the checks to mean something
