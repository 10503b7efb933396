"""Model providers, chosen by the ``provider`` key of an agent's model config (docs/extending/providers.md).

``validate_model_config`` runs when an agent is written (errors name the field ``model``)
and again in the worker; ``Providers`` is the worker's factory: it owns what providers
share for the worker's lifetime (one guarded HTTP client, one template renderer pool) and
turns a stored config into a ``Provider``. A stored config that no longer validates (an old
row, or a deployment that narrowed ``ENVERIF_PROVIDER_KEY_ENVS``) raises the same
``ValidationFailed``, and the loop fails the run with its message before anything is sent.
"""

from __future__ import annotations

from typing import Any

import httpx

from app.domain.errors import ValidationFailed
from app.engine.base import Provider
from app.engine.net import guarded_client
from app.engine.providers.openai import OpenAIProvider, validate_openai_config
from app.engine.providers.scripted import ScriptedProvider, validate_scripted_config
from app.engine.providers.templates import TemplatePool
from app.settings import Settings

PROVIDERS = ("scripted", "openai")


def validate_model_config(config: object, settings: Settings) -> dict[str, Any]:
    """Check a model config and return a copy; raises ``ValidationFailed(field="model")``."""
    if not isinstance(config, dict):
        raise ValidationFailed("model must be an object with a 'provider'", field="model")
    provider = config.get("provider")
    if provider == "scripted":
        return validate_scripted_config(config)
    if provider == "openai":
        return validate_openai_config(config, allowed_key_envs=settings.provider_key_envs)
    raise ValidationFailed(
        f"model.provider must be one of: {', '.join(PROVIDERS)} (got {provider!r})", field="model"
    )


class Providers:
    """One per worker: created at start-up, closed at shutdown (``aclose``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.http: httpx.AsyncClient = guarded_client(
            settings,
            timeout_s=settings.provider_timeout_s,
            user_agent="enverif-providers/0.1",
            max_connections=max(10, settings.worker_max_jobs),
        )
        self.templates = TemplatePool(
            size=settings.template_workers,
            timeout_ms=settings.template_timeout_ms,
            max_output_bytes=settings.template_max_output_bytes,
        )

    def for_model(self, config: object) -> Provider:
        """The provider for a stored model config; ``ValidationFailed`` if it is not valid."""
        if isinstance(config, dict) and config.get("provider") == "scripted":
            return ScriptedProvider(config, self.templates)  # validates (and copies) it once
        return OpenAIProvider(validate_model_config(config, self.settings), self.settings, client=self.http)

    async def aclose(self) -> None:
        await self.templates.aclose()
        await self.http.aclose()

    async def __aenter__(self) -> Providers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["PROVIDERS", "Providers", "validate_model_config"]
