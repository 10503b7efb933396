"""Provider plugins for tests, loaded by real worker processes through entry points (and
checked with the conformance kit in ``tests/unit/test_plugin_conformance.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from enverif import FinalAnswer, ProviderResources, Turn, TurnContext, ValidationFailed


class EchoProvider:
    """``{"provider": "echo", "answer": VALUE}``: answers VALUE on its first turn."""

    name = "echo"
    fast = False

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    @staticmethod
    def validate(config: Mapping[str, Any], settings: Any) -> dict[str, Any]:
        unknown = sorted(set(config) - {"provider", "answer"})
        if unknown:
            raise ValidationFailed(
                f"model has unknown keys: {', '.join(unknown)}", field=f"model.{unknown[0]}"
            )
        if "answer" not in config:
            raise ValidationFailed("model.answer is required", field="model.answer")
        return dict(config)

    @classmethod
    def create(cls, config: dict[str, Any], resources: ProviderResources) -> EchoProvider:
        return cls(config["answer"])

    async def next_turn(self, ctx: TurnContext) -> Turn:
        return FinalAnswer({"echo": self.answer, "turn": ctx.turn})


class ShadowOpenAI(EchoProvider):
    """A plugin that tries to answer to a built-in's name: the registry must skip it."""

    name = "openai"
