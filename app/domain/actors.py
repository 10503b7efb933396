"""Who did something: the actor recorded on versions, runs, approvals and audit events
(docs/concepts/audit.md).

``TOKEN``: a call through the API (``id`` is the token's); ``CLI``: the ``enverif`` command
on the server's host (``name`` is the operating-system user); ``RUN``: an agent's own run
(``id`` is the run's); ``SCHEDULE``: a schedule's firing; ``SYSTEM``: the server itself (a
migration, the sweeper).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class ActorKind(enum.StrEnum):
    TOKEN = "TOKEN"
    RUN = "RUN"
    SCHEDULE = "SCHEDULE"
    CLI = "CLI"
    SYSTEM = "SYSTEM"


@dataclass(frozen=True, slots=True)
class Actor:
    kind: ActorKind
    id: int | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "id": self.id, "name": self.name}

    @classmethod
    def from_json(cls, raw: Any) -> Actor | None:
        """Lenient: a stored actor that is not one reads as None, never as an error."""
        if not isinstance(raw, dict) or raw.get("kind") not in ActorKind.__members__:
            return None
        actor_id = raw.get("id")
        name = raw.get("name")
        return cls(
            kind=ActorKind(raw["kind"]),
            id=actor_id if isinstance(actor_id, int) else None,
            name=name if isinstance(name, str) else None,
        )


SYSTEM = Actor(ActorKind.SYSTEM)
