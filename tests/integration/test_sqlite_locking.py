"""SQLite (the embedded default): reads never wait for the writer."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update

from app.db.orm import Workspace
from tests.conftest import DB_KIND

pytestmark = pytest.mark.skipif(DB_KIND != "sqlite", reason="SQLite's whole-database write lock")


async def test_queries_answer_while_a_writer_holds_the_lock(gql, workspace, sessionmaker) -> None:
    async with sessionmaker() as session, session.begin():
        # BEGIN IMMEDIATE: this transaction now holds SQLite's write lock until it ends.
        await session.execute(
            update(Workspace).where(Workspace.id == workspace.id).values(name=workspace.name)
        )
        data = await asyncio.wait_for(
            gql.ok("{ viewer { role workspace { name } } agents(first: 5) { edges { node { id } } } }",
                   token=workspace.viewer),
            timeout=5,
        )  # fmt: skip
    assert data["viewer"]["workspace"]["name"] == workspace.name
