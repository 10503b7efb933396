"""Model providers, chosen by the ``provider`` key of an agent's model config (DESIGN §5).

``validate_model_config`` runs when an agent is written (errors name the field ``model``);
``provider_for`` runs in the worker and turns a stored config into a ``Provider``; a stored
config that no longer validates raises the same ``ValidationFailed``, and the loop fails the
run with its message.
"""

from __future__ import annotations

from typing import Any

import httpx

from app.domain.errors import ValidationFailed
from app.engine.base import Provider
from app.engine.providers.openai import OpenAIProvider, validate_openai_config
from app.engine.providers.scripted import ScriptedProvider, validate_scripted_config
from app.settings import Settings

_VALIDATORS = {
    "scripted": validate_scripted_config,
    "openai": validate_openai_config,
}
PROVIDERS = tuple(_VALIDATORS)


def validate_model_config(config: object) -> dict[str, Any]:
    """Check a model config and return a copy; raises ``ValidationFailed(field="model")``."""
    if not isinstance(config, dict):
        raise ValidationFailed("model must be an object with a 'provider'", field="model")
    provider = config.get("provider")
    validate = _VALIDATORS.get(provider) if isinstance(provider, str) else None
    if validate is None:
        raise ValidationFailed(
            f"model.provider must be one of: {', '.join(PROVIDERS)} (got {provider!r})", field="model"
        )
    return validate(config)


def provider_for(
    config: object, settings: Settings, *, http_client: httpx.AsyncClient | None = None
) -> Provider:
    """The provider for a stored model config; ``ValidationFailed`` if it is malformed.

    ``http_client`` lets a worker share one connection pool between runs.
    """
    checked = validate_model_config(config)
    if checked["provider"] == "scripted":
        return ScriptedProvider(checked)
    return OpenAIProvider(checked, settings, client=http_client)


__all__ = ["PROVIDERS", "provider_for", "validate_model_config"]
