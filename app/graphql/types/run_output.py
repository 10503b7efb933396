"""``RunOutputChunk``: a piece of a run's live model output, as streamed by ``runOutput``
(docs/graphql/guide.md)."""

from __future__ import annotations

import strawberry

from app.graphql.ids import to_global_id
from app.services.live_output import OutputChunk


@strawberry.type(
    name="RunOutputChunk",
    description=(
        "Text a run's model produced, as it streams it (not stored: the step keeps the whole "
        "text once the turn is recorded)."
    ),
)
class RunOutputChunk:
    run_id: strawberry.ID = strawberry.field(description="The run whose model output this is (global id).")
    step_seq: int = strawberry.field(description="The seq of the step this turn's text belongs to.")
    text: str = strawberry.field(description="The text that follows what was sent before ('' when done).")
    done: bool = strawberry.field(description="The turn ended: the next chunk starts another turn's text.")

    @classmethod
    def of(cls, chunk: OutputChunk) -> RunOutputChunk:
        return cls(
            run_id=strawberry.ID(to_global_id("Run", chunk.run_id)),
            step_seq=chunk.step_seq,
            text=chunk.text,
            done=chunk.done,
        )
