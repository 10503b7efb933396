"""The demo's scheduled agent: the recurring research design operators use, scripted.

``prospector`` runs on a schedule. Each run:

1. researches new candidates (``http.get`` on the dev feed, ``/dev/candidates``);
2. looks up the domains it already screened (``memory.search``, tag ``screened``);
3. delegates enrichment and scoring of the *new* domains to the ``qualifier`` specialist
   (``agents.delegate``), who reads ``/dev/enrich`` and splits them by score;
4. remembers its decisions (``memory.remember``: the qualified and the rejected domains of this
   run, both tagged ``screened``), so the next run skips them;
5. posts the qualified companies to the demo webhook (``webhook.post``, which waits for an
   operator's approval);
6. finishes with a concise report.

Consecutive pages of the feed overlap, so the second scheduled run meets two domains the
first one screened and skips them. Everything is a scripted template (DESIGN §5), so the demo
runs without a model key.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.orm import Agent, Schedule
from app.domain.agents import OverlapPolicy
from app.domain.schedules import next_fire_at

PROSPECTOR = "prospector"
QUALIFIER = "qualifier"
# Hourly, on the hour (UTC). The README shows how to make it every minute to watch it work.
DEMO_CRON = "0 * * * *"

# Jinja expressions shared by the prospector's steps. results[0]: the feed page;
# results[1]: the memory search; results[2]: the qualifier's outcome.
_FEED = "(results[0].body | fromjson).candidates | map(attribute='domain') | list"
_SEEN = "(results[1].memories | map(attribute='value') | join(' ')).split()"
_NEW = f"{_FEED} | reject('in', {_SEEN}) | list"
_SKIPPED = f"{_FEED} | select('in', {_SEEN}) | list"
_QUALIFIED = "results[2].result.qualified | map(attribute='domain') | list"


def prospector_specs(base_url: str) -> list[dict[str, Any]]:
    """The two agents as ``DemoAgent`` keyword arguments (``app.dev``)."""
    prospector_steps: list[dict[str, Any]] = [
        {"call": "http.get", "args": {"url": f"{base_url}/dev/candidates"}},
        {"call": "memory.search", "args": {"tags": ["screened"], "limit": 50}},
        {
            "call": "agents.delegate",
            "args": {
                "agent": QUALIFIER,
                "task": "Enrich and score these newly listed companies; qualify the good fits.",
                "input": {"domains": "{{ " + _NEW + " }}"},
            },
        },
        {
            "calls": [
                {
                    "call": "memory.remember",
                    "args": {
                        "key": "qualified-in-run-{{ run.id }}",
                        "value": "{{ " + _QUALIFIED + " | join(' ') or 'none' }}",
                        "tags": ["screened", "qualified"],
                        "importance": 0.6,
                    },
                },
                {
                    "call": "memory.remember",
                    "args": {
                        "key": "rejected-in-run-{{ run.id }}",
                        "value": "{{ results[2].result.rejected | join(' ') or 'none' }}",
                        "tags": ["screened", "rejected"],
                        "importance": 0.3,
                    },
                },
            ]
        },
        {
            "call": "webhook.post",
            "args": {
                "url": f"{base_url}/dev/webhook",
                "payload": {"qualifiedLeads": "{{ results[2].result.qualified }}"},
            },
        },
        {
            "final": {
                "report": (
                    "Screened {{ (" + _NEW + ") | length }} new candidates, skipped "
                    "{{ (" + _SKIPPED + ") | length }} already screened; qualified: "
                    "{{ " + _QUALIFIED + " | join(', ') or 'none' }}; posted: HTTP {{ results[5].status }}."
                ),
                "screened": "{{ " + _NEW + " }}",
                "skipped": "{{ " + _SKIPPED + " }}",
                "qualified": "{{ " + _QUALIFIED + " }}",
                "rejected": "{{ results[2].result.rejected }}",
            }
        },
    ]
    qualifier_steps: list[dict[str, Any]] = [
        {
            "call": "http.get",
            "args": {"url": f"{base_url}/dev/enrich?domains={{{{ input.domains | join(',') }}}}"},
        },
        {
            "final": {
                "qualified": "{{ (results[0].body | fromjson).companies | selectattr('score', 'ge', 70) | list }}",
                "rejected": (
                    "{{ (results[0].body | fromjson).companies | selectattr('score', 'lt', 70)"
                    " | map(attribute='domain') | list }}"
                ),
            }
        },
    ]
    return [
        {
            "name": PROSPECTOR,
            "description": "Scheduled: finds newly listed companies, qualifies the new ones, posts the good fits.",
            "instructions": (
                "Read the candidate feed, skip the domains you already screened (memory), have the "
                "qualifier enrich and score the rest, remember your decisions, post the qualified "
                "leads, and report in one line."
            ),
            "model": {"provider": "scripted", "steps": prospector_steps},
            "tools": ["http.get", "memory.*", "agents.*", "webhook.post"],
            "policy": {"rules": [{"tool": "webhook.post", "decision": "REQUIRE_APPROVAL"}]},
        },
        {
            "name": QUALIFIER,
            "description": "Specialist: enriches companies by domain and scores their fit (qualified at 70+).",
            "instructions": "Enrich the domains in the input and split them into qualified and rejected.",
            "model": {"provider": "scripted", "steps": qualifier_steps},
            "tools": ["http.get"],
        },
    ]


async def seed_schedule(session: AsyncSession, *, workspace_id: int) -> None:
    """The prospector's schedule, created once: an operator's changes to it are kept."""
    agent = await session.scalar(
        select(Agent).where(Agent.workspace_id == workspace_id, Agent.name == PROSPECTOR)
    )
    if agent is None:
        return
    if await session.scalar(select(Schedule.id).where(Schedule.agent_id == agent.id).limit(1)) is not None:
        return
    now = utcnow()
    session.add(
        Schedule(
            workspace_id=workspace_id,
            agent_id=agent.id,
            cron=DEMO_CRON,
            timezone="UTC",
            input={},
            enabled=True,
            overlap_policy=OverlapPolicy.SKIP.value,
            next_fire_at=next_fire_at(DEMO_CRON, "UTC", after=now),
            last_fired_at=None,
            created_at=now,
            updated_at=now,
        )
    )
