"""An Enverif tool plugin: ``text.stats`` counts the words, lines and characters of a text.

Install a package that holds this module and declares it under the ``enverif.tools``
entry-point group (``text_stats_pyproject.toml`` beside this file); every worker then
offers ``text.stats`` to the agents whose ``tools`` patterns match it.
"""

from __future__ import annotations

from typing import Any

from app.domain.policy import RiskClass
from app.engine.base import ToolContext, ToolError, ToolKind

MAX_TEXT_CHARS = 100_000


class TextStatsTool:
    name = "text.stats"
    description = "Count the words, lines and characters of 'text'."
    # READ: no side effect, so the default policy allows it without an approval.
    risk = RiskClass.READ
    # Plain computation: it changes nothing of Enverif's, so it runs outside any transaction.
    kind = ToolKind.IO
    timeout_s: float | None = 5.0
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": MAX_TEXT_CHARS}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def __init__(self, settings: Any) -> None:
        # The registry builds a tool class with the worker's settings (app.settings.Settings).
        self.settings = settings

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        text = args.get("text")
        if not isinstance(text, str) or set(args) != {"text"}:
            # A refusal the model sees as {"error": {"code": "INVALID_ARGUMENTS", ...}}.
            raise ToolError("INVALID_ARGUMENTS", "expected exactly one argument, 'text', a string")
        if len(text) > MAX_TEXT_CHARS:
            raise ToolError("INVALID_ARGUMENTS", f"text is longer than {MAX_TEXT_CHARS} characters")
        # The result must be strict JSON: numbers, strings, lists, objects.
        return {"words": len(text.split()), "lines": len(text.splitlines()), "characters": len(text)}
