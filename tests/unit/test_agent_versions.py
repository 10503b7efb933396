"""Which changes make a new agent version, and how a stored version reads (app.domain.agent_versions)."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.actors import Actor, ActorKind
from app.domain.agent_versions import VERSIONED_FIELDS, AgentConfig, changes_configuration, config_of

CURRENT = {
    "instructions": "be brief",
    "model": {"provider": "scripted", "steps": []},
    "tools": ["http.*"],
    "policy": {"default": "ALLOW"},
    "memory_max_items": 20,
    "memory_max_chars": 4000,
    "budget": {"maxTurns": 5},
    "input_schema": {"type": "object"},
}


@pytest.mark.parametrize(
    ("changes", "new_version"),
    [
        ({}, False),
        ({"name": "renamed"}, False),
        ({"description": "d"}, False),
        ({"status": "PAUSED"}, False),
        ({"instructions": "be brief"}, False),  # the same value again
        ({"instructions": "be thorough"}, True),
        ({"instructions": None}, True),
        ({"model": {"provider": "scripted", "steps": [{"final": 1}]}}, True),
        ({"tools": ["http.*"]}, False),
        ({"tools": ["http.*", "webhook.post"]}, True),
        ({"policy": {"default": "DENY"}}, True),
        ({"memory_max_items": 20, "status": "ACTIVE"}, False),
        ({"memory_max_items": 0}, True),
        ({"memory_max_chars": 10, "name": "x"}, True),
    ],
)
def test_what_makes_a_new_version(changes: dict[str, Any], new_version: bool) -> None:
    assert changes_configuration(CURRENT, changes) is new_version


def test_the_record_holds_every_versioned_field_and_nothing_else() -> None:
    config = config_of({**CURRENT, "name": "n", "status": "ACTIVE"})
    assert set(config) == set(VERSIONED_FIELDS) and config == CURRENT


def test_a_version_without_a_later_key_still_reads() -> None:
    old = {k: v for k, v in CURRENT.items() if k != "memory_max_chars"}
    config = AgentConfig.of(
        id=1, workspace_id=2, name="a", version=3, config={**old, "future_key": {"tokens": 5}}
    )
    assert config.memory_max_chars == 0 and config.tools == ["http.*"]
    assert config.config["future_key"] == {"tokens": 5}  # a key this class does not know is kept


@pytest.mark.parametrize(
    ("raw", "actor"),
    [
        ({"kind": "TOKEN", "id": 4, "name": None}, Actor(ActorKind.TOKEN, 4)),
        ({"kind": "CLI", "id": None, "name": "ops"}, Actor(ActorKind.CLI, None, "ops")),
        ({"kind": "NOBODY"}, None),
        ("TOKEN", None),
        (None, None),
        ({"kind": "RUN", "id": "7"}, Actor(ActorKind.RUN)),
    ],
)
def test_stored_actors_read_leniently(raw: Any, actor: Actor | None) -> None:
    assert Actor.from_json(raw) == actor
    if actor is not None:
        assert Actor.from_json(actor.to_json()) == actor
