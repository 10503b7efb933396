"""The memory tools (docs/concepts/memory.md): ``memory.search`` (READ), ``memory.remember``
(INTERNAL_WRITE), ``memory.forget`` (DESTRUCTIVE, so it always waits for an approval).

STATE tools: they run inside their step's fenced transaction (``ToolContext.writer``), so a
memory write commits together with the step's result and its ``MEMORY_WRITTEN`` event, and a
worker that lost its lease writes nothing. They are thin adapters over the same service
cores the operators' mutations use (``app.services.memories``, ``app.services.memory_search``):
same limits, same credential guard, same revisions (recording the run).

Refusals are ``ToolError``s, which the model sees as ``{"error": {"code", "message"}}`` and
which roll back anything the call wrote: ``VALIDATION_FAILED`` naming the argument,
``CREDENTIAL_REJECTED`` naming the rule (never echoing the text; the step's stored
arguments are replaced by a redacted copy).
"""

from __future__ import annotations

from typing import Any

from app.domain.credentials import screen_memory_write
from app.domain.errors import EnverifError
from app.domain.model_errors import ModelErrorCode
from app.domain.policy import RiskClass
from app.domain.run_events import EventType
from app.engine.base import RunWriter, ToolContext, ToolError, ToolKind
from app.services import memories, memory_search

_STRING_LIST = {"type": "array", "items": {"type": "string"}}


def _writer(ctx: ToolContext) -> RunWriter:
    if ctx.writer is None:  # the loop runs STATE tools with a writer; anything else is a bug
        raise RuntimeError("memory tools must run as STATE tools (no writer given)")
    return ctx.writer


def _args(args: object, *, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise ToolError(ModelErrorCode.VALIDATION_FAILED, "arguments must be an object")
    missing = sorted(required - set(args))
    if missing:
        raise ToolError(ModelErrorCode.VALIDATION_FAILED, f"missing argument(s): {', '.join(missing)}")
    unknown = sorted(set(args) - required - optional)
    if unknown:
        raise ToolError(ModelErrorCode.VALIDATION_FAILED, f"unknown argument(s): {', '.join(unknown)}")
    return args


def _string(args: dict[str, Any], name: str) -> str:
    value = args[name]
    if not isinstance(value, str):
        raise ToolError(ModelErrorCode.VALIDATION_FAILED, f"{name} must be a string")
    return value


def _optional_tags(args: dict[str, Any]) -> list[str] | None:
    tags = args.get("tags")
    if tags is None:
        return None
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ToolError(ModelErrorCode.VALIDATION_FAILED, "tags must be a list of strings")
    return tags


def _optional_number(args: dict[str, Any], name: str) -> float | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(ModelErrorCode.VALIDATION_FAILED, f"{name} must be a number")
    return float(value)


def _refusal(exc: EnverifError) -> ToolError:
    # The service's message names the field (and for credentials the rule), never the value.
    # Its code is one of the API's (VALIDATION_FAILED, CREDENTIAL_REJECTED, CONFLICT), which
    # the model sees under the same name.
    return ToolError(ModelErrorCode(exc.code), exc.message)


class MemorySearchTool:
    name = "memory.search"
    description = (
        "Search this agent's memories from earlier runs. 'query': words to look for in keys, "
        "values and tags (each matches as a prefix; memories holding every word, or any word "
        "when fewer than 'limit' hold them all). 'tags': only memories "
        "carrying all of them. Without a query: the most important, most recent memories. "
        f"Returns at most 'limit' (default {memory_search.DEFAULT_SEARCH_LIMIT}, "
        f"max {memory_search.MAX_SEARCH_LIMIT}), best first."
    )
    risk = RiskClass.READ
    kind = ToolKind.STATE  # reads the database and marks what it returns as used
    timeout_s: float | None = None
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "tags": _STRING_LIST,
            "limit": {"type": "integer", "minimum": 1, "maximum": memory_search.MAX_SEARCH_LIMIT},
        },
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        args = _args(args, required=set(), optional={"query", "tags", "limit"})
        query = None if args.get("query") is None else _string(args, "query")
        tags = _optional_tags(args)
        limit = args.get("limit", memory_search.DEFAULT_SEARCH_LIMIT)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ToolError(ModelErrorCode.VALIDATION_FAILED, "limit must be an integer")
        if not 1 <= limit <= memory_search.MAX_SEARCH_LIMIT:
            raise ToolError(
                ModelErrorCode.VALIDATION_FAILED,
                f"limit must be between 1 and {memory_search.MAX_SEARCH_LIMIT}",
            )
        try:
            if tags is not None:
                tags = memories.check_tags(tags)
        except EnverifError as exc:
            raise _refusal(exc) from None
        writer = _writer(ctx)
        found = await memory_search.search(
            writer.session,
            workspace_id=writer.workspace_id,
            agent_id=writer.agent_id,
            query=query,
            tags=tags,
            limit=limit,
            now=writer.now,
            mark_used=True,
        )
        return {
            "memories": [
                {"key": m.key, "value": m.value, "tags": list(m.tags or []), "importance": m.importance}
                for m in found
            ]
        }


class MemoryRememberTool:
    name = "memory.remember"
    description = (
        "Remember a fact for later runs of this agent, under a stable 'key' (exact, "
        "case-sensitive; remembering an existing key replaces its value). Optional 'tags' and "
        "'importance' (0..1, default 0.5; higher is injected first). Never store credentials: "
        "passwords, tokens, keys and cookies are refused."
    )
    risk = RiskClass.INTERNAL_WRITE
    kind = ToolKind.STATE
    timeout_s: float | None = None
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "key": {"type": "string", "maxLength": memories.MAX_KEY_CHARS},
            "value": {"type": "string"},
            "tags": _STRING_LIST,
            "importance": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["key", "value"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        # The planner refuses such a call before it is stored; this is the second line (a
        # call recorded under an older guard and approved later): the refusal redacts the
        # stored arguments too, whatever else is wrong with them.
        if isinstance(args, dict) and (screened := screen_memory_write(args)) is not None:
            raise ToolError(
                ModelErrorCode.CREDENTIAL_REJECTED,
                screened.rejection.message,
                redacted_arguments=screened.arguments,
            )
        args = _args(args, required={"key", "value"}, optional={"tags", "importance"})
        key, value = _string(args, "key"), _string(args, "value")
        tags = _optional_tags(args)
        importance = _optional_number(args, "importance")
        writer = _writer(ctx)
        try:
            written = await memories.remember(
                writer.session,
                workspace_id=writer.workspace_id,
                agent_id=writer.agent_id,
                key=key,
                value=value,
                tags=tags,
                importance=importance,
                now=writer.now,
                max_value_chars=ctx.settings.max_memory_chars,
                source_run_id=writer.run_id,
            )
        except EnverifError as exc:
            raise _refusal(exc) from None
        writer.emit(
            EventType.MEMORY_WRITTEN,
            payload={
                "key": written.memory.key,
                "action": "CREATE" if written.created else "UPDATE",
                "created": written.created,
            },
        )
        return {"key": written.memory.key, "created": written.created}


class MemoryForgetTool:
    name = "memory.forget"
    description = "Delete this agent's memory under 'key' (exact). Needs an operator's approval."
    risk = RiskClass.DESTRUCTIVE
    kind = ToolKind.STATE
    timeout_s: float | None = None
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"key": {"type": "string", "maxLength": memories.MAX_KEY_CHARS}},
        "required": ["key"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        key = _string(_args(args, required={"key"}, optional=set()), "key")
        writer = _writer(ctx)
        try:
            deleted = await memories.forget(
                writer.session, agent_id=writer.agent_id, key=key, now=writer.now, source_run_id=writer.run_id
            )
        except EnverifError as exc:
            raise _refusal(exc) from None
        if deleted:  # an unknown key changes nothing, so there is nothing to log
            writer.emit(EventType.MEMORY_WRITTEN, payload={"key": key, "action": "DELETE", "deleted": True})
        return {"key": key, "deleted": deleted}


def memory_tools() -> list[MemorySearchTool | MemoryRememberTool | MemoryForgetTool]:
    return [MemorySearchTool(), MemoryRememberTool(), MemoryForgetTool()]
