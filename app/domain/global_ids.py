"""Opaque global ids: base64url (unpadded) of ``"Type:<int>"``, e.g. ``Agent:12``.

Pure, so that every layer that hands an id to someone outside (the GraphQL edge, a delegate
call's outcome the model reads, the CLI) writes the same one (docs/graphql/frontends.md: every
id a client receives is the global id). Anything that does not decode to a known type and
a positive integer parses as None.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

NODE_TYPES = frozenset(
    {
        "Workspace",
        "Agent",
        "AgentVersion",
        "Run",
        "RunStep",
        "Memory",
        "Approval",
        "Schedule",
        "ApiToken",
        "AuditEvent",
        "McpServer",
        "MemoryRevision",
        "ScheduleFiring",
    }
)

# Objects that are not nodes (node(id:) does not fetch them) but have an id all the same, so
# that a normalised client cache (Apollo, urql, Relay) keeps one copy of each. The id names
# the owner: an agent's Policy and MemoryBudget, a run's Delegation; a RunEvent is its root
# run and seq. Never the same string as a node's id (Relay keys its store by id alone).
# (MemoryRevision and ScheduleFiring were here before they became nodes: their ids,
# "Type:<pk>", did not change.)
OBJECT_ID_TYPES = frozenset(
    {
        "Policy",
        "PolicyRule",
        "MemoryBudget",
        "Delegation",
        "RunEvent",
        "ApprovalNotification",
    }
)

_B64URL = re.compile(r"[A-Za-z0-9_-]{1,200}")
# Ids are BIGINT at most; anything longer is not ours (and would be slow to parse).
_PK = re.compile(r"[1-9][0-9]{0,18}")
_MAX_PK = 2**63 - 1


def encode_text(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def decode_text(value: str) -> str | None:
    if not isinstance(value, str) or not _B64URL.fullmatch(value):
        return None
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def parse_pk(text: str) -> int | None:
    if not _PK.fullmatch(text):
        return None
    pk = int(text)
    return pk if pk <= _MAX_PK else None


def to_global_id(type_name: str, pk: int) -> str:
    if type_name not in NODE_TYPES:
        raise ValueError(f"{type_name!r} is not a node type")
    return encode_text(f"{type_name}:{pk}")


def object_id(type_name: str, *parts: int) -> str:
    """The id of a non-node object (``OBJECT_ID_TYPES``): ``"Type:<a>[.<b>]"`` encoded."""
    if type_name not in OBJECT_ID_TYPES:
        raise ValueError(f"{type_name!r} is not an object id type")
    return encode_text(f"{type_name}:{'.'.join(str(part) for part in parts)}")


def parse_global_id(value: str) -> tuple[str, int] | None:
    """``(type, pk)`` for a well-formed id of a known type, else None."""
    decoded = decode_text(value)
    if decoded is None:
        return None
    type_name, sep, pk_text = decoded.partition(":")
    if not sep or type_name not in NODE_TYPES:
        return None
    pk = parse_pk(pk_text)
    return None if pk is None else (type_name, pk)


# The ids inside event payloads, by key: stored as database ids (the engine and the event
# labels read them), handed out as global ids.
PAYLOAD_ID_TYPES: dict[str, str] = {
    "agentId": "Agent",
    "runId": "Run",
    "childRunId": "Run",
    "parentStepId": "RunStep",
    "approvalId": "Approval",
}


def _is_pk(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def public_payload(payload: Any) -> Any:
    """An event payload with its ids (``PAYLOAD_ID_TYPES``, top level) as global ids; a value
    that is already one, or is no positive integer, stays as it is."""
    if not isinstance(payload, dict):
        return payload
    return {
        key: to_global_id(PAYLOAD_ID_TYPES[key], value)
        if key in PAYLOAD_ID_TYPES and _is_pk(value)
        else value
        for key, value in payload.items()
    }


def public_step_result(result: Any, child_run_id: int | None) -> Any:
    """A delegate step's outcome ``{status, result, error, runId}`` with its ``runId`` as a
    global id. Outcomes are written with one (app/services/transitions/tree.py); this covers
    those written before. Only the child's own id is rewritten: any other tool's result is
    the tool's data, not ours to change."""
    if child_run_id is None or not isinstance(result, dict) or result.get("runId") != child_run_id:
        return result
    return {**result, "runId": to_global_id("Run", child_run_id)}


def public_policy_chain(chain: object) -> list[object]:
    """A run's policy chain as clients read it: ``{agentId, agentName, policy}`` per link, the
    agent's global id and camel-case keys (stored as ``agent_id``/``agent_name``)."""
    links: list[object] = []
    for link in chain if isinstance(chain, list) else []:
        if not isinstance(link, dict):
            links.append(link)
            continue
        agent_id = link.get("agent_id")
        links.append(
            {
                "agentId": to_global_id("Agent", agent_id)
                if isinstance(agent_id, int) and _is_pk(agent_id)
                else agent_id,
                "agentName": link.get("agent_name"),
                "policy": link.get("policy"),
            }
        )
    return links
