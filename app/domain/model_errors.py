"""The errors a model sees: one vocabulary, one shape. Pure.

Inside a run, a refusal or a failure is not a GraphQL error: it is the result of the tool
call, so the model can read it and react. Every one has the same shape::

    {"error": {"code": "<ModelErrorCode>", "message": "<for people and models>"}}

built by ``model_error`` and nowhere else. The codes are the ``ModelErrorCode`` members
below; each says when it happens. The GraphQL guide lists them under "Errors the model
sees" (``docs/graphql/errors.md``), and a unit test holds that list to this enum.

A tool plugin may answer with a code of its own (``ToolError("CRM_DOWN", ...)``): upper
snake case, documented by the plugin. Built-in producers use these members only.
"""

from __future__ import annotations

import enum
import re
from typing import Any

# A message is for people and models; what a tool's exception says can be anything and long.
MAX_MESSAGE_CHARS = 2_000
# What a plugin's own code must look like (``CRM_DOWN``): it is shown, stored and matched on.
CODE_PATTERN = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


class ModelErrorCode(enum.StrEnum):
    """Every code Enverif itself puts in ``{"error": {"code", ...}}``."""

    # -- the call itself (the planner, before anything runs) --
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    """The model called a tool that is not registered, or not offered to this agent."""
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    """The call's arguments are not a JSON object, not strict JSON, too large, or not what
    the tool takes (``http.get``, ``webhook.post``, ``agents.delegate``)."""
    DENIED = "DENIED"
    """The effective policy of the run's chain denies the tool; the message names the agent
    and rule."""

    # -- approvals and the run's end --
    REJECTED = "REJECTED"
    """An operator rejected the call's approval; the message is their reason."""
    RUN_ENDED = "RUN_ENDED"
    """The run ended (cancelled, failed) while the call was still open or waiting."""

    # -- executing the tool --
    TIMEOUT = "TIMEOUT"
    """The tool did not finish within its timeout (``ENVERIF_TOOL_TIMEOUT_S`` or its own)."""
    TOOL_FAILED = "TOOL_FAILED"
    """The tool raised something other than a ``ToolError`` (a bug or an unexpected failure)."""
    NOT_JSON = "NOT_JSON"
    """The tool's result (or the model's final answer) is not strict JSON: NaN, a datetime,
    bytes, nested too deeply."""
    TOO_LARGE = "TOO_LARGE"
    """The tool's result is larger than ``ENVERIF_MAX_RESULT_BYTES``."""
    RESULT_NOT_STORED = "RESULT_NOT_STORED"
    """The database refused to store the result; the tool is not run again."""

    # -- the HTTP tools --
    URL_REFUSED = "URL_REFUSED"
    """The URL's scheme is not http(s), or it resolves to a loopback, private or link-local
    address (unless ``ENVERIF_HTTP_ALLOW_PRIVATE_NETWORKS``)."""
    HTTP_ERROR = "HTTP_ERROR"
    """The request failed: a timeout, too many redirects, a connection error. (A non-2xx
    answer is a result with its status, not an error.)"""
    NO_IDEMPOTENCY_KEY = "NO_IDEMPOTENCY_KEY"
    """``webhook.post`` was called without a recorded step to use as its idempotency key."""

    # -- MCP servers' tools (``mcp.<server>.<tool>``) --
    MCP_ERROR = "MCP_ERROR"
    """The MCP server could not be reached or answered with a protocol error (it is down,
    refused the session, does not know the tool any more, or sent something that is not
    MCP); the call may or may not have reached it."""
    MCP_TOOL_ERROR = "MCP_TOOL_ERROR"
    """The MCP server ran the tool and it reported an error (``isError``); the message is
    the text the tool returned."""

    # -- delegation --
    UNKNOWN_AGENT = "UNKNOWN_AGENT"
    """``agents.delegate`` named no agent of this workspace (other workspaces' agents
    included: they are unknown here)."""
    AGENT_NOT_ACTIVE = "AGENT_NOT_ACTIVE"
    """The agent delegated to is ``PAUSED`` or ``ARCHIVED``."""
    DELEGATION_CYCLE = "DELEGATION_CYCLE"
    """The agent delegated to is already on this run's delegation path, itself included."""
    DELEGATION_DEPTH_EXCEEDED = "DELEGATION_DEPTH_EXCEEDED"
    """The child would be deeper than ``ENVERIF_MAX_DELEGATION_DEPTH``."""

    # -- budgets (docs/concepts/budgets.md) --
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    """The call would go over a budget limit (``maxCallsPerTurn``, ``maxToolCalls``,
    ``maxChildren``, ``maxTreeRuns``, or a spent ``maxTokens`` / ``maxCostUsd`` of the chain)
    and was not executed; the message names the limit and who set it."""
    LOOP_DETECTED = "LOOP_DETECTED"
    """The run called the same tool with identical arguments more than
    ``ENVERIF_MAX_IDENTICAL_CALLS`` times; the call was not executed."""
    # -- the memory tools (the same checks as the operators' mutations) --
    VALIDATION_FAILED = "VALIDATION_FAILED"
    """A memory tool's argument is missing, of the wrong type or out of range; the message
    names it."""
    CREDENTIAL_REJECTED = "CREDENTIAL_REJECTED"
    """``memory.remember`` refused a value that looks like a credential; the message names
    the rule, never the text."""
    CONFLICT = "CONFLICT"
    """``memory.remember`` lost a race to create the same new key (rare; the next call
    updates it)."""


def model_error(code: ModelErrorCode | str, message: str) -> dict[str, Any]:
    """The result a model sees for a refusal or failure: ``{"error": {"code", "message"}}``,
    the message capped at ``MAX_MESSAGE_CHARS``."""
    return {"error": {"code": str(code), "message": message[:MAX_MESSAGE_CHARS]}}


def error_code(result: Any) -> str | None:
    """The code of a result built by ``model_error``, else None."""
    if isinstance(result, dict) and isinstance(error := result.get("error"), dict):
        code = error.get("code")
        return code if isinstance(code, str) else None
    return None
