"""Who did something (``Actor``) and an agent's pinned configurations (``AgentVersion``):
docs/concepts/versions.md and docs/concepts/audit.md."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from strawberry.scalars import JSON

from app.db import orm
from app.domain import actors
from app.domain.actors import ActorKind
from app.domain.agent_versions import AgentConfig
from app.domain.global_ids import object_id
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types import enums as _enums  # noqa: F401  (registers the GraphQL enums)
from app.graphql.types.agents import MemoryBudget, Policy
from app.graphql.types.node import NODE_ID, Connection, Node

# The global-id type an actor's id names.
_ID_TYPES = {ActorKind.TOKEN: "ApiToken", ActorKind.RUN: "Run", ActorKind.SCHEDULE: "Schedule"}


@strawberry.type(
    name="Actor", description="Who did something: a token, the CLI, a run, a schedule, the server."
)
class Actor:
    kind: ActorKind = strawberry.field(
        description="What kind of actor: a token, a run, a schedule, the CLI or the server itself."
    )
    id: strawberry.ID | None = strawberry.field(
        description="The token's, run's or schedule's id; null for the CLI and the server."
    )
    name: str | None = strawberry.field(
        description="The token's name (as it is now), or the operating-system user of a CLI command."
    )

    @classmethod
    async def of(cls, info: Info, raw: Any) -> Actor | None:
        actor = actors.Actor.from_json(raw)
        if actor is None:
            return None
        name = actor.name
        if actor.kind is ActorKind.TOKEN and actor.id is not None and name is None:
            token = await (await info.context.loaders()).token.load(actor.id)
            name = None if token is None else token.name
        type_name = _ID_TYPES.get(actor.kind)
        gid = (
            None
            if type_name is None or actor.id is None
            else strawberry.ID(to_global_id(type_name, actor.id))
        )
        return cls(kind=actor.kind, id=gid, name=name)


@strawberry.type(
    name="AgentVersion",
    description="One immutable configuration of an agent; every run is pinned to one.",
)
class AgentVersion(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    version: int = strawberry.field(
        description="1 for the configuration the agent was created with, then 2, 3, ..."
    )
    created_at: datetime = strawberry.field(description="When this version was written.")
    instructions: str | None = strawberry.field(description="The system prompt of this version.")
    model: JSON = strawberry.field(description="The model of this version: `{provider, model, ...}`.")
    tools: list[str] = strawberry.field(description="Name patterns of the tools this version is offered.")
    policy: Policy = strawberry.field(description="The policy of this version.")
    memory_budget: MemoryBudget = strawberry.field(description="The memory budget of this version.")
    budget: JSON | None = strawberry.field(description="The version's budget, when it has one.")
    input_schema: JSON | None = strawberry.field(description="The version's input schema, when it has one.")
    row: strawberry.Private[orm.AgentVersion]

    @classmethod
    def from_row(cls, row: orm.AgentVersion) -> AgentVersion:
        config = AgentConfig.of(id=row.agent_id, workspace_id=row.workspace_id, name="",
                                version=row.version, config=row.config or {})  # fmt: skip
        return cls(
            id=strawberry.ID(to_global_id("AgentVersion", row.id)),
            version=row.version,
            created_at=row.created_at,
            instructions=config.instructions,
            model=JSON(config.model),
            tools=config.tools,
            policy=Policy.from_json(config.policy, row.agent_id, row.version),
            memory_budget=MemoryBudget(
                id=strawberry.ID(object_id("MemoryBudget", row.agent_id, row.version)),
                max_items=config.memory_max_items,
                max_chars=config.memory_max_chars,
            ),
            budget=config.config.get("budget"),
            input_schema=config.config.get("input_schema"),
            row=row,
        )

    @strawberry.field(description="Who wrote this version.")
    async def created_by(self, info: Info) -> Actor | None:
        return await Actor.of(info, self.row.created_by)


@strawberry.type(
    name="AgentVersionConnection", description="A page of agent versions (Relay cursor connection)."
)
class AgentVersionConnection(Connection[AgentVersion]):
    pass
