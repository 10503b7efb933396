"""An agent's configuration as one immutable version (docs/concepts/versions.md).

Every ``createAgent``, and every ``updateAgent`` that changes a versioned field, writes the
agent's configuration as a new version numbered 1, 2, ...; a run is pinned to the version
current when it was created and every turn of it reads that version, never the live agent.

The configuration is a plain dict keyed by ``VERSIONED_FIELDS``: a new piece of
configuration (a budget, an input schema) is one more name there and one more key in each
new version, with no new table. Versions written before a key existed simply lack it:
read them with ``AgentConfig.of`` (``.get``), never by indexing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The agent columns a version holds. A change to any of them is a new version; a change to
# anything else (name, description, status) is not.
VERSIONED_FIELDS: tuple[str, ...] = (
    "instructions",
    "model",
    "tools",
    "policy",
    "memory_max_items",
    "memory_max_chars",
    "budget",
    "input_schema",
)

# ``Run.errorCode`` of a run whose pinned version's row is gone (removed by hand: Enverif
# never deletes one): it cannot run on the configuration it was created with, and no other
# is its own, so it fails rather than wait for good (docs/concepts/versions.md).
VERSION_MISSING = "AGENT_VERSION_MISSING"


def version_missing_message(version: int) -> str:
    return f"the agent's version {version}, which the run is pinned to, no longer exists; run the agent again"


def config_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """The versioned part of an agent's columns (``values``: column -> value)."""
    return {name: values.get(name) for name in VERSIONED_FIELDS}


def changes_configuration(current: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
    """Whether applying ``changes`` (column -> new value) to an agent whose versioned
    configuration is ``current`` makes a new version: some versioned value really differs."""
    return any(name in changes and changes[name] != current.get(name) for name in VERSIONED_FIELDS)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """What a run executes with: its agent's identity and its pinned version's configuration.

    The engine reads only this, never the live agent row, so an agent updated, paused or
    archived while the run waits changes nothing about how it goes on."""

    id: int
    workspace_id: int
    name: str
    version: int
    instructions: str | None
    model: dict[str, Any]
    tools: list[str]
    policy: dict[str, Any]
    memory_max_items: int
    memory_max_chars: int
    # The whole stored configuration, keys this class does not know included (a budget).
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls, *, id: int, workspace_id: int, name: str, version: int, config: Mapping[str, Any]
    ) -> AgentConfig:
        model = config.get("model")
        policy = config.get("policy")
        return cls(
            id=id,
            workspace_id=workspace_id,
            name=name,
            version=version,
            instructions=config.get("instructions"),
            model=model if isinstance(model, dict) else {},
            tools=[str(t) for t in config.get("tools") or []],
            policy=policy if isinstance(policy, dict) else {},
            memory_max_items=int(config.get("memory_max_items") or 0),
            memory_max_chars=int(config.get("memory_max_chars") or 0),
            config=dict(config),
        )
