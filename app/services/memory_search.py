"""Memory search: full-text on the database, ranking in ``app.domain.memory``.

One function, ``search``, serves the ``memory.search`` tool and the GraphQL
``memories(agentId, query, tags)`` query. The database finds a bounded set of candidates
(matching the words, carrying every given tag, best text match first); the pure ranking then
blends relevance with importance x recency and cuts to the limit.

- MariaDB/MySQL: ``MATCH(search_text) AGAINST(... IN BOOLEAN MODE)`` on the FULLTEXT index.
  Mind ``innodb_ft_min_token_size`` (3) and the stopword list: shorter words and stopwords
  are not indexed, so they find nothing.
- SQLite: the FTS5 table ``memories_fts`` (kept in step by triggers), ranked by ``bm25``.

Either way a word matches as a prefix (``berlin`` finds ``Berliner``) and any word may match
(the more the better); query text never reaches the engines' operator syntax
(``app.domain.memory.search_terms``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Float, column, func, literal_column, select, table, update
from sqlalchemy.dialects.mysql import match
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnClause

from app.db import orm
from app.domain.memory import SearchHit, rank_search_hits, search_terms
from app.services.queries import memory_has_tag

DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 50
# Candidates the database hands to the ranking: enough that a very important or recent
# memory with a slightly weaker text match still competes, bounded so one search never
# loads an agent's whole memory.
MAX_CANDIDATES = 200

_FTS = table("memories_fts", column("rowid"))
_FTS_TABLE: ColumnClause[Any] = literal_column("memories_fts")


async def search(
    session: AsyncSession,
    *,
    workspace_id: int,
    agent_id: int,
    query: str | None,
    tags: Sequence[str] | None,
    limit: int,
    now: datetime,
    mark_used: bool,
) -> list[orm.Memory]:
    """The agent's best memories for ``query`` (words, any order) carrying all ``tags``, at
    most ``limit`` (callers bound it by MAX_SEARCH_LIMIT). Without a query: the most important,
    most recently touched ones. With ``mark_used`` their ``lastUsedAt`` becomes ``now`` (a run
    read them); the caller commits."""
    terms = search_terms(query or "")
    if query and query.strip() and not terms:
        return []  # only punctuation: nothing can match
    stmt = select(orm.Memory).where(orm.Memory.workspace_id == workspace_id, orm.Memory.agent_id == agent_id)
    for tag in dict.fromkeys(tags or ()):
        stmt = stmt.where(memory_has_tag(session, tag))
    relevance: Any = None
    if terms:
        stmt, relevance = _match(session, stmt, terms)
        stmt = stmt.add_columns(relevance.label("relevance")).order_by(relevance.desc(), orm.Memory.id.desc())
    else:
        stmt = stmt.order_by(orm.Memory.importance.desc(), orm.Memory.updated_at.desc(), orm.Memory.id.desc())
    rows: dict[int, orm.Memory] = {}
    hits: list[SearchHit] = []
    result: Any = await session.execute(stmt.limit(MAX_CANDIDATES))
    for row in result.all():
        memory: orm.Memory = row[0]
        rows[memory.id] = memory
        hits.append(
            SearchHit(
                id=memory.id,
                relevance=float(row[1]) if terms else 0.0,
                importance=memory.importance,
                updated_at=memory.updated_at,
                last_used_at=memory.last_used_at,
            )
        )
    chosen = [rows[h.id] for h in rank_search_hits(hits, now=now, limit=limit)]
    if mark_used and chosen:
        await session.execute(
            update(orm.Memory)
            .where(orm.Memory.id.in_([m.id for m in chosen]))
            .values(last_used_at=now)
            .execution_options(synchronize_session=False)
        )
        for memory in chosen:
            memory.last_used_at = now
    return chosen


def _match(session: AsyncSession, stmt: Any, terms: list[str]) -> tuple[Any, Any]:
    """Restrict ``stmt`` to memories matching any of ``terms``; also return the relevance
    expression (larger is better)."""
    if session.get_bind().dialect.name in ("mysql", "mariadb"):
        # Boolean mode without operators: every word optional, each a prefix (`word*`).
        score = match(
            orm.Memory.__table__.c.search_text, against=" ".join(f"{t}*" for t in terms)
        ).in_boolean_mode()
        return stmt.where(score > 0), score
    # FTS5: each word a quoted prefix phrase (quotes keep AND/OR/NOT/NEAR literal words).
    expression = " OR ".join(f'"{t}"*' for t in terms)
    bm25 = func.bm25(_FTS_TABLE, type_=Float)  # smaller is better
    stmt = stmt.join(_FTS, _FTS.c.rowid == orm.Memory.id).where(_FTS_TABLE.op("MATCH")(expression))
    return stmt, -bm25
