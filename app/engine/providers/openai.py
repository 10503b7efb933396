"""The ``openai`` provider: any OpenAI-compatible Chat Completions endpoint with tool calling,
on the official ``openai`` SDK (docs/extending/providers.md).

Config::

    {"provider": "openai", "model": "gpt-4o-mini",
     "base_url": "https://api.openai.com/v1",     # default
     "api_key_env": "OPENAI_API_KEY",             # default
     "temperature": 0.2,                          # optional, 0..2
     "max_tokens": 1024 | "max_completion_tokens": 1024,   # optional, one of them
     "tool_choice": "auto" | "required" | "none", # optional (with tools)
     "parallel_tool_calls": true,                 # optional (with tools)
     "stream": true}                              # default: stream when someone listens

The SDK runs over the worker's guarded client (``app.engine.net``), with its own retries off
(``remote.with_retries`` retries instead). What the key is, where it may go and how failures
read are ``remote``'s: the key is read at call time, every request is checked against
``ENVERIF_PROVIDER_KEYS`` in the SDK's ``_prepare_request`` hook before a byte is sent, and
only headers of our own choosing leave (the SDK would add ``OpenAI-Organization`` and the
like from the worker's environment). Errors never quote the remote body.

Tool names contain dots, which function names may not: ``http.get`` is offered as
``http__get`` and mapped back when the model calls it. Usage: ``prompt_tokens`` less its
``cached_tokens`` is ``input_tokens`` (so cached input is priced once, as ``cacheRead``),
``completion_tokens`` is ``output_tokens``.
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
from app.engine.providers.remote import FunctionNames as FunctionNames  # the tests' and plugins' name
from app.settings import OPENAI_DEFAULT_BASE_URL

PROVIDER = "openai"
DEFAULT_BASE_URL = OPENAI_DEFAULT_BASE_URL
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
_KEYS = frozenset(
    {
        "provider",
        "model",
        "base_url",
        "api_key_env",
        "temperature",
        "max_tokens",
        "max_completion_tokens",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
    }
)
_TOOL_CHOICES = ("auto", "required", "none")
# The headers a request may carry; anything else the SDK adds (``OpenAI-Organization``,
# ``OpenAI-Project`` from the worker's environment) is dropped before it is sent.
_SENT_HEADERS = frozenset(
    {"host", "accept", "accept-encoding", "content-type", "content-length", "user-agent", "authorization"}
)


# -- config -------------------------------------------------------------------------------


def validate_openai_config(
    cfg: object, *, bindings: Mapping[str, Iterable[Endpoint]] | None = None
) -> dict[str, Any]:
    """Check an openai model config; returns a copy. Raises ``ValidationFailed`` naming the
    key that is wrong (``model.base_url``, ...).

    ``bindings``: where the deployment lets each key variable go (``settings.key_bindings``,
    from ``ENVERIF_PROVIDER_KEYS``); ``None`` checks only the config's shape.
    """
    config = remote.check_shape(cfg, PROVIDER, _KEYS)
    remote.check_model_name(config, "gpt-4o-mini")
    remote.check_number(config, "temperature", 0, 2)
    for key in ("max_tokens", "max_completion_tokens"):
        remote.check_number(config, key, 1, 1_000_000, integer=True)
    if config.get("max_tokens") is not None and config.get("max_completion_tokens") is not None:
        raise remote.invalid(
            "model.max_completion_tokens: give max_tokens or max_completion_tokens, not both",
            "max_completion_tokens",
        )
    if "tool_choice" in config and config["tool_choice"] not in _TOOL_CHOICES:
        raise remote.invalid(f"model.tool_choice must be one of: {', '.join(_TOOL_CHOICES)}", "tool_choice")
    for key in ("parallel_tool_calls", "stream"):
        if key in config and not isinstance(config[key], bool):
            raise remote.invalid(f"model.{key} must be true or false", key)
    remote.check_destination_config(
        config, default_url=DEFAULT_BASE_URL, default_key_env=DEFAULT_API_KEY_ENV, bindings=bindings
    )
    return dict(config)


# -- request and response -----------------------------------------------------------------


def _system_prompt(ctx: TurnContext) -> str:
    parts = [ctx.instructions.strip()] if ctx.instructions.strip() else []
    if memories := remote.memories_block(ctx):
        parts.append(memories)
    return "\n\n".join(parts)


def build_request(ctx: TurnContext, config: dict[str, Any], names: FunctionNames) -> dict[str, Any]:
    """The Chat Completions request body for the next turn (without ``stream``)."""
    messages: list[dict[str, Any]] = []
    system = _system_prompt(ctx)
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": json.dumps(ctx.input, ensure_ascii=False)})
    # Each past call is replayed as an assistant tool call followed by its result. Ids only
    # have to pair a call with its result inside this request, so the position suffices.
    for i, item in enumerate(ctx.history):
        call_id = f"call_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": names.function(item.tool), "arguments": json.dumps(item.args)},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(item.result)})
    body: dict[str, Any] = {"model": config["model"], "messages": messages}
    if ctx.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": names.function(spec.name),
                    "description": spec.description,
                    "parameters": spec.parameters,
                },
            }
            for spec in ctx.tools
        ]
        for key in ("tool_choice", "parallel_tool_calls"):
            if config.get(key) is not None:
                body[key] = config[key]
    for key in ("temperature", "max_tokens", "max_completion_tokens"):
        if config.get(key) is not None:
            body[key] = config[key]
    return body


def _bad(message: str) -> ProviderError:
    return ProviderError(f"openai: {message}", code=Code.PROVIDER_BAD_RESPONSE)


def usage_of(data: object) -> Usage | None:
    """``usage`` of a response or of a stream's last chunk, in our terms (see the module
    docstring); None when the server reported none."""
    if not isinstance(data, dict):
        return None
    prompt, completion = _count(data.get("prompt_tokens")), _count(data.get("completion_tokens"))
    details = data.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(input_tokens=max(prompt - cached, 0), output_tokens=completion, cache_read_tokens=cached)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _calls(raw: list[tuple[object, object]], names: FunctionNames) -> list[ToolCall]:
    """Tool calls from (name, arguments) pairs. Errors say which call, never what the answer
    held: the run's error is shown to every viewer, and nothing that came back from
    base_url is theirs to read."""
    calls: list[ToolCall] = []
    for n, (name, arguments) in enumerate(raw, start=1):
        if not isinstance(name, str) or not name:
            raise _bad(f"tool call {n} has no function name")
        arguments = arguments or "{}"
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
        except (ValueError, RecursionError):
            raise _bad(f"the arguments of tool call {n} are not valid JSON") from None
        if not isinstance(args, dict):
            raise _bad(f"the arguments of tool call {n} are not a JSON object")
        calls.append(ToolCall(tool=names.tool(name), args=args))
    return calls


def _finish(
    finish_reason: object, content: object, refusal: object, raw_calls: list[tuple[object, object]],
    names: FunctionNames, usage: Usage | None,
) -> Turn:  # fmt: skip
    """The turn a (whole or streamed) choice amounts to."""
    if finish_reason == "content_filter" or (isinstance(refusal, str) and refusal):
        raise ProviderError(
            "openai: the model refused (content filter or refusal)", code=Code.PROVIDER_REFUSED
        )
    if finish_reason == "length":
        raise ProviderError(
            "openai: the answer stopped at the token limit (finish_reason length); raise max_tokens",
            code=Code.OUTPUT_TRUNCATED,
        )
    if raw_calls:
        return ToolCalls(_calls(raw_calls, names), usage=usage)
    if isinstance(content, str):
        return FinalAnswer(remote.final_value(content), usage=usage)
    return FinalAnswer(content, usage=usage)


def parse_response(data: Any, names: FunctionNames) -> Turn:
    """The turn in a whole (not streamed) Chat Completions response."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise _bad("response has no choices[0].message") from exc
    if not isinstance(message, dict):
        raise _bad("choices[0].message is not an object")
    raw: list[tuple[object, object]] = []
    for tc in message.get("tool_calls") or []:
        function = tc.get("function") if isinstance(tc, dict) else None
        raw.append(
            (function.get("name"), function.get("arguments")) if isinstance(function, dict) else (None, None)
        )
    return _finish(
        choice.get("finish_reason") if isinstance(choice, dict) else None,
        message.get("content"),
        message.get("refusal"),
        raw,
        names,
        usage_of(data.get("usage")),
    )


class _Stream:
    """A streamed choice put back together: text as it comes, tool calls by index."""

    def __init__(self, cap: remote.CappedText) -> None:
        self.cap = cap
        self.text: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [name, arguments]
        self.finish_reason: str | None = None
        self.refusal = ""
        self.usage: Usage | None = None

    async def add(self, chunk: Any, ctx: TurnContext) -> None:
        if chunk.usage is not None:
            self.usage = usage_of(chunk.usage.model_dump())
        for choice in chunk.choices or []:
            if choice.index != 0:
                continue
            delta = choice.delta
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            if delta is None:
                continue
            if getattr(delta, "refusal", None):
                self.refusal += self.cap.add(delta.refusal)
            for tc in delta.tool_calls or []:
                name_args = self.calls.setdefault(tc.index, ["", ""])
                if tc.function is not None:
                    name_args[0] += self.cap.add(tc.function.name or "")
                    name_args[1] += self.cap.add(tc.function.arguments or "")
            if delta.content:
                self.text.append(self.cap.add(delta.content))
                if ctx.on_text is not None and not self.calls:
                    await ctx.on_text(delta.content)

    def turn(self, names: FunctionNames) -> Turn:
        if self.finish_reason is None:
            raise _bad("the stream ended before the answer did (no finish_reason)")
        raw: list[tuple[object, object]] = [(self.calls[i][0], self.calls[i][1]) for i in sorted(self.calls)]
        content = "".join(self.text) if self.text or not raw else None
        return _finish(self.finish_reason, content, self.refusal, raw, names, self.usage)


# -- the SDK over the guarded client ------------------------------------------------------


class OpenAIProvider(remote.SDKModel):
    """The provider (the class: ``validate``, ``create``) and a run's model (an instance)."""

    name = PROVIDER
    default_base_url = DEFAULT_BASE_URL
    default_key_env = DEFAULT_API_KEY_ENV
    sdk_spec = ("openai", "AsyncOpenAI", _SENT_HEADERS, "authorization", "Bearer ")
    stream_args = {"stream": True, "stream_options": {"include_usage": True}}

    @classmethod
    def check_config(
        cls, config: object, bindings: Mapping[str, Iterable[Endpoint]] | None
    ) -> dict[str, Any]:
        return validate_openai_config(config, bindings=bindings)

    def build(self, ctx: TurnContext, names: FunctionNames) -> dict[str, Any]:
        return build_request(ctx, self._config, names)

    def endpoint(self, client: Any) -> Any:
        return client.chat.completions

    def parse(self, data: Any, names: FunctionNames) -> Turn:
        return parse_response(data, names)

    def stream_state(self) -> remote.StreamState:
        return _Stream(self.capped_text())
