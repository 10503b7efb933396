"""Connectors over MCP: the rules about a registered server and its tools. Pure.

A workspace registers Model Context Protocol servers (``docs/extending/mcp.md``); each
tool a server lists becomes the agent tool ``mcp.<server>.<tool>``, with a risk class read
from its annotations. What is checked here, before anything is stored or sent:

- a server's ``name`` (``[a-z][a-z0-9_-]{0,31}``) and a tool's name (letters, digits, ``_``
  and ``-``: a dot or a slash would make ``mcp.<server>.<tool>`` ambiguous or unmatchable);
- ``headers``: header name -> the name of an environment variable on the deployment's
  allowlist (``ENVERIF_MCP_SECRET_ENVS``), never a value;
- a STDIO ``command``: its first element on ``ENVERIF_MCP_STDIO_COMMANDS``;
- ``toolRisk`` overrides: tool name -> a ``RiskClass``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Mapping
from typing import Any

from app.domain.errors import ValidationFailed
from app.domain.policy import RiskClass

PREFIX = "mcp."
SERVER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Agent tool names are capped (they become provider function names: OpenAI allows 64).
MAX_AGENT_TOOL_CHARS = 64
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_HEADERS = 16
MAX_COMMAND_PARTS = 64
MAX_COMMAND_PART_CHARS = 1_000
MAX_URL_CHARS = 2_048
# Headers the transport itself owns: a configured value would break or hijack the session.
RESERVED_HEADERS = frozenset({"host", "content-length", "content-type", "accept", "mcp-session-id",
                              "mcp-protocol-version", "transfer-encoding", "connection"})  # fmt: skip


class Transport(enum.StrEnum):
    STREAMABLE_HTTP = "STREAMABLE_HTTP"
    STDIO = "STDIO"


def check_server_name(name: str) -> str:
    if not SERVER_NAME.match(name):
        raise ValidationFailed(
            "name must be 1-32 characters of a-z, 0-9, '_' or '-', starting with a letter", field="name"
        )
    return name


def agent_tool_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}.{tool}"


def tool_name_problem(server: str, tool: Any) -> str | None:
    """Why a listed tool cannot become an agent tool, or None when it can."""
    if not isinstance(tool, str) or not TOOL_NAME.match(tool):
        return f"tool name {str(tool)[:80]!r} is not letters, digits, '_' or '-'"
    if len(agent_tool_name(server, tool)) > MAX_AGENT_TOOL_CHARS:
        return f"{agent_tool_name(server, tool)!r} is longer than {MAX_AGENT_TOOL_CHARS} characters"
    return None


def risk_from_annotations(annotations: Mapping[str, Any] | None) -> RiskClass:
    """The MCP spec's hints with its defaults: a tool that says nothing is treated as a
    destructive, open-world write (so it always asks for approval)."""
    hints = annotations or {}
    if hints.get("readOnlyHint") is True:
        return RiskClass.READ
    if hints.get("destructiveHint", True) is not False:
        return RiskClass.DESTRUCTIVE
    if hints.get("openWorldHint", True) is not False:
        return RiskClass.EXTERNAL_WRITE
    return RiskClass.INTERNAL_WRITE


def effective_risk(
    tool: str, annotations: Mapping[str, Any] | None, overrides: Mapping[str, str]
) -> RiskClass:
    override = overrides.get(tool)
    return RiskClass(override) if override is not None else risk_from_annotations(annotations)


def check_headers(headers: Any, *, allowed_envs: Collection[str]) -> dict[str, str]:
    """``{"Authorization": "CRM_TOKEN"}``: every value names an allowed environment variable."""
    if headers is None:
        return {}
    if not isinstance(headers, dict):
        raise ValidationFailed("headers must be an object of header name -> variable name", field="headers")
    if len(headers) > MAX_HEADERS:
        raise ValidationFailed(f"at most {MAX_HEADERS} headers", field="headers")
    checked: dict[str, str] = {}
    for header, env in headers.items():
        if not isinstance(header, str) or not HEADER_NAME.match(header):
            raise ValidationFailed(f"{str(header)[:80]!r} is not a valid header name", field="headers")
        if header.lower() in RESERVED_HEADERS:
            raise ValidationFailed(f"header {header} is set by the transport itself", field="headers")
        if not isinstance(env, str) or not ENV_NAME.match(env):
            raise ValidationFailed(
                f"headers.{header} must name an environment variable (its value is never stored)",
                field="headers",
            )
        if env not in allowed_envs:
            raise ValidationFailed(
                f"headers.{header}: the variable {env} is not in ENVERIF_MCP_SECRET_ENVS", field="headers"
            )
        checked[header] = env
    return checked


def check_command(command: Any, *, allowed: Collection[str]) -> list[str]:
    if not isinstance(command, list) or not command or not all(isinstance(p, str) for p in command):
        raise ValidationFailed("command must be a non-empty list of strings", field="command")
    if len(command) > MAX_COMMAND_PARTS or any(len(p) > MAX_COMMAND_PART_CHARS or "\0" in p for p in command):
        raise ValidationFailed("command is too long", field="command")
    if command[0] not in allowed:
        raise ValidationFailed(f"{command[0][:200]!r} is not in ENVERIF_MCP_STDIO_COMMANDS", field="command")
    return list(command)


def check_url(raw: Any) -> str:
    """The shape of a STREAMABLE_HTTP url; where it may connect is the network guard's call."""
    if not isinstance(raw, str) or not raw.strip():
        raise ValidationFailed("url is required for STREAMABLE_HTTP", field="url")
    url: str = raw.strip()
    if len(url) > MAX_URL_CHARS:
        raise ValidationFailed(f"url is longer than {MAX_URL_CHARS} characters", field="url")
    scheme, sep, rest = url.partition("://")
    if (
        not sep
        or scheme.lower() not in ("http", "https")
        or not rest
        or rest.startswith("/")
        or any(c.isspace() for c in url)
    ):
        raise ValidationFailed("url must be an absolute http or https URL", field="url")
    return url


def check_tool_risk(value: Any) -> dict[str, str]:
    """``toolRisk``: tool name (as the server lists it) -> a risk class."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationFailed("toolRisk must be an object of tool name -> risk class", field="toolRisk")
    checked: dict[str, str] = {}
    for tool, risk in value.items():
        if not isinstance(tool, str) or not TOOL_NAME.match(tool):
            raise ValidationFailed(f"toolRisk: {str(tool)[:80]!r} is not a tool name", field="toolRisk")
        if risk not in RiskClass.__members__:
            raise ValidationFailed(
                f"toolRisk.{tool} must be one of {', '.join(RiskClass.__members__)}", field="toolRisk"
            )
        checked[tool] = str(risk)
    return checked


def check_transport_fields(
    transport: Transport, *, url: Any, command: Any, stdio_commands: Collection[str]
) -> tuple[str | None, list[str] | None]:
    """A STREAMABLE_HTTP server has a url and no command; a STDIO one the opposite."""
    if transport is Transport.STREAMABLE_HTTP:
        if command:
            raise ValidationFailed("command is only for STDIO servers", field="command")
        return check_url(url), None
    if url:
        raise ValidationFailed("url is only for STREAMABLE_HTTP servers", field="url")
    return None, check_command(command, allowed=stdio_commands)
