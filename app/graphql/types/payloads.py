"""What the ``remove...`` mutations answer (docs/graphql/guide.md: deleting).

The object is gone, so the answer is a payload: ``deletedId``, the global id the object had,
for a client to drop it from its cache (Apollo's ``cache.evict``, Relay's ``@deleteRecord``),
and the object it belonged to, as it is now, for the lists that held it (an agent's
``memories`` and ``schedules``) to be read again in the same round trip. The older
``delete...`` mutations answer ``deletedId`` alone, as a bare ``ID!``.
"""

from __future__ import annotations

import strawberry

from app.domain.errors import NotFound
from app.graphql.context import Info
from app.graphql.types.agents import Agent

DELETED_ID = (
    "The global id the removed object had: drop it from a client cache (Apollo's cache.evict, "
    "Relay's @deleteRecord)."
)


@strawberry.type
class _RemovedFromAgent:
    deleted_id: strawberry.ID = strawberry.field(description=DELETED_ID)
    agent_id: strawberry.Private[int]

    @strawberry.field(description="The agent it belonged to, as it is now (without it).")  # type: ignore[untyped-decorator]
    async def agent(self, info: Info) -> Agent:
        row = await (await info.context.loaders()).agent.load(self.agent_id)
        if row is None:
            raise NotFound("the agent is gone")
        return Agent.from_row(row)


@strawberry.type(name="RemoveMemoryPayload", description="What removeMemory answers.")
class RemoveMemoryPayload(_RemovedFromAgent):
    pass


@strawberry.type(name="RemoveSchedulePayload", description="What removeSchedule answers.")
class RemoveSchedulePayload(_RemovedFromAgent):
    pass


@strawberry.type(name="RemoveMcpServerPayload", description="What removeMcpServer answers.")
class RemoveMcpServerPayload:
    deleted_id: strawberry.ID = strawberry.field(description=DELETED_ID)
