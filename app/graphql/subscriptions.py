"""``Subscription.runTree``: a run tree's event log, replayed then streamed live (DESIGN §6).

Order of operations is what makes the stream complete: subscribe to the process's event hub
first, then replay the log from the database, then follow live messages (see
``services.events.tree_events`` for duplicates, gaps and resyncs).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry

from app.domain.agents import Role
from app.domain.errors import ValidationFailed
from app.events.hub import EventHub
from app.graphql.context import Context, Info
from app.graphql.ids import from_global_id
from app.graphql.types.events import RunEvent
from app.services import events as event_log


@strawberry.type(name="Subscription")
class Subscription:
    @strawberry.subscription(
        description=(
            "Every event of a run tree after afterSeq (all when omitted), then live ones, in seq "
            "order without gaps or repeats. rootRunId may name any run of the tree: the stream is "
            "always the whole tree's, from its root."
        )
    )
    async def run_tree(
        self, info: Info, root_run_id: strawberry.ID, after_seq: int | None = None
    ) -> AsyncGenerator[RunEvent, None]:
        context = info.context
        principal = await context.principal()
        principal.require(Role.VIEWER)
        if after_seq is not None and after_seq < 0:
            raise ValidationFailed("afterSeq must be 0 or more", field="afterSeq")
        run_id = from_global_id(root_run_id, "Run", field="rootRunId")
        async with context.session() as session:
            root = await event_log.root_run_for_subscription(
                session, workspace_id=principal.workspace_id, run_id=run_id
            )

        with _hub(context).subscribe(principal.workspace_id, root.id) as live:
            async for message in event_log.tree_events(
                context.runtime.read_sessionmaker,
                live,
                workspace_id=principal.workspace_id,
                root_run_id=root.id,
                after_seq=after_seq or 0,
                # Read at call time (not bound as a default) so tests can shorten it.
                idle_poll_s=event_log.IDLE_POLL_S,
            ):
                # The websocket's context outlives every event: without a fresh loader cache
                # `run { status }` would show the run as it was when first loaded (PITFALLS).
                context.fresh_loaders()
                yield RunEvent.from_message(message)


def _hub(context: Context) -> EventHub:
    # Created by the app's lifespan (app.main), one per process.
    hub: EventHub = context.request.app.state.event_hub
    return hub
