"""PolicyPreview: what the policy would decide for one tool along a run path
(``app.services.policy_preview``)."""

from __future__ import annotations

import strawberry

from app.domain.policy import Decision, RiskClass
from app.graphql.ids import to_global_id
from app.graphql.types import enums as _enums  # noqa: F401  (registers the GraphQL enums)
from app.services.policy_preview import Preview


@strawberry.type(name="PolicyPreviewLink", description="One agent of the path and its own decision.")
class PolicyPreviewLink:
    agent_id: strawberry.ID = strawberry.field(description="The agent.")
    agent_name: str = strawberry.field(description="The agent's name.")
    decision: Decision = strawberry.field(description="This agent's current policy's decision alone.")
    source: str = strawberry.field(
        description="What in its policy decided: a rule, its default, the risk default, the clamp."
    )


@strawberry.type(
    name="PolicyPreview",
    description="The decision a call would get in a new run down a path of agents, by the engine's own policy code.",
)
class PolicyPreview:
    tool: str = strawberry.field(description="The tool previewed.")
    risk: RiskClass = strawberry.field(description="The tool's risk class, as the engine reads it.")
    decision: Decision = strawberry.field(description="The effective decision: the strictest along the path.")
    reason: str = strawberry.field(
        description="Which agent and which part of its policy imposed it, as a step records it."
    )
    links: list[PolicyPreviewLink] = strawberry.field(description="Every agent of the path, root first.")

    @classmethod
    def from_preview(cls, preview: Preview) -> PolicyPreview:
        return cls(
            tool=preview.tool,
            risk=preview.risk,
            decision=preview.effective.decision,
            reason=preview.effective.reason,
            links=[
                PolicyPreviewLink(
                    agent_id=strawberry.ID(to_global_id("Agent", link.agent_id)),
                    agent_name=link.agent_name,
                    decision=link.decision.decision,
                    source=link.decision.source,
                )
                for link in preview.links
            ],
        )
