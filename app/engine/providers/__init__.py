"""Model providers, chosen by the ``provider`` key of an agent's model config: a plug point
like tools (docs/extending/providers.md).

A provider is an object that satisfies ``app.engine.base.Provider`` (``name``, ``validate``,
``create``). The built-ins (``scripted``, ``openai``, ``anthropic``) are listed here; plugins come from the
``enverif.providers`` entry-point group. A plugin that fails to load, is not a provider, or
takes a name already taken (a built-in's, say ``openai``) is logged and skipped: it can
neither replace a built-in nor keep the server from starting. The built-ins are not entry
points of this package: they must be there whether or not the package's metadata is
installed (a checkout on ``PYTHONPATH``, a vendored copy), and a provider's name alone
decides where a deployment's key may be sent, so no distribution gets to answer to
``openai`` but ours.

``validate_model_config`` runs when an agent is written (errors name the field
``model.<key>``) and again in the worker; ``Providers`` is the worker's factory: it owns what
models share for the worker's lifetime (one guarded HTTP client, one template renderer
pool; the SDK providers' twin of the client on httpx2) and turns a stored config into a ``Model``. A stored config that no longer validates
(an old row, or a deployment that narrowed ``ENVERIF_PROVIDER_KEYS``) raises the same
``ValidationFailed``, and the loop fails the run with its message before anything is sent.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import httpx

from app.domain.errors import ValidationFailed
from app.engine.base import Model, Provider, ProviderResources
from app.engine.net import guarded_client, guarded_sdk_client
from app.engine.providers.anthropic import AnthropicProvider
from app.engine.providers.openai import OpenAIProvider
from app.engine.providers.scripted import ScriptedProvider
from app.engine.providers.templates import TemplatePool
from app.settings import Settings

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "enverif.providers"
BUILTIN_PROVIDERS: tuple[Provider, ...] = (ScriptedProvider, OpenAIProvider, AnthropicProvider)
PROVIDER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


def check_provider(provider: object) -> Provider:
    """Return ``provider`` if it has the shape of ``Provider``, else raise ``TypeError``."""
    name = getattr(provider, "name", None)
    if not isinstance(name, str) or not PROVIDER_NAME.match(name):
        raise TypeError(f"provider name {name!r} must match {PROVIDER_NAME.pattern}")
    for method in ("validate", "create"):
        if not callable(getattr(provider, method, None)):
            raise TypeError(f"provider {name!r}: {method} must be callable")
    return provider  # type: ignore[return-value]


class ProviderRegistry:
    """The providers of this process, by name."""

    def __init__(self, providers: Iterable[Provider] = ()) -> None:
        self._providers: dict[str, Provider] = {}
        for provider in providers:
            self.register(provider)

    def register(self, provider: Provider) -> None:
        """Add a provider. Names are unique: a second provider may not shadow the first."""
        check_provider(provider)
        if provider.name in self._providers:
            raise ValueError(f"a provider named {provider.name!r} is already registered")
        self._providers[provider.name] = provider

    def names(self) -> list[str]:
        return list(self._providers)

    def for_config(self, config: object) -> tuple[Provider, Mapping[str, Any]]:
        """The provider a model config names; ``ValidationFailed`` when it names none."""
        if not isinstance(config, dict):
            raise ValidationFailed("model must be an object with a 'provider'", field="model")
        provider = self._providers.get(config.get("provider"))  # type: ignore[arg-type]
        if provider is None:
            raise ValidationFailed(
                f"model.provider must be one of: {', '.join(self.names())} (got {config.get('provider')!r})",
                field="model.provider",
            )
        return provider, config

    def validate(self, config: object, settings: Settings) -> dict[str, Any]:
        """Check a model config; returns what to store. ``ValidationFailed(field="model...")``."""
        provider, checked = self.for_config(config)
        return provider.validate(checked, settings)


def load_plugin(entry_point: EntryPoint) -> Provider:
    """Load one ``enverif.providers`` entry point: the provider object (or class) it names."""
    return check_provider(entry_point.load())


def default_registry(*, plugins: bool = True) -> ProviderRegistry:
    """The built-ins, then every ``enverif.providers`` plugin that loads (see the module
    docstring for what is skipped)."""
    registry = ProviderRegistry(BUILTIN_PROVIDERS)
    if not plugins:
        return registry
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            provider = load_plugin(entry_point)
            registry.register(provider)
        except Exception:
            log.exception("skipping provider plugin %r (%s)", entry_point.name, entry_point.value)
            continue
        log.info("loaded provider plugin %s from %s", provider.name, entry_point.value)
    return registry


@functools.cache
def process_registry() -> ProviderRegistry:
    """This process's providers, loaded once: installed plugins do not change while it runs."""
    return default_registry()


def validate_model_config(config: object, settings: Settings) -> dict[str, Any]:
    """Check a model config (``Provider.validate`` of the provider it names); returns what to
    store. Raises ``ValidationFailed`` naming ``model`` or ``model.<key>``."""
    return process_registry().validate(config, settings)


class Providers:
    """One per worker: created at start-up, closed at shutdown (``aclose``)."""

    def __init__(self, settings: Settings, registry: ProviderRegistry | None = None) -> None:
        self.settings = settings
        self.registry = registry if registry is not None else process_registry()
        self.http: httpx.AsyncClient = guarded_client(
            settings,
            timeout_s=settings.provider_timeout_s,
            user_agent="enverif-providers/0.1",
            max_connections=max(10, settings.worker_max_jobs),
        )
        self.sdk_http = guarded_sdk_client(
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
        self.resources = ProviderResources(
            settings=settings, http=self.http, templates=self.templates, sdk_http=self.sdk_http
        )

    def for_model(self, config: object) -> Model:
        """The model for a stored config, validated again under this worker's settings;
        ``ValidationFailed`` if it is not valid (any more)."""
        provider, checked = self.registry.for_config(config)
        return provider.create(provider.validate(checked, self.settings), self.resources)

    async def aclose(self) -> None:
        await self.templates.aclose()
        await self.http.aclose()
        await self.sdk_http.aclose()

    async def __aenter__(self) -> Providers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = [
    "BUILTIN_PROVIDERS",
    "ENTRY_POINT_GROUP",
    "ProviderRegistry",
    "Providers",
    "check_provider",
    "default_registry",
    "validate_model_config",
]
