"""Schedule CRUD through GraphQL, and next fire times computed in the schedule's timezone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.support.graphql import create_agent

SCHEDULE_FIELDS = "id cron timezone input enabled overlapPolicy nextFireAt lastFiredAt agent { id }"
CREATE = f"""mutation($agentId: ID!, $input: ScheduleInput!) {{
  createSchedule(agentId: $agentId, input: $input) {{ {SCHEDULE_FIELDS} }} }}"""
UPDATE = f"""mutation($id: ID!, $input: SchedulePatch!) {{
  updateSchedule(id: $id, input: $input) {{ {SCHEDULE_FIELDS} }} }}"""
DELETE = "mutation($id: ID!) { deleteSchedule(id: $id) }"
AGENT_SCHEDULES = "query($id: ID!) { agent(id: $id) { schedules { id cron } } }"


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def test_create_read_update_delete(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    created = (
        await gql.ok(
            CREATE,
            {
                "agentId": agent["id"],
                "input": {"cron": "0 9 * * *", "timezone": "Europe/Berlin", "input": {"a": 1}},
            },
            token=workspace.operator,
        )
    )["createSchedule"]
    assert created["enabled"] is True
    assert created["overlapPolicy"] == "SKIP"
    assert created["input"] == {"a": 1}
    assert created["lastFiredAt"] is None
    assert created["agent"] == {"id": agent["id"]}
    fire = _at(created["nextFireAt"])
    assert fire > datetime.now(UTC)
    local = fire.astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute) == (9, 0)  # 9:00 Berlin time, whatever the UTC offset

    listed = (await gql.ok(AGENT_SCHEDULES, {"id": agent["id"]}, token=workspace.viewer))["agent"][
        "schedules"
    ]
    assert listed == [{"id": created["id"], "cron": "0 9 * * *"}]

    paused = (
        await gql.ok(UPDATE, {"id": created["id"], "input": {"enabled": False}}, token=workspace.operator)
    )["updateSchedule"]
    assert paused["enabled"] is False
    assert paused["nextFireAt"] is None  # a paused schedule never builds a backlog
    assert paused["cron"] == "0 9 * * *"

    resumed = (
        await gql.ok(
            UPDATE,
            {
                "id": created["id"],
                "input": {"enabled": True, "cron": "*/5 * * * *", "input": None, "overlapPolicy": "ALLOW"},
            },
            token=workspace.operator,
        )
    )["updateSchedule"]
    assert resumed["nextFireAt"] is not None
    assert _at(resumed["nextFireAt"]).minute % 5 == 0
    assert resumed["input"] is None
    assert resumed["overlapPolicy"] == "ALLOW"

    assert (await gql.ok(DELETE, {"id": created["id"]}, token=workspace.operator))[
        "deleteSchedule"
    ] == created["id"]
    listed = (await gql.ok(AGENT_SCHEDULES, {"id": agent["id"]}, token=workspace.viewer))["agent"][
        "schedules"
    ]
    assert listed == []


async def test_default_timezone_is_utc(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    created = (
        await gql.ok(CREATE, {"agentId": agent["id"], "input": {"cron": "@daily"}}, token=workspace.operator)
    )["createSchedule"]
    assert created["timezone"] == "UTC"
    fire = _at(created["nextFireAt"])
    assert (fire.hour, fire.minute) == (0, 0)


@pytest.mark.parametrize(
    ("schedule_input", "field"),
    [
        ({"cron": "not a cron"}, "cron"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * * * *"}, "cron"),  # seconds field: refused
        ({"cron": ""}, "cron"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "0 9 * * *", "timezone": "../etc/passwd"}, "timezone"),
        ({"cron": "0 9 * * *", "input": {"x": "y" * 100_001}}, "input"),
        ({"cron": "0 9 * * *", "input": ["not", "an", "object"]}, "input"),
        ({"cron": "0 9 * * *", "input": "text"}, "input"),
        ({"cron": "0 9 * * *", "input": 3}, "input"),
        ({"cron": "0 0 31 2 *"}, "cron"),
    ],
)
async def test_validation_names_the_field_and_writes_nothing(
    gql: Any, workspace: Any, schedule_input: dict[str, Any], field: str
) -> None:
    agent = await create_agent(gql, workspace.admin)
    error = await gql.error(
        CREATE, {"agentId": agent["id"], "input": schedule_input}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}
    listed = (await gql.ok(AGENT_SCHEDULES, {"id": agent["id"]}, token=workspace.viewer))["agent"][
        "schedules"
    ]
    assert listed == []


async def test_failed_update_changes_nothing(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    created = (
        await gql.ok(CREATE, {"agentId": agent["id"], "input": {"cron": "@hourly"}}, token=workspace.operator)
    )["createSchedule"]
    error = await gql.error(
        UPDATE, {"id": created["id"], "input": {"enabled": False, "cron": "bad"}}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "cron"}
    node = await gql.ok(
        "query($id: ID!) { node(id: $id) { ... on Schedule { enabled cron nextFireAt } } }",
        {"id": created["id"]},
        token=workspace.viewer,
    )
    assert node["node"] == {"enabled": True, "cron": "@hourly", "nextFireAt": created["nextFireAt"]}


async def test_viewer_cannot_write_schedules(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    error = await gql.error(
        CREATE, {"agentId": agent["id"], "input": {"cron": "@hourly"}}, token=workspace.viewer
    )
    assert error["extensions"]["code"] == "FORBIDDEN"


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 2 *", "0 0 31 4 *", "15 10 31 6,9,11 *"])
@pytest.mark.parametrize("enabled", [True, False])
async def test_a_cron_that_never_fires_is_refused_naming_cron(
    gql: Any, workspace: Any, cron: str, enabled: bool
) -> None:
    agent = await create_agent(gql, workspace.admin)
    error = await gql.error(
        CREATE,
        {"agentId": agent["id"], "input": {"cron": cron, "enabled": enabled}},
        token=workspace.operator,
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "cron"}, error
    assert "never fires" in error["message"]
    listed = await gql.ok(AGENT_SCHEDULES, {"id": agent["id"]}, token=workspace.viewer)
    assert listed["agent"]["schedules"] == []

    created = (
        await gql.ok(CREATE, {"agentId": agent["id"], "input": {"cron": "@daily"}}, token=workspace.operator)
    )["createSchedule"]
    error = await gql.error(
        UPDATE, {"id": created["id"], "input": {"cron": cron, "enabled": enabled}}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "cron"}, error


async def test_a_cron_that_fires_rarely_is_accepted(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    created = (
        await gql.ok(
            CREATE, {"agentId": agent["id"], "input": {"cron": "0 0 29 2 *"}}, token=workspace.operator
        )
    )["createSchedule"]
    fire = _at(created["nextFireAt"])
    assert (fire.month, fire.day) == (2, 29)  # the next leap day


async def test_an_archived_agent_cannot_be_scheduled(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    await gql.ok(
        "mutation($id: ID!) { updateAgent(id: $id, input: {status: ARCHIVED}) { status } }",
        {"id": agent["id"]},
        token=workspace.admin,
    )
    error = await gql.error(
        CREATE, {"agentId": agent["id"], "input": {"cron": "@hourly"}}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "agentId"}
    assert "ARCHIVED" in error["message"]


async def test_an_update_to_input_that_is_not_an_object_is_refused(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    created = (
        await gql.ok(CREATE, {"agentId": agent["id"], "input": {"cron": "@hourly"}}, token=workspace.operator)
    )["createSchedule"]
    error = await gql.error(
        UPDATE, {"id": created["id"], "input": {"input": [1, 2]}}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "input"}
