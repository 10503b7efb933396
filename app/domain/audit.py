"""The audit trail's pure part (docs/concepts/audit.md): the canonical form of an event, its
hash chain per workspace, and redacting diffs.

``hash = sha256(prev_hash + canonical JSON of the event)``, where the event is every field
but the hashes, keys sorted, no whitespace; the first event of a workspace (or the first
after a prune) continues from ``GENESIS`` (or the checkpoint's hash). Editing a stored
event changes its hash; deleting one breaks the next event's ``prev_hash``: ``verify``
finds the first seq where either happens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.domain.credentials import REDACTED, find_credential

GENESIS = "0" * 64
MAX_DIFF_VALUE_CHARS = 2_000


def canonical(event: Mapping[str, Any]) -> str:
    return json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def chain_hash(prev_hash: str, event: Mapping[str, Any]) -> str:
    return hashlib.sha256((prev_hash + canonical(event)).encode()).hexdigest()


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``{field: {"before": b, "after": a}}`` for every field whose value changed, with
    credential-like text redacted and long values cut."""
    changed: dict[str, Any] = {}
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name), after.get(name)
        if b != a:
            changed[name] = {"before": shown(name, b), "after": shown(name, a)}
    return changed


def shown(name: str, value: Any) -> Any:
    """A value as the audit trail keeps it: whole, unless the credential guard finds a
    credential in it (then only the rule that found it) or it is long (then cut, as text)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    rejection = find_credential([(name, text)], key=name, value=text)
    if rejection is not None:
        return REDACTED.format(rule=rejection.rule)
    if len(text) > MAX_DIFF_VALUE_CHARS:
        return text[:MAX_DIFF_VALUE_CHARS] + "…"
    return value


@dataclass(frozen=True, slots=True)
class Break:
    seq: int
    why: str


def first_break(
    rows: Iterable[tuple[int, str, str, Mapping[str, Any]]], *, start_hash: str, start_seq: int
) -> Break | None:
    """Walk ``(seq, prev_hash, hash, event)`` in seq order from ``start_seq`` (the first seq
    expected) continuing ``start_hash``; the first place the chain does not hold, or None."""
    expected_prev, expected_seq = start_hash, start_seq
    for seq, prev_hash, stored_hash, event in rows:
        if seq != expected_seq:
            return Break(expected_seq, f"event {expected_seq} is missing (next is {seq})")
        if prev_hash != expected_prev:
            return Break(seq, "its prev_hash does not match the event before it")
        if chain_hash(prev_hash, event) != stored_hash:
            return Break(seq, "its content does not match its hash (edited)")
        expected_prev, expected_seq = stored_hash, seq + 1
    return None
