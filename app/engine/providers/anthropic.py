"""The ``anthropic`` provider: the Messages API with tool use, on the official ``anthropic``
SDK (docs/extending/providers.md).

Config::

    {"provider": "anthropic", "model": "claude-sonnet-4-5",
     "base_url": "https://api.anthropic.com",     # default
     "api_key_env": "ANTHROPIC_API_KEY",          # default
     "max_tokens": 4096,                          # default (the API requires one)
     "tool_choice": "auto" | "any" | "none",      # optional (with tools)
     "parallel_tool_calls": true,                 # optional: false sets disable_parallel_tool_use
     "cache_system": true,                        # default: the system prompt is a cache point
     "stream": true}                              # default: stream when someone listens

Transport, key, destination check, retries and error messages are ``remote``'s, as for
``openai``; the SDK sends ``anthropic-version`` itself, the key goes in ``x-api-key`` and
nothing else of the worker's environment is sent (the SDK would add
``ANTHROPIC_CUSTOM_HEADERS`` and an ``ANTHROPIC_AUTH_TOKEN`` bearer).

The instructions and the injected memories are the system prompt, one text block each; the
last carries ``cache_control`` (prompt caching), so a run's turns, which all share that
prefix, read it from the cache after the first. Each past call is replayed as an assistant
``tool_use`` block followed by a user ``tool_result`` block. Usage maps one to one:
``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
``cache_creation_input_tokens``. There are no sampling parameters (``temperature``): the
Messages API of the pinned SDK takes none.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from app.domain.provider_errors import ProviderErrorCode as Code
from app.domain.provider_keys import Endpoint
from app.engine.base import (
    FinalAnswer,
    ProviderError,
    ToolCall,
    ToolCalls,
    Turn,
    TurnContext,
    Usage,
)
from app.engine.providers import remote
from app.engine.providers.remote import FunctionNames

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_API_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_MAX_TOKENS = 4096
_KEYS = frozenset(
    {
        "provider",
        "model",
        "base_url",
        "api_key_env",
        "max_tokens",
        "tool_choice",
        "parallel_tool_calls",
        "cache_system",
        "stream",
    }
)
_TOOL_CHOICES = ("auto", "any", "none")
_SENT_HEADERS = frozenset(
    {
        "host",
        "accept",
        "accept-encoding",
        "content-type",
        "content-length",
        "user-agent",
        "x-api-key",
        "anthropic-version",
        "anthropic-beta",
    }
)
# Errors a stream can carry after its 200 (an ``error`` event): worth another try.
_RETRIED_TYPES = {
    "overloaded_error": Code.PROVIDER_UNAVAILABLE,
    "api_error": Code.PROVIDER_UNAVAILABLE,
    "rate_limit_error": Code.PROVIDER_RATE_LIMITED,
}


def validate_anthropic_config(
    cfg: object, *, bindings: Mapping[str, Iterable[Endpoint]] | None = None
) -> dict[str, Any]:
    """Check an anthropic model config; returns a copy. ``ValidationFailed`` names the key."""
    config = remote.check_shape(cfg, PROVIDER, _KEYS)
    remote.check_model_name(config, "claude-sonnet-4-5")
    remote.check_number(config, "max_tokens", 1, 1_000_000, integer=True)
    if "tool_choice" in config and config["tool_choice"] not in _TOOL_CHOICES:
        raise remote.invalid(f"model.tool_choice must be one of: {', '.join(_TOOL_CHOICES)}", "tool_choice")
    for key in ("parallel_tool_calls", "cache_system", "stream"):
        if key in config and not isinstance(config[key], bool):
            raise remote.invalid(f"model.{key} must be true or false", key)
    remote.check_destination_config(
        config, default_url=DEFAULT_BASE_URL, default_key_env=DEFAULT_API_KEY_ENV, bindings=bindings
    )
    return dict(config)


# -- request and response -----------------------------------------------------------------


def build_request(ctx: TurnContext, config: dict[str, Any], names: FunctionNames) -> dict[str, Any]:
    """The Messages API request body for the next turn (without ``stream``)."""
    system: list[dict[str, Any]] = [
        {"type": "text", "text": text}
        for text in (ctx.instructions.strip(), remote.memories_block(ctx))
        if text
    ]
    if system and config.get("cache_system", True):
        system[-1]["cache_control"] = {"type": "ephemeral"}
    messages: list[dict[str, Any]] = [{"role": "user", "content": json.dumps(ctx.input, ensure_ascii=False)}]
    for i, item in enumerate(ctx.history):
        call_id = f"toolu_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": call_id, "name": names.function(item.tool), "input": item.args}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": json.dumps(item.result),
                        **({"is_error": True} if item.status != "SUCCEEDED" else {}),
                    }
                ],
            }
        )
    body: dict[str, Any] = {
        "model": config["model"],
        "max_tokens": config.get("max_tokens", DEFAULT_MAX_TOKENS),
        "messages": messages,
    }
    if system:
        body["system"] = system
    if ctx.tools:
        body["tools"] = [
            {"name": names.function(s.name), "description": s.description, "input_schema": s.parameters}
            for s in ctx.tools
        ]
        choice = config.get("tool_choice")
        parallel = config.get("parallel_tool_calls")
        if choice is not None or parallel is not None:
            tool_choice: dict[str, Any] = {"type": choice or "auto"}
            if parallel is not None and tool_choice["type"] != "none":
                tool_choice["disable_parallel_tool_use"] = not parallel
            body["tool_choice"] = tool_choice
    return body


def _bad(message: str) -> ProviderError:
    return ProviderError(f"anthropic: {message}", code=Code.PROVIDER_BAD_RESPONSE)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_of(data: object, into: Usage | None = None) -> Usage | None:
    """``usage`` of a message (or a stream's ``message_delta``, laid over ``into``: its counts
    are cumulative, and a field it leaves out keeps what ``message_start`` said)."""
    if not isinstance(data, dict):
        return into
    base = into or Usage()

    def pick(key: str, old: int) -> int:
        return _count(data[key]) if data.get(key) is not None else old

    return Usage(
        input_tokens=pick("input_tokens", base.input_tokens),
        output_tokens=pick("output_tokens", base.output_tokens),
        cache_read_tokens=pick("cache_read_input_tokens", base.cache_read_tokens),
        cache_write_tokens=pick("cache_creation_input_tokens", base.cache_write_tokens),
    )


def _turn(
    stop_reason: object, blocks: list[dict[str, Any]], names: FunctionNames, usage: Usage | None
) -> Turn:
    if stop_reason == "refusal":
        raise ProviderError("anthropic: the model refused (stop_reason refusal)", code=Code.PROVIDER_REFUSED)
    if stop_reason == "max_tokens":
        raise ProviderError(
            "anthropic: the answer stopped at the token limit (stop_reason max_tokens); raise max_tokens",
            code=Code.OUTPUT_TRUNCATED,
        )
    calls: list[ToolCall] = []
    texts: list[str] = []
    for n, block in enumerate(blocks, start=1):
        kind = block.get("type")
        if kind == "tool_use":
            if not isinstance(block.get("name"), str) or not block["name"]:
                raise _bad(f"tool use {n} has no name")
            if not isinstance(block.get("input"), dict):
                raise _bad(f"the input of tool use {n} is not a JSON object")
            calls.append(ToolCall(tool=names.tool(block["name"]), args=block["input"]))
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    if calls:
        return ToolCalls(calls, usage=usage)
    return FinalAnswer(remote.final_value("".join(texts)) if texts else None, usage=usage)


def parse_response(data: Any, names: FunctionNames) -> Turn:
    """The turn in a whole (not streamed) Messages API response."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise _bad("response has no content")
    blocks = [b for b in data["content"] if isinstance(b, dict)]
    return _turn(data.get("stop_reason"), blocks, names, usage_of(data.get("usage")))


class _Stream:
    """A streamed message put back together from its events."""

    def __init__(self, cap: remote.CappedText) -> None:
        self.cap = cap
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}  # tool_use input, as partial JSON
        self.stop_reason: str | None = None
        self.usage: Usage | None = None

    async def add(self, event: Any, ctx: TurnContext) -> None:
        kind = event.type
        if kind == "message_start":
            self.usage = usage_of(event.message.usage.model_dump())
        elif kind == "content_block_start":
            block = event.content_block.model_dump()
            if block.get("type") == "tool_use":
                block["input"] = {}
                self.json[event.index] = []
            self.blocks[event.index] = block
        elif kind == "content_block_delta":
            block = self.blocks.setdefault(event.index, {"type": "text", "text": ""})
            delta = event.delta
            if delta.type == "text_delta":
                block["text"] = block.get("text", "") + self.cap.add(delta.text)
                if ctx.on_text is not None and not self.json:
                    await ctx.on_text(delta.text)
            elif delta.type == "input_json_delta":
                self.json.setdefault(event.index, []).append(self.cap.add(delta.partial_json))
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason
            self.usage = usage_of(event.usage.model_dump(), self.usage)

    def turn(self, names: FunctionNames) -> Turn:
        if self.stop_reason is None:
            raise _bad("the stream ended before the message did (no stop_reason)")
        for n, (index, parts) in enumerate(sorted(self.json.items()), start=1):
            raw = "".join(parts) or "{}"
            try:
                self.blocks[index]["input"] = json.loads(raw)
            except (ValueError, RecursionError):
                raise _bad(f"the input of tool use {n} is not valid JSON") from None
        return _turn(self.stop_reason, [self.blocks[i] for i in sorted(self.blocks)], names, self.usage)


# -- the SDK over the guarded client ------------------------------------------------------


class AnthropicProvider(remote.SDKModel):
    """The provider (the class: ``validate``, ``create``) and a run's model (an instance)."""

    name = PROVIDER
    default_base_url = DEFAULT_BASE_URL
    default_key_env = DEFAULT_API_KEY_ENV
    sdk_spec = ("anthropic", "AsyncAnthropic", _SENT_HEADERS, "x-api-key", "")

    @classmethod
    def check_config(
        cls, config: object, bindings: Mapping[str, Iterable[Endpoint]] | None
    ) -> dict[str, Any]:
        return validate_anthropic_config(config, bindings=bindings)

    def build(self, ctx: TurnContext, names: FunctionNames) -> dict[str, Any]:
        return build_request(ctx, self._config, names)

    def status(self, exc: Any) -> ProviderError | remote.Retryable:
        if exc.status_code >= 400:
            return super().status(exc)
        # An ``error`` event inside a stream that began 200.
        inner = exc.body.get("error", exc.body) if isinstance(exc.body, dict) else exc.body
        kind = remote.error_type({"error": inner}) or "error"
        code = _RETRIED_TYPES.get(kind)
        if code is not None:
            return remote.Retryable(f"stream error ({kind})", code)
        return ProviderError(
            f"anthropic: stream error ({kind}) from {self._destination.shown}", code=Code.PROVIDER_FAILED
        )

    def endpoint(self, client: Any) -> Any:
        return client.messages

    def parse(self, data: Any, names: FunctionNames) -> Turn:
        return parse_response(data, names)

    def stream_state(self) -> remote.StreamState:
        return _Stream(self.capped_text())
