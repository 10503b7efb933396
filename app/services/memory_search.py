"""Memory search: full-text on the database, ranking in ``app.domain.memory``.

One function, ``search``, serves the ``memory.search`` tool and the GraphQL
``memories(agentId, query, tags)`` query. The database finds a bounded set of candidates
(matching the words, carrying every given tag, best text match first); the pure ranking then
blends relevance with importance x recency and cuts to the limit.

- The document is the agent's own tokens (``app.domain.memory.search_document``): the match
  reads only that agent's postings, whatever the size of the workspace, and a tag filter is a
  required term of it. The engine returns its best ``MAX_CANDIDATES`` by text relevance (a
  LIMIT inside a subquery), only then are whole rows joined, checked in SQL (workspace,
  agent, every tag exactly) and ranked in Python.
- Memories holding every word are asked for first: the engines evaluate such a match from
  the rarest word's postings, and return fewer rows. When fewer than ``limit`` hold every
  word, a second query takes any word (so a near miss is still found).
- MariaDB/MySQL: ``MATCH(search_text) AGAINST(... IN BOOLEAN MODE)`` on the FULLTEXT index.
- SQLite: the FTS5 table ``memories_fts`` (kept in step by triggers), ranked by ``bm25``.

Both engines see the same tokens, so they agree on what matches: a word matches as a prefix
(``berlin`` finds ``Berliner``), every word first and any word failing that, case and
diacritics are ignored (``cafe`` finds ``Café``), ``_`` and punctuation split words, and
there are no stopwords or minimum word length. Query text never reaches the engines'
operator syntax (``app.domain.memory.search_terms``).

Without words, the candidates are the agent's head by importance x recency (the
``injection_rank`` index) carrying the tags.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, column, literal, literal_column, select, table, update
from sqlalchemy.dialects.mysql import match
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.sql.elements import ColumnClause

from app.db import orm
from app.domain.memory import (
    MemoryCandidate,
    SearchHit,
    injection_rank,
    rank_search_hits,
    search_terms,
    tag_token,
    word_token,
)
from app.services.queries import memory_has_tag

DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 50
# Candidates the database hands to the ranking: enough that a very important or recent
# memory with a slightly weaker text match still competes, bounded so one search never
# loads an agent's whole memory.
MAX_CANDIDATES = 200

_FTS = table("memories_fts", column("rowid"), column("rank"))
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
    tags = list(dict.fromkeys(tags or ()))
    # Every word first: far fewer rows to read than any word when a word is common. Fewer
    # than `limit` such memories (or one word): any word, as ranked before.
    candidates = await _candidates(session, workspace_id, agent_id, terms, tags, every_word=len(terms) > 1)
    if len(terms) > 1 and len(candidates) < limit:
        candidates = await _candidates(session, workspace_id, agent_id, terms, tags, every_word=False)
    rows = {memory.id: memory for memory, _ in candidates}
    hits = [
        SearchHit(
            id=memory.id,
            relevance=relevance,
            importance=memory.importance,
            updated_at=memory.updated_at,
            last_used_at=memory.last_used_at,
        )
        for memory, relevance in candidates
    ]
    chosen = [rows[h.id] for h in rank_search_hits(hits, now=now, limit=limit)]
    if mark_used and chosen:
        await record_use(session, chosen, now=now)
    return chosen


async def record_use(
    session: AsyncSession, memories: Sequence[orm.Memory | MemoryCandidate], *, now: datetime
) -> None:
    """``lastUsedAt`` becomes ``now``, and the injection rank with it, in one statement (the
    ORM's write hook does not see a bulk update); loaded rows take the new values as stored.
    The rank comes from the importance as read: a memory rewritten since (its ``updated_at``
    moved) keeps the rank its writer stored rather than one from a stale importance."""
    ranks = {m.id: injection_rank(m.importance, m.updated_at, now) for m in memories}
    as_read = [
        (and_(orm.Memory.id == m.id, orm.Memory.updated_at == m.updated_at), ranks[m.id]) for m in memories
    ]
    await session.execute(
        update(orm.Memory)
        .where(orm.Memory.id.in_(list(ranks)))
        .values(last_used_at=now, injection_rank=case(*as_read, else_=orm.Memory.injection_rank))
        .execution_options(synchronize_session=False)
    )
    for memory in memories:
        if isinstance(memory, orm.Memory):
            set_committed_value(memory, "last_used_at", now)
            set_committed_value(memory, "injection_rank", ranks[memory.id])


async def _candidates(
    session: AsyncSession,
    workspace_id: int,
    agent_id: int,
    terms: list[str],
    tags: list[str],
    *,
    every_word: bool,
) -> list[tuple[orm.Memory, float]]:
    """At most MAX_CANDIDATES of the agent's memories carrying all ``tags`` with their text
    relevance: the best text matches, or without ``terms`` the best by importance x recency."""
    if terms:
        found = _text_candidates(session, agent_id, terms, tags, every_word=every_word)
        stmt = select(orm.Memory, found.c.relevance).join(found, found.c.id == orm.Memory.id)
    else:
        stmt = (
            select(orm.Memory, literal(0.0))
            .order_by(orm.Memory.injection_rank.desc(), orm.Memory.id.desc())
            .limit(MAX_CANDIDATES)
        )
    stmt = stmt.where(orm.Memory.workspace_id == workspace_id, orm.Memory.agent_id == agent_id)
    for tag in tags:
        stmt = stmt.where(memory_has_tag(session, tag))
    return [(memory, float(relevance)) for memory, relevance in (await session.execute(stmt)).all()]


def _text_candidates(
    session: AsyncSession, agent_id: int, terms: list[str], tags: list[str], *, every_word: bool
) -> Any:
    """(id, relevance) of the agent's best ``MAX_CANDIDATES`` text matches of every word, or
    of any word, carrying the tags' tokens; relevance larger is better."""
    words = [word_token(agent_id, t) for t in terms]
    required = [tag_token(agent_id, t) for t in tags]
    if session.get_bind().dialect.name in ("mysql", "mariadb"):
        # Boolean mode, each word a prefix: `+w*` required, `w*` optional (one must match).
        if every_word:
            against = " ".join(f"+{w}*" for w in words)
        else:
            against = " ".join(f"{w}*" for w in words)
            if required:
                against = f"+({against})"
        against = " ".join([against, *(f"+{t}" for t in required)])
        score = match(orm.Memory.__table__.c.search_text, against=against).in_boolean_mode()
        relevance = score.label("relevance")
        return (
            select(orm.Memory.id.label("id"), relevance)
            .where(score)
            .order_by(relevance.desc())
            .limit(MAX_CANDIDATES)
            .subquery("found")
        )
    # FTS5: each word a quoted prefix phrase (quotes keep AND/OR/NOT/NEAR literal words).
    expression = "(" + (" AND " if every_word else " OR ").join(f'"{w}"*' for w in words) + ")"
    expression = " AND ".join([expression, *(f'"{t}"' for t in required)])
    return (
        select(_FTS.c.rowid.label("id"), (-_FTS.c.rank).label("relevance"))  # rank: bm25, smaller is better
        .where(_FTS_TABLE.op("MATCH")(expression))
        .order_by(_FTS.c.rank)
        .limit(MAX_CANDIDATES)
        .subquery("found")
    )
