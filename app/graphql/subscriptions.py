"""``Subscription.runTree``: a run tree's event log, replayed then streamed live,
``Subscription.runOutput``: a run's model output as it streams (docs/graphql/guide.md), and
``Subscription.approvalEvents``: the workspace's approvals, live (docs/concepts/approvals.md).

Order of operations is what makes the stream complete: subscribe to the process's event hub
first, then replay the log from the database, then follow live messages (see
``services.event_log.tree_events`` for duplicates, gaps and resyncs).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated

import strawberry

from app.domain.agents import Role
from app.domain.errors import Unavailable, ValidationFailed
from app.events.hub import EventHub, SubscriberTooSlow
from app.events.output import OutputHub
from app.graphql.context import Context, Info
from app.graphql.ids import from_global_id
from app.graphql.shared_execution import run_event
from app.graphql.types.approvals import Approval, ApprovalEvent
from app.graphql.types.run_events import RunEvent
from app.graphql.types.run_output import RunOutputChunk
from app.graphql.ws_auth import CLOSE_TOO_SLOW
from app.services import approvals, event_log, live_output
from app.services.event_labels import TreeLabels


@strawberry.type(
    name="Subscription",
    description="Live streams over graphql-ws (graphql-transport-ws) at /graphql: docs/graphql/guide.md.",
)
class Subscription:
    @strawberry.subscription(
        description=(
            "Every event of a run tree after afterSeq (all when omitted), then live ones, in seq "
            "order without gaps or repeats. rootRunId may name any run of the tree: the stream is "
            "always the whole tree's, from its root. The stream completes (graphql-transport-ws "
            "`complete`) once every run of the tree is terminal and every event of the tree has "
            "been sent, events written after the root ended included; subscribing to a finished "
            "tree replays its log and completes. A subscriber too slow to keep up with the live "
            "events has its websocket closed (code 1013, with a reason): resubscribe with "
            "afterSeq set to the last seq received."
        )
    )
    async def run_tree(
        self,
        info: Info,
        root_run_id: Annotated[
            strawberry.ID,
            strawberry.argument(
                description="Any run of the tree (global id); the stream covers the whole tree from its root."
            ),
        ],
        after_seq: Annotated[
            int | None,
            strawberry.argument(
                description="Resume after this seq (the last one received); null or left out: from the start of the log."
            ),
        ] = None,
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

        def too_slow(reason: str) -> None:
            if context.close_websocket is not None:
                context.close_websocket(CLOSE_TOO_SLOW, reason)

        with _hub(context).subscribe(principal.workspace_id, root.id, on_overflow=too_slow) as live:
            labels = TreeLabels(
                context.runtime.read_sessionmaker, workspace_id=principal.workspace_id, shared=live
            )
            events = event_log.tree_events(
                context.runtime.read_sessionmaker,
                live,
                workspace_id=principal.workspace_id,
                root_run_id=root.id,
                after_seq=after_seq or 0,
                # Read at call time (not bound as a default) so tests can shorten it.
                idle_poll_s=event_log.IDLE_POLL_S,
            )
            try:
                async for message in events:
                    # The websocket's context outlives every event: without a fresh loader cache
                    # `run { status }` would show the run as it was when first loaded (docs/architecture.md).
                    context.fresh_loaders()
                    yield await run_event(message, labels.label)
            except SubscriberTooSlow as exc:
                # Not a `complete`: that would tell the client the tree is finished.
                raise Unavailable(exc.reason) from None

    @strawberry.subscription(
        description=(
            "A run's model output as the model produces it: the current turn's text so far "
            "first, then each new piece, each turn ended by a chunk with done: true. Completes "
            "once the run is terminal. Not stored: the step records the whole text when the "
            "turn ends. Providers that do not stream send nothing here."
        )
    )
    async def run_output(
        self,
        info: Info,
        run_id: Annotated[strawberry.ID, strawberry.argument(description="The run (global id).")],
    ) -> AsyncGenerator[RunOutputChunk, None]:
        context = info.context
        principal = await context.principal()
        principal.require(Role.VIEWER)
        pk = from_global_id(run_id, "Run", field="runId")
        async with context.session() as session:
            await live_output.check_run(session, workspace_id=principal.workspace_id, run_id=pk)
        hub: OutputHub = context.request.app.state.output_hub
        chunks = live_output.output_chunks(
            hub, context.runtime.read_sessionmaker, run_id=pk, idle_s=live_output.IDLE_CHECK_S
        )
        async for chunk in chunks:
            yield RunOutputChunk.of(chunk)

    @strawberry.subscription(
        description=(
            "The workspace's approvals as they are requested, decided and expired, across every "
            "run tree, each with the approval as it is now. Live only: query approvals(status: "
            "PENDING) for what is already waiting. After a hole in live delivery every pending "
            "approval is sent again as REQUESTED. A subscriber too slow to keep up has its "
            "websocket closed (code 1013)."
        )
    )
    async def approval_events(self, info: Info) -> AsyncGenerator[ApprovalEvent, None]:
        context = info.context
        principal = await context.principal()
        principal.require(Role.VIEWER)

        def too_slow(reason: str) -> None:
            if context.close_websocket is not None:
                context.close_websocket(CLOSE_TOO_SLOW, reason)

        with _hub(context).subscribe_workspace(principal.workspace_id, on_overflow=too_slow) as live:
            news = approvals.approval_news(
                context.runtime.read_sessionmaker, live, workspace_id=principal.workspace_id
            )
            try:
                async for item in news:
                    context.fresh_loaders()
                    yield ApprovalEvent(type=item.type, at=item.at, approval=Approval.from_row(item.approval))
            except SubscriberTooSlow as exc:
                raise Unavailable(exc.reason) from None


def _hub(context: Context) -> EventHub:
    # Created by the app's lifespan (app.main), one per process.
    hub: EventHub = context.request.app.state.event_hub
    return hub
