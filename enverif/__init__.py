"""Enverif's public import path for plugin authors.

The server itself lives in the ``app`` package (an internal name); what a tool or provider
plugin builds on is re-exported here, so a plugin never imports ``app.*`` and keeps working
when the server's modules move. ``enverif.testing`` is the conformance kit.
"""

from app.domain.errors import ValidationFailed
from app.domain.model_errors import ModelErrorCode, model_error
from app.domain.policy import RiskClass
from app.engine.base import (
    ChildStarted,
    FinalAnswer,
    HistoryItem,
    Model,
    Provider,
    ProviderError,
    ProviderResources,
    RunWriter,
    Tool,
    ToolCall,
    ToolCalls,
    ToolContext,
    ToolError,
    ToolKind,
    ToolSpec,
    Turn,
    TurnContext,
)

__all__ = [
    "ChildStarted",
    "FinalAnswer",
    "HistoryItem",
    "Model",
    "ModelErrorCode",
    "Provider",
    "ProviderError",
    "ProviderResources",
    "RiskClass",
    "RunWriter",
    "Tool",
    "ToolCall",
    "ToolCalls",
    "ToolContext",
    "ToolError",
    "ToolKind",
    "ToolSpec",
    "Turn",
    "TurnContext",
    "ValidationFailed",
    "model_error",
]
