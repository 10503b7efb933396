"""Memory search: the application's term index on the database, ranking in ``app.domain.memory``.

One function, ``search``, serves the ``memory.search`` tool and the GraphQL
``memories(agentId, query, tags)`` query. The database hands over a bounded set of candidates
(matching the words, carrying every given tag); the pure ranking then blends text relevance
(``app.domain.memory.text_relevance``) with importance x recency and cuts to the limit.

The index is ``memory_terms`` (``app.domain.memory.memory_terms``; kept in step by the ORM on
every write, see ``app.db.orm``): one row per memory and term, read through (agent_id, term,
write_rank). The same rows on MariaDB and SQLite, so both match the same memories, and a
search reads only its agent's rows whatever the size of the workspace. Its cost is bounded
whatever a word's frequency, in a fixed number of statements:

1. How many of the agent's postings each word (a prefix range of terms) and each tag (one
   term) has, each counted up to ``DF_CAP`` (an index range read with a LIMIT).
2. The driver: the rarest requirement (every word and every tag when all words are asked
   for; with any word, the words together or the rarest tag). A term with at most
   ``MAX_CANDIDATES`` postings is read whole; a more common one gives its best
   ``MAX_CANDIDATES`` by write rank (importance x recency as of the last write) from each of
   its first ``MAX_FORMS`` forms (``berlin``, ``berliner``, ...; one index seek each) - an
   ordered index read with a LIMIT, never a sort of all of its matches. At most
   ``MAX_CANDIDATES`` memory ids in all, the rarest words' first.
3. Those memories' postings of the query's terms (primary-key reads): which words and tags
   each holds and how often, hence the match and the relevance.
4. The matching rows themselves, checked in SQL (workspace, agent, every tag exactly).

So a word in half of an agent's memories reads a few hundred index entries, not all its
matches; the price is that among more than ``MAX_CANDIDATES`` matches of a common word the
candidates are the most valuable ones, not the ones holding it most often.

Memories holding every word are asked for first. When fewer than ``limit`` hold every word,
a second pass takes any word (so a near miss is still found).

What matches: a word matches as a prefix (``berlin`` finds ``Berliner``), every word first and
any word failing that, case and diacritics are ignored (``cafe`` finds ``Café``), ``_`` and
punctuation split words, and there are no stopwords or minimum word length. Query text is
only ever bound as values, never parsed by an engine (``app.domain.memory.search_terms``).

Without words or tags, the candidates are the agent's head by importance x recency (the
``injection_rank`` index).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, literal, or_, select, union_all, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from app.db import orm
from app.domain.memory import (
    DF_CAP,
    MemoryCandidate,
    SearchHit,
    injection_rank,
    prefix_range,
    rank_search_hits,
    search_terms,
    tag_term,
    text_relevance,
)

DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 50
# Candidates the index hands to the ranking: enough that a very important or recent memory
# with a slightly weaker text match still competes, bounded so one search never loads an
# agent's whole memory.
MAX_CANDIDATES = 200
# Forms of a common word (the terms it is a prefix of) whose best postings are read.
MAX_FORMS = 8

_TERMS = orm.MemoryTerm.__table__.c


@dataclass(frozen=True, slots=True)
class _Term:
    """A requirement of the match: a query word (every term it is a prefix of) or a tag (its
    one term), as the range [low, high) of terms."""

    low: str
    high: str
    is_word: bool


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
    words = search_terms(query or "")
    if query and query.strip() and not words:
        return []  # only punctuation: nothing can match
    tags = list(dict.fromkeys(tags or ()))
    if not words and not tags:
        hits = await _best_by_value(session, workspace_id, agent_id)
    else:
        required = [_Term(*prefix_range(w), is_word=True) for w in words]
        required += [_Term(*prefix_range(tag_term(t)), is_word=False) for t in tags]
        counts = await _counts(session, agent_id, required)
        # Every word first: the rarest word bounds the candidates. Fewer than `limit` such
        # memories (or one word): any word, as ranked before.
        hits = await _matching(session, workspace_id, agent_id, required, counts, tags, every_word=True)
        if len(words) > 1 and len(hits) < limit:
            hits = await _matching(session, workspace_id, agent_id, required, counts, tags, every_word=False)
    ranked = [h.id for h in rank_search_hits(hits, now=now, limit=limit)]
    if not ranked:
        return []
    # Whole rows for the chosen few only.
    rows = {m.id: m for m in await session.scalars(select(orm.Memory).where(orm.Memory.id.in_(ranked)))}
    chosen = [rows[i] for i in ranked if i in rows]
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


# What the ranking needs of a candidate: not the whole row.
_HIT_COLUMNS = (orm.Memory.id, orm.Memory.importance, orm.Memory.updated_at, orm.Memory.last_used_at)


async def _best_by_value(session: AsyncSession, workspace_id: int, agent_id: int) -> list[SearchHit]:
    """The agent's best MAX_CANDIDATES by importance x recency: the head of its index."""
    stmt = (
        select(*_HIT_COLUMNS)
        .where(orm.Memory.workspace_id == workspace_id, orm.Memory.agent_id == agent_id)
        .order_by(orm.Memory.injection_rank.desc(), orm.Memory.id.desc())
        .limit(MAX_CANDIDATES)
    )
    return [
        SearchHit(id, 0.0, importance, updated, used)
        for id, importance, updated, used in await session.execute(stmt)
    ]


def _in_range(term: _Term) -> Any:
    return and_(_TERMS.term >= term.low, _TERMS.term < term.high)


async def _counts(session: AsyncSession, agent_id: int, required: list[_Term]) -> list[int]:
    """Each requirement's postings among the agent's, counted up to DF_CAP."""
    counts = [
        select(literal(i).label("i"), func.count().label("n")).select_from(
            select(_TERMS.memory_id)
            .where(_TERMS.agent_id == agent_id, _in_range(term))
            .limit(DF_CAP)
            .subquery()
        )
        for i, term in enumerate(required)
    ]
    found = dict((await session.execute(union_all(*counts))).all())
    return [int(found.get(i, 0)) for i in range(len(required))]


async def _matching(
    session: AsyncSession,
    workspace_id: int,
    agent_id: int,
    required: list[_Term],
    counts: list[int],
    tags: list[str],
    *,
    every_word: bool,
) -> list[SearchHit]:
    """The agent's memories holding every word (or any word) and every tag, among at most
    MAX_CANDIDATES read from the rarest requirement's postings, with their text relevance."""
    words = [(t, n) for t, n in zip(required, counts, strict=True) if t.is_word]
    tag_terms = [(t, n) for t, n in zip(required, counts, strict=True) if not t.is_word]
    if every_word or len(words) <= 1:
        options = [[pair] for pair in [*words, *tag_terms]]
    else:
        options = [sorted(words, key=lambda pair: pair[1]), *([pair] for pair in tag_terms)]
    # The driver: the option with the fewest postings (a word group: all of its words').
    driver = min(options, key=lambda group: sum(n for _, n in group))
    if sum(n for _, n in driver) == 0:
        return []
    ids = await _driver_ids(session, agent_id, driver)
    if not ids:
        return []
    # Which of the query's terms each candidate holds and how often, with what the ranking
    # needs of the memory (primary-key reads of both tables).
    columns = [*_HIT_COLUMNS, orm.Memory.tags] if tags else list(_HIT_COLUMNS)
    held = await session.execute(
        select(_TERMS.term, _TERMS.frequency, *columns)
        .join(orm.Memory, orm.Memory.id == _TERMS.memory_id)
        .where(
            _TERMS.memory_id.in_(ids),
            or_(*(_in_range(t) for t in required)),
            orm.Memory.workspace_id == workspace_id,
            orm.Memory.agent_id == agent_id,
        )
    )
    frequencies: dict[int, list[int]] = {}
    memories: dict[int, Any] = {}
    for term, frequency, *memory in held:
        found = frequencies.setdefault(memory[0], [0] * len(required))
        memories[memory[0]] = memory
        for n, requirement in enumerate(required):
            if requirement.low <= term < requirement.high:
                found[n] += frequency
    word_counts = [n for t, n in zip(required, counts, strict=True) if t.is_word]
    hits = []
    for memory_id, found in frequencies.items():
        word_tf = [f for t, f in zip(required, found, strict=True) if t.is_word]
        tags_held = all(f > 0 for t, f in zip(required, found, strict=True) if not t.is_word)
        words_held = all(word_tf) if every_word else (not word_tf or any(word_tf))
        # Every tag exactly (a tag term is a digest: a collision is dropped here).
        if (
            tags_held
            and words_held
            and (not tags or set(tags) <= set(map(str, memories[memory_id][4] or [])))
        ):
            _, importance, updated_at, last_used_at, *_ = memories[memory_id]
            relevance = text_relevance(word_tf, word_counts)
            hits.append(SearchHit(memory_id, relevance, importance, updated_at, last_used_at))
    return hits


async def _driver_ids(session: AsyncSession, agent_id: int, driver: list[tuple[_Term, int]]) -> list[int]:
    """At most MAX_CANDIDATES memory ids from the driver's postings, its rarest term's first:
    a term with at most MAX_CANDIDATES postings whole, a more common one's best by write rank
    (from each of its first MAX_FORMS forms, an ordered index read with a LIMIT)."""
    reads = []
    for i, (term, n) in enumerate(sorted(driver, key=lambda pair: pair[1])):
        index = literal(i).label("i")
        in_agent = _TERMS.agent_id == agent_id
        if n <= MAX_CANDIDATES:
            reads.append(select(index, _TERMS.memory_id, _TERMS.write_rank).where(in_agent, _in_range(term)))
            continue
        for form in await _forms(session, agent_id, term):
            best = (
                select(_TERMS.memory_id, _TERMS.write_rank)
                .where(in_agent, _TERMS.term == form)
                .order_by(_TERMS.write_rank.desc(), _TERMS.memory_id.desc())
                .limit(MAX_CANDIDATES)
                .subquery()
            )
            reads.append(select(index, best.c.memory_id, best.c.write_rank))
    per_term: dict[int, list[tuple[int, float]]] = {}
    for i, memory_id, rank in await session.execute(union_all(*reads)):
        per_term.setdefault(int(i), []).append((memory_id, rank))
    ids: dict[int, None] = {}
    for i in sorted(per_term):
        for memory_id, _ in sorted(per_term[i], key=lambda r: (-r[1], -r[0])):
            if len(ids) >= MAX_CANDIDATES:
                return list(ids)
            ids.setdefault(memory_id, None)
    return list(ids)


async def _forms(session: AsyncSession, agent_id: int, term: _Term) -> list[str]:
    """The first MAX_FORMS terms of the word's range, one index seek each: a loose index scan
    written out (neither engine does one for a DISTINCT, and MariaDB plans a recursive CTE's
    correlated MIN as a scan of the range)."""
    forms: list[str] = []
    after = None
    while len(forms) < MAX_FORMS:
        bound = _TERMS.term >= term.low if after is None else _TERMS.term > after
        after = await session.scalar(
            select(_TERMS.term)
            .where(_TERMS.agent_id == agent_id, bound, _TERMS.term < term.high)
            .order_by(_TERMS.term)
            .limit(1)
        )
        if after is None:
            break
        forms.append(after)
    return forms
