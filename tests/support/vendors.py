"""Loopback stand-ins for the OpenAI Chat Completions and Anthropic Messages APIs.

Each speaks the wire format the vendor's public API reference documents, the way the
official SDKs read it: a JSON body, or, when the request says ``"stream": true``, the
vendor's SSE event sequence (OpenAI: ``data: {chunk}`` lines ending in ``data: [DONE]``, the
usage in a last chunk when ``stream_options.include_usage``; Anthropic: ``message_start``,
``content_block_start/delta/stop``, ``message_delta``, ``message_stop``, with ``ping``).

A test scripts whole answers (``Reply``) or a ``responder`` that computes one from the
request; the server streams a whole answer itself when asked to, its text cut into pieces
of ``piece_chars``, so one script serves both modes. Every request is recorded with its
headers and JSON body.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import serve_in_thread


@dataclass
class Reply:
    """One answer: a status and a whole JSON body (streamed when the request asks), or raw
    SSE ``events`` [(event name or None, data)] sent as they are."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    events: list[tuple[str | None, Any]] | None = None
    # Seconds between streamed events, so a test can watch pieces arrive one by one.
    event_gap_s: float = 0.0


@dataclass
class FakeVendor:
    replies: list[Reply] = field(default_factory=list)
    responder: Callable[[dict[str, Any]], Reply] | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    piece_chars: int = 4

    def clear(self) -> None:
        self.replies.clear()
        self.requests.clear()
        self.times.clear()
        self.responder = None

    def next_reply(self, body: dict[str, Any]) -> Reply:
        if self.replies:
            return self.replies.pop(0)
        if self.responder is not None:
            return self.responder(body)
        return Reply(500, {"error": {"type": "server_error", "message": "no reply scripted"}})


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


async def _sse(events: list[tuple[str | None, Any]], gap_s: float) -> AsyncIterator[bytes]:
    for name, data in events:
        line = data if isinstance(data, str) else json.dumps(data)
        yield ((f"event: {name}\n" if name else "") + f"data: {line}\n\n").encode()
        if gap_s:
            await asyncio.sleep(gap_s)


def _app(
    api: FakeVendor, path: str, to_events: Callable[[dict[str, Any], dict[str, Any], int], list[Any]]
) -> Starlette:
    async def endpoint(request: Request) -> Response:
        api.times.append(time.monotonic())
        body = await request.json()
        api.requests.append({"headers": dict(request.headers), "json": body, "peer": request.client})
        reply = api.next_reply(body)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.events is not None or (reply.status == 200 and body.get("stream")):
            events = (
                reply.events if reply.events is not None else to_events(reply.body, body, api.piece_chars)
            )
            return StreamingResponse(
                _sse(events, reply.event_gap_s), media_type="text/event-stream", headers=reply.headers
            )
        return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)

    return Starlette(routes=[Route(path, endpoint, methods=["POST"])])


# -- OpenAI Chat Completions ----------------------------------------------------------------


def openai_chat(
    message: dict[str, Any], *, finish_reason: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``chat.completion`` with one choice."""
    if finish_reason is None:
        finish_reason = "tool_calls" if message.get("tool_calls") else "stop"
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "test-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def openai_text(content: str | None, **kwargs: Any) -> Reply:
    return Reply(body=openai_chat({"content": content}, **kwargs))


def openai_calls(*calls: tuple[str, str], **kwargs: Any) -> Reply:
    tool_calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(calls)
    ]
    return Reply(body=openai_chat({"content": None, "tool_calls": tool_calls}, **kwargs))


def openai_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _openai_events(whole: dict[str, Any], request: dict[str, Any], size: int) -> list[Any]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return None, {
            "id": whole["id"],
            "object": "chat.completion.chunk",
            "created": 1,
            "model": whole["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    choice = whole["choices"][0]
    message = choice["message"]
    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    if message.get("refusal"):
        events.append(chunk({"refusal": message["refusal"]}))
    for piece in _pieces(message.get("content") or "", size) if message.get("content") else []:
        events.append(chunk({"content": piece}))
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _pieces(fn["arguments"], size):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    events.append(chunk({}, choice["finish_reason"]))
    if (request.get("stream_options") or {}).get("include_usage") and "usage" in whole:
        events.append((None, {"id": whole["id"], "object": "chat.completion.chunk", "created": 1,
                              "model": whole["model"], "choices": [], "usage": whole["usage"]}))  # fmt: skip
    events.append((None, "[DONE]"))
    return events


def openai_app(api: FakeVendor) -> Starlette:
    """``POST /v1/chat/completions``."""
    return _app(api, "/v1/chat/completions", _openai_events)


# -- Anthropic Messages ---------------------------------------------------------------------


def anthropic_message(
    content: list[dict[str, Any]], *, stop_reason: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_text(text: str, **kwargs: Any) -> Reply:
    return Reply(body=anthropic_message([{"type": "text", "text": text}], **kwargs))


def anthropic_calls(*calls: tuple[str, dict[str, Any]], text: str | None = None, **kwargs: Any) -> Reply:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [
        {"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": a} for i, (n, a) in enumerate(calls)
    ]
    return Reply(body=anthropic_message(blocks, **kwargs))


def anthropic_error(status: int, kind: str, message: str = "details", **headers: str) -> Reply:
    return Reply(status, {"type": "error", "error": {"type": kind, "message": message}}, headers=headers)


def _anthropic_events(whole: dict[str, Any], request: dict[str, Any], size: int) -> list[Any]:
    usage = whole["usage"]
    start_usage = {**usage, "output_tokens": 1}
    events: list[Any] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {**whole, "content": [], "stop_reason": None, "usage": start_usage},
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(whole["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))  # fmt: skip
            for piece in _pieces(block["text"], size):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "text_delta", "text": piece}}))  # fmt: skip
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": start}))  # fmt: skip
            for piece in _pieces(json.dumps(block["input"]), size):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "input_json_delta", "partial_json": piece}}))  # fmt: skip
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                                     "usage": {"output_tokens": usage["output_tokens"]}}))  # fmt: skip
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def anthropic_app(api: FakeVendor) -> Starlette:
    """``POST /v1/messages``."""
    return _app(api, "/v1/messages", _anthropic_events)


# -- for tests ------------------------------------------------------------------------------


@dataclass
class VendorServer:
    base_url: str  # what an agent's model.base_url would say
    api: FakeVendor


@contextmanager
def serve_vendor(make_app: Callable[[FakeVendor], Starlette], path: str = "") -> Iterator[VendorServer]:
    """A fake vendor on 127.0.0.1 in its own thread; ``path`` is appended to the base URL
    (OpenAI's SDK wants ``.../v1``, Anthropic's the origin)."""
    api = FakeVendor()
    with serve_in_thread(make_app(api)) as port:
        yield VendorServer(f"http://127.0.0.1:{port}{path}", api)


class Collect:
    """A ``TurnContext.on_text`` that keeps every piece it is given."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, text: str) -> None:
        self.pieces.append(text)
