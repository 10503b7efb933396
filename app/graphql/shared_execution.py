"""One GraphQL execution per live event and document, not one per subscriber (docs/graphql/guide.md).

A thousand operators watching one tree with the same document would otherwise have every
event executed a thousand times over, and serialized a thousand times: that, not Redis nor
the websocket, is what bounds fan-out in one API process. So:

* ``SharedEventExecutor`` executes a ``runTree`` event once for every subscription of the
  process that has the same event (workspace, tree, seq), the same operation (the document
  cache hands out one parsed document per text), the same values for the variables the
  selection reads, and the same role; the others reuse that result. Variables that only
  feed ``runTree``'s own arguments (``rootRunId``, ``afterSeq``) do not split the groups:
  they choose the stream, not what an event looks like.
* ``encode_next`` serializes such a shared result once and splices each subscription's
  operation id into the ``next`` message.

An event's log entry never changes, so sharing it is exact. ``RunEvent.run`` resolves "as
of delivery": with sharing, as of the first delivery of the group, which is at most
``SHARE_S`` earlier. A result with errors is never shared; each subscription then executes
the event itself, with its own context, as it would without this module.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

from graphql import ExecutionResult
from graphql.language import FieldNode, FragmentDefinitionNode, Node, OperationDefinitionNode, VariableNode
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from app.events.publish import EventMessage
from app.graphql.types.run_events import RunEvent
from app.services.event_labels import EventLabels

# How long one execution of an event serves the other subscriptions of the process. Every
# cache here forgets entries older than this (and holds at most MAX_SHARED), so what it keeps
# is the events of the last second, not a growing pile of payloads.
SHARE_S = 1.0
MAX_SHARED = 4_096

_Key = tuple[object, ...]


class _SharedResults:
    """Executions in flight or recently done, by key; bounded in count and age."""

    def __init__(self) -> None:
        self._entries: OrderedDict[_Key, tuple[float, asyncio.Future[ExecutionResult]]] = OrderedDict()

    def get(self, key: _Key, now: float) -> asyncio.Future[ExecutionResult] | None:
        entry = self._entries.get(key)
        if entry is None or now - entry[0] > SHARE_S:
            return None
        return entry[1]

    def put(self, key: _Key, now: float, future: asyncio.Future[ExecutionResult]) -> None:
        self._entries[key] = (now, future)
        self._entries.move_to_end(key)
        _forget_old(self._entries, now)

    def forget(self, key: _Key, future: asyncio.Future[ExecutionResult]) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[1] is future:
            del self._entries[key]


_results = _SharedResults()
_events: OrderedDict[tuple[int, int, int], tuple[float, RunEvent]] = OrderedDict()


async def run_event(
    message: EventMessage, labels: Callable[[EventMessage], Awaitable[EventLabels]]
) -> RunEvent:
    """The ``RunEvent`` of a log entry, built once for the process's subscriptions to the tree
    (within ``SHARE_S``): the same object then finds its execution shared above."""
    key = (message.workspace_id, message.root_run_id, message.seq)
    now = time.monotonic()
    entry = _events.get(key)
    if entry is not None and now - entry[0] <= SHARE_S:
        return entry[1]
    event = RunEvent.from_message(message, await labels(message))
    _events[key] = (now, event)
    _events.move_to_end(key)
    _forget_old(_events, now)
    return event


# Per operation (by identity, held so the id is not reused): the variables its events read.
_event_variables: OrderedDict[int, tuple[OperationDefinitionNode, frozenset[str]]] = OrderedDict()


class SharedEventExecutor(StrawberryGraphQLCoreExecutionContext):
    """strawberry's executor; a ``runTree`` event's execution is shared as described above."""

    _variables_key: str | None = None

    def build_per_event_executor(self, payload: Any) -> Any:
        if isinstance(payload, RunEvent):
            key = self._share_key(payload)
            done = None if key is None else _results.get(key, time.monotonic())
            if done is not None and done.done() and not done.cancelled() and done.exception() is None:
                # Executed already for another subscription: no copy of this executor needed.
                return _Executed(done.result())
        return super().build_per_event_executor(payload)

    def execute_operation(self, serially: bool | None = None) -> Any:
        event = self.root_value
        if serially is not False or not isinstance(event, RunEvent):
            return super().execute_operation(serially)
        key = self._share_key(event)
        if key is None:
            return super().execute_operation(serially)
        now = time.monotonic()
        shared = _results.get(key, now)
        if shared is not None:
            return self._reuse(shared, serially)
        outcome = super().execute_operation(serially)
        if not self.is_awaitable(outcome):
            result = cast(ExecutionResult, outcome)
            if not result.errors:
                _encoded.share(result.data)
                done: asyncio.Future[ExecutionResult] = asyncio.get_running_loop().create_future()
                done.set_result(result)
                _results.put(key, now, done)
            return result
        # Resolvers that await (say, `run { status }`): the others wait for this execution.
        future = asyncio.ensure_future(cast(Awaitable[ExecutionResult], outcome))
        _results.put(key, now, future)
        future.add_done_callback(lambda f: _share_or_forget(key, f))
        return _await_shielded(future)

    async def _reuse(self, shared: asyncio.Future[ExecutionResult], serially: bool | None) -> ExecutionResult:
        try:
            result = await asyncio.shield(shared)
        except asyncio.CancelledError:
            if shared.cancelled():
                result = None
            else:
                raise
        except Exception:
            result = None
        if result is None or result.errors:
            # Not shareable after all: this subscription executes the event itself.
            own = super().execute_operation(serially)
            return cast(ExecutionResult, await own if self.is_awaitable(own) else own)
        return result

    def _share_key(self, event: RunEvent) -> _Key | None:
        principal = getattr(self.context_value, "signed_in", None)
        if principal is None:
            return None
        message = event.message
        variables = self._variables_key
        if variables is None:
            # The same for every event of the subscription: worked out once (per-event
            # executors are copies of this one and inherit it).
            names = _variables_read_by_events(self.operation, self.fragment_definitions.values())
            values = {name: self.variable_values.coerced.get(name) for name in sorted(names)}
            try:
                variables = json.dumps(values, sort_keys=True, default=str) if values else ""
            except (TypeError, ValueError):
                return None
            self._variables_key = variables
        return (
            message.workspace_id,
            message.root_run_id,
            message.seq,
            principal.role,
            id(self.operation),
            variables,
        )


def _forget_old(entries: OrderedDict[Any, tuple[float, Any]], now: float) -> None:
    """Drop the oldest entries (insertion order) while too many or older than SHARE_S."""
    while entries:
        at = next(iter(entries.values()))[0]
        if len(entries) <= MAX_SHARED and now - at <= SHARE_S:
            return
        entries.popitem(last=False)


class _Executed:
    """Stands in for a per-event executor whose result another subscription computed."""

    __slots__ = ("_result",)

    def __init__(self, result: ExecutionResult) -> None:
        self._result = result

    def execute_operation(self, serially: bool | None = None) -> ExecutionResult:
        return self._result


def _share_or_forget(key: _Key, future: asyncio.Future[ExecutionResult]) -> None:
    if future.cancelled() or future.exception() is not None or future.result().errors:
        _results.forget(key, future)
    else:
        _encoded.share(future.result().data)


async def _await_shielded(future: asyncio.Future[ExecutionResult]) -> ExecutionResult:
    # Shielded: the first subscription going away must not cancel what the others await.
    return await asyncio.shield(future)


def _variables_read_by_events(
    operation: OperationDefinitionNode, fragments: Iterable[FragmentDefinitionNode] = ()
) -> frozenset[str]:
    """The operation's variables other than those used only as arguments of its root fields
    (any variable a fragment uses counts as read)."""
    cached = _event_variables.get(id(operation))
    if cached is not None and cached[0] is operation:
        return cached[1]
    read: set[str] = set()
    _collect_variables(list(fragments), read)
    for selection in operation.selection_set.selections:
        if isinstance(selection, FieldNode):
            _collect_variables(selection.directives, read)
            _collect_variables(selection.selection_set, read)
        else:
            _collect_variables(selection, read)
    _collect_variables(operation.directives, read)
    names = frozenset(read)
    _event_variables[id(operation)] = (operation, names)
    while len(_event_variables) > MAX_SHARED:
        _event_variables.popitem(last=False)
    return names


def _collect_variables(node: object, into: set[str]) -> None:
    if isinstance(node, VariableNode):
        into.add(node.name.value)
    elif isinstance(node, Node):
        for attribute in node.keys:
            _collect_variables(getattr(node, attribute, None), into)
    elif isinstance(node, (list, tuple)):
        for item in node:
            _collect_variables(item, into)


class _EncodedResults:
    """The JSON text of shared results, by the identity of their data, encoded at first send."""

    def __init__(self) -> None:
        self._texts: OrderedDict[int, tuple[float, tuple[object, str | None]]] = OrderedDict()

    def share(self, data: object) -> None:
        if id(data) not in self._texts:
            now = time.monotonic()
            self._texts[id(data)] = (now, (data, None))
            _forget_old(self._texts, now)

    def payload_text(self, data: object) -> str | None:
        entry = self._texts.get(id(data))
        if entry is None or entry[1][0] is not data:
            return None
        at, (_, text) = entry
        if text is None:
            text = json.dumps({"data": data}, separators=(",", ":"))
            self._texts[id(data)] = (at, (data, text))
        return text


_encoded = _EncodedResults()


def encode_next(message: object) -> str | None:
    """A ``next`` message carrying a shared result, as text: its payload serialized once for
    every subscription, with the operation's id spliced in. ``None`` for anything else."""
    if not isinstance(message, dict) or message.get("type") != "next":
        return None
    payload = message.get("payload")
    if not isinstance(payload, dict) or payload.keys() != {"data"}:
        return None
    text = _encoded.payload_text(payload["data"])
    if text is None:
        return None
    return f'{{"id":{json.dumps(message["id"])},"type":"next","payload":{text}}}'
