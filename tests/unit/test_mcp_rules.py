"""The rules about MCP servers and their tools (app/domain/mcp.py), as tables of cases."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import ValidationFailed
from app.domain.mcp import (
    Transport,
    agent_tool_name,
    check_command,
    check_headers,
    check_server_name,
    check_tool_risk,
    check_transport_fields,
    check_url,
    effective_risk,
    risk_from_annotations,
    tool_name_problem,
)
from app.domain.policy import RiskClass
from app.engine.tools.mcp import might_offer_mcp


@pytest.mark.parametrize(
    ("annotations", "risk"),
    [
        (None, RiskClass.DESTRUCTIVE),  # says nothing: the spec's defaults, so it always asks
        ({}, RiskClass.DESTRUCTIVE),
        ({"readOnlyHint": True}, RiskClass.READ),
        ({"readOnlyHint": True, "destructiveHint": True}, RiskClass.READ),
        ({"readOnlyHint": False}, RiskClass.DESTRUCTIVE),
        ({"destructiveHint": False}, RiskClass.EXTERNAL_WRITE),
        ({"destructiveHint": False, "openWorldHint": True}, RiskClass.EXTERNAL_WRITE),
        ({"destructiveHint": False, "openWorldHint": False}, RiskClass.INTERNAL_WRITE),
        ({"openWorldHint": False}, RiskClass.DESTRUCTIVE),
        ({"idempotentHint": True}, RiskClass.DESTRUCTIVE),
        ({"readOnlyHint": "yes"}, RiskClass.DESTRUCTIVE),  # only a real true counts
    ],
)
def test_risk_follows_the_annotations_with_the_specs_defaults(annotations: Any, risk: RiskClass) -> None:
    assert risk_from_annotations(annotations) is risk


def test_an_admins_override_wins_over_the_annotations() -> None:
    assert effective_risk("send", {"readOnlyHint": True}, {"send": "DESTRUCTIVE"}) is RiskClass.DESTRUCTIVE
    assert effective_risk("other", {"readOnlyHint": True}, {"send": "DESTRUCTIVE"}) is RiskClass.READ


@given(st.dictionaries(st.sampled_from(["readOnlyHint", "destructiveHint", "openWorldHint"]), st.booleans()))
def test_only_a_read_only_hint_makes_a_tool_read(hints: dict[str, bool]) -> None:
    assert (risk_from_annotations(hints) is RiskClass.READ) == (hints.get("readOnlyHint") is True)


@pytest.mark.parametrize("name", ["crm", "a", "my-crm_2", "a" * 32])
def test_good_server_names(name: str) -> None:
    assert check_server_name(name) == name


@pytest.mark.parametrize("name", ["", "CRM", "1crm", "crm.x", "crm/x", "a" * 33, "crm ", "_crm"])
def test_bad_server_names(name: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        check_server_name(name)
    assert info.value.field == "name"


@pytest.mark.parametrize(
    ("tool", "ok"),
    [
        ("search_companies", True),
        ("create-lead", True),
        ("Search2", True),
        ("a.b", False),  # mcp.crm.a.b would read as server crm, tool a.b or server crm.a
        ("a/b", False),
        ("", False),
        ("has space", False),
        ("x" * 60, False),  # mcp.crm. + 60 > 64 characters
        (None, False),
    ],
)
def test_tool_names(tool: Any, ok: bool) -> None:
    assert (tool_name_problem("crm", tool) is None) is ok


def test_agent_tool_names() -> None:
    assert agent_tool_name("crm", "create_lead") == "mcp.crm.create_lead"


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        (None, None),
        ({}, None),
        ({"Authorization": "CRM_TOKEN"}, None),
        ({"X-Api-Key": "CRM_TOKEN"}, None),
        ({"Authorization": "OTHER"}, "not in ENVERIF_MCP_SECRET_ENVS"),
        ({"Authorization": "Bearer abc"}, "must name an environment variable"),
        ({"Bad Header": "CRM_TOKEN"}, "not a valid header name"),
        ({"Mcp-Session-Id": "CRM_TOKEN"}, "set by the transport"),
        ({"Host": "CRM_TOKEN"}, "set by the transport"),
        (["Authorization"], "must be an object"),
    ],
)
def test_headers_name_allowed_variables_only(headers: Any, problem: str | None) -> None:
    if problem is None:
        assert check_headers(headers, allowed_envs={"CRM_TOKEN"}) == (headers or {})
        return
    with pytest.raises(ValidationFailed) as info:
        check_headers(headers, allowed_envs={"CRM_TOKEN"})
    assert problem in info.value.message and info.value.field == "headers"
    assert "abc" not in info.value.message  # a value typed where a name belongs is not echoed


@pytest.mark.parametrize(
    ("command", "ok"),
    [
        (["/usr/bin/python3", "server.py"], True),
        (["python3", "server.py"], False),  # allowlisted exactly, not by base name
        (["/bin/sh", "-c", "python3 server.py"], False),
        ([], False),
        ("/usr/bin/python3", False),
        ([1], False),
        (["/usr/bin/python3", "a\0b"], False),
    ],
)
def test_stdio_commands_on_the_allowlist_only(command: Any, ok: bool) -> None:
    allowed = {"/usr/bin/python3"}
    if ok:
        assert check_command(command, allowed=allowed) == command
    else:
        with pytest.raises(ValidationFailed):
            check_command(command, allowed=allowed)


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:8080/mcp", True),
        ("https://127.0.0.1/mcp", True),
        ("ftp://127.0.0.1/mcp", False),
        ("127.0.0.1/mcp", False),
        ("http:///mcp", False),
        ("", False),
        ("http://127.0.0.1/ mcp", False),
        (None, False),
    ],
)
def test_urls(url: Any, ok: bool) -> None:
    if ok:
        assert check_url(url) == url
    else:
        with pytest.raises(ValidationFailed) as info:
            check_url(url)
        assert info.value.field == "url"


def test_each_transport_takes_its_own_fields() -> None:
    stdio = {"/usr/bin/python3"}
    assert check_transport_fields(
        Transport.STREAMABLE_HTTP, url="http://127.0.0.1/mcp", command=None, stdio_commands=stdio
    ) == ("http://127.0.0.1/mcp", None)
    assert check_transport_fields(
        Transport.STDIO, url=None, command=["/usr/bin/python3"], stdio_commands=stdio
    ) == (None, ["/usr/bin/python3"])
    with pytest.raises(ValidationFailed, match="only for STDIO"):
        check_transport_fields(
            Transport.STREAMABLE_HTTP, url="http://127.0.0.1/mcp", command=["x"], stdio_commands=stdio
        )
    with pytest.raises(ValidationFailed, match="only for STREAMABLE_HTTP"):
        check_transport_fields(
            Transport.STDIO, url="http://127.0.0.1/mcp", command=["/usr/bin/python3"], stdio_commands=stdio
        )


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (None, True),
        ({"send_email": "DESTRUCTIVE"}, True),
        ({"search": "READ"}, True),
        ({"search": "SAFE"}, False),
        ({"a.b": "READ"}, False),
        ([], False),
    ],
)
def test_tool_risk_overrides(value: Any, ok: bool) -> None:
    if ok:
        assert check_tool_risk(value) == (value or {})
    else:
        with pytest.raises(ValidationFailed) as info:
            check_tool_risk(value)
        assert info.value.field == "toolRisk"


@pytest.mark.parametrize(
    ("patterns", "might"),
    [
        ([], False),
        (["http.*", "webhook.post"], False),
        (["memory.*", "agents.delegate"], False),
        (["mcp.crm.*"], True),
        (["mcp.*"], True),
        (["*"], True),
        (["m*"], True),
        (["mcp"], True),  # matches no mcp.x.y, but the literal is a prefix: read (harmless)
        (["[m]cp.*"], True),
        (["mx*"], False),
    ],
)
def test_runs_read_mcp_tools_only_when_a_pattern_could_match(patterns: list[str], might: bool) -> None:
    assert might_offer_mcp(patterns) is might


def _nested(levels: int) -> dict[str, Any]:
    """A schema nested deeper than MariaDB stores JSON (31 levels)."""
    inner: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        inner = {"type": "array", "items": inner}
    return {"properties": {"deep": inner}}


def _listed(name: Any, schema: Any, annotations: Any = None) -> Any:
    from mcp.types import Tool, ToolAnnotations

    tool = Tool(name="placeholder", input_schema={"type": "object"})
    # Set after construction: what a server may send is not what the SDK's model would build.
    object.__setattr__(tool, "name", name)
    object.__setattr__(tool, "input_schema", schema)
    object.__setattr__(tool, "annotations", None if annotations is None else ToolAnnotations(**annotations))
    return tool


@pytest.mark.parametrize(
    ("name", "schema", "problem"),
    [
        ("ok", {"type": "object", "properties": {"q": {"type": "string"}}}, None),
        ("bad.name", {"type": "object"}, "is not letters"),
        ("a/b", {"type": "object"}, "is not letters"),
        ("broken", {"type": 12}, "not valid JSON Schema"),
        ("broken2", {"type": "object", "properties": {"q": {"minLength": "three"}}}, "not valid JSON Schema"),
        ("nan", {"type": "object", "default": float("nan")}, "not JSON"),
        ("huge", {"type": "object", "description": "x" * 70_000}, "over the cap"),
        ("notobj", [], "not valid JSON Schema"),
        (
            "deep",
            {"type": "object", "properties": {"a": {"items": {"items": {}}}}} | _nested(30),
            "levels deep; at most 32",  # over what any stored JSON may be
        ),
        ("deepish", {"type": "object"} | _nested(24), "levels deep; at most 25"),  # a schema's cap
    ],
)
def test_listed_tools_that_cannot_be_offered_are_left_out_with_the_reason(name, schema, problem) -> None:
    from app.services.mcp_servers import usable_tools

    kept, skipped = usable_tools("crm", [_listed(name, schema, {"readOnlyHint": True})])
    if problem is None:
        assert [t.name for t in kept] == [name] and skipped == []
        assert kept[0].annotations == {"readOnlyHint": True}
    else:
        assert kept == [] and len(skipped) == 1 and problem in skipped[0], skipped


def test_a_tool_listed_twice_is_kept_once() -> None:
    from app.services.mcp_servers import usable_tools

    kept, skipped = usable_tools("crm", [_listed("a", {"type": "object"}), _listed("a", {"type": "object"})])
    assert [t.name for t in kept] == ["a"] and "twice" in skipped[0]
