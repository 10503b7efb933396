"""The conformance kit for plugin authors (implemented in ``app.testing``; see there)."""

from app.testing import (
    ConformanceError,
    ToolCase,
    check_provider,
    check_tool,
    check_tool_call,
    check_tool_shape,
    tool_context,
    turn_context,
)

__all__ = [
    "ConformanceError",
    "ToolCase",
    "check_provider",
    "check_tool",
    "check_tool_call",
    "check_tool_shape",
    "tool_context",
    "turn_context",
]
