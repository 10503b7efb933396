"""One query request reads one state of the database (docs/graphql/guide.md#one-snapshot-per-query).

A query's fields resolve through several statements. Each through a session of its own (as
on SQLite before), or under READ COMMITTED (MariaDB, where each statement sees what was
committed before it), a commit landing between two of a query's reads used to answer with
halves of two states (a schedule and firings of another moment, a run and another moment's
steps). Here the commit is made to
land exactly there: a statement listener on the API's engine commits a change from another
session right after the query's first read of the row, from inside the request.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, update
from sqlalchemy.util import await_

from app.db.orm import Agent
from tests.support.graphql import create_agent, unique

BOTH = """query ($id: ID!) {
  agent(id: $id) { description }
  agents(first: 50) { edges { node { id description } } }
}"""


async def test_a_commit_between_two_reads_of_one_query_shows_in_neither(
    app, gql, workspace, sessionmaker
) -> None:
    agent = await create_agent(gql, workspace.admin, description="before")
    engine = app.state.runtime.engine.sync_engine
    after = unique("after")
    committed: list[str] = []

    async def commit_elsewhere() -> None:
        async with sessionmaker() as session, session.begin():
            await session.execute(update(Agent).where(Agent.name == agent["name"]).values(description=after))

    def commit_after_first_read(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not committed and statement.lstrip().startswith("SELECT") and "FROM agents" in statement:
            committed.append(statement)
            await_(commit_elsewhere())  # the request's greenlet waits while another session commits

    event.listen(engine, "after_cursor_execute", commit_after_first_read)
    try:
        data = await gql.ok(BOTH, {"id": agent["id"]}, token=workspace.viewer)
    finally:
        event.remove(engine, "after_cursor_execute", commit_after_first_read)
    assert committed, "the query never read the agent"
    listed = next(e["node"] for e in data["agents"]["edges"] if e["node"]["id"] == agent["id"])
    assert (data["agent"]["description"], listed["description"]) == ("before", "before")

    # The next request sees the commit: the snapshot lasts one request.
    data = await gql.ok(BOTH, {"id": agent["id"]}, token=workspace.viewer)
    listed = next(e["node"] for e in data["agents"]["edges"] if e["node"]["id"] == agent["id"])
    assert (data["agent"]["description"], listed["description"]) == (after, after)
