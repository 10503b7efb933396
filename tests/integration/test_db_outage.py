"""The database drops every connection (a restart, a failover): runs still finish."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.conftest import DB_KIND
from tests.support.runs import scripted_agent, start_run, wait_run

pytestmark = [
    pytest.mark.skipif(DB_KIND != "mysql", reason="server-side connection kills"),
    pytest.mark.usefixtures("worker"),
]


async def _kill_other_connections(engine) -> int:  # type: ignore[no-untyped-def]
    async with engine.connect() as conn:
        ids = (
            await conn.execute(
                text(
                    "SELECT id FROM information_schema.processlist"
                    " WHERE db = DATABASE() AND id != CONNECTION_ID()"
                )
            )
        ).scalars()
        killed = 0
        for connection_id in list(ids):
            await conn.execute(text(f"KILL CONNECTION {int(connection_id)}"))
            killed += 1
    return killed


async def test_runs_finish_after_the_server_dropped_every_connection(gql, workspace, engine) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "{{ input.n }}"}])
    first = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent, {"n": 1}))
    assert first["status"] == "SUCCEEDED"  # the worker's pool now holds live connections

    assert await _kill_other_connections(engine) > 0
    # The API's first use of a dead connection is caught by its pre-ping; the worker's claim
    # fails, the run stays QUEUED and the sweeper hands it a new delivery.
    run_ids = [await start_run(gql, workspace.operator, agent, {"n": n}) for n in range(2, 6)]
    done = [await wait_run(gql, workspace.viewer, r, timeout_s=30) for r in run_ids]
    assert [d["status"] for d in done] == ["SUCCEEDED"] * 4
    assert [d["result"] for d in done] == [2, 3, 4, 5]


async def test_runs_interrupted_by_an_outage_log_one_warning_not_a_traceback_each(
    gql, workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage is expected: the runs it interrupts are handed back with one warning per
    worker (rate-limited), not an ERROR with a traceback per run, which is kept for bugs."""
    import logging

    from app.engine import loop
    from app.engine.persist import RunWrites
    from app.outages import OutageWarnings

    monkeypatch.setattr(loop, "OUTAGE_WARNINGS", OutageWarnings())  # this test's interval
    apply = RunWrites.apply
    interrupted: set[int] = set()

    async def apply_once_on_a_killed_connection(self: RunWrites, *args: object) -> bool:
        if self.state.run_id not in interrupted:
            interrupted.add(self.state.run_id)
            # The server drops the connection under the run's write, as in a restart.
            async with self.rt.sessionmaker() as session:
                own = (await session.execute(text("SELECT CONNECTION_ID()"))).scalar_one()
                await session.execute(text(f"KILL CONNECTION {int(own)}"))
        return await apply(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(RunWrites, "apply", apply_once_on_a_killed_connection)
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "{{ input.n }}"}])
    with caplog.at_level(logging.WARNING, logger="app.engine.loop"):
        run_ids = [await start_run(gql, workspace.operator, agent, {"n": n}) for n in range(4)]
        done = [await wait_run(gql, workspace.viewer, r, timeout_s=60) for r in run_ids]
    assert [d["status"] for d in done] == ["SUCCEEDED"] * 4 and len(interrupted) == 4
    records = [r for r in caplog.records if r.name == "app.engine.loop"]
    assert not [r for r in records if r.levelno >= logging.ERROR or r.exc_info], [
        r.getMessage() for r in records
    ]
    assert len([r for r in records if "runs broke off" in r.getMessage()]) == 1, [
        r.getMessage() for r in records
    ]
