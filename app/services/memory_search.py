"""Memory search: the application's term index on the database, ranking in ``app.domain.memory``.

One function, ``search``, serves the ``memory.search`` tool and the GraphQL
``memories(agentId, query, tags)`` query. The index hands over a bounded set of candidates
(matching the words, carrying every given tag); the pure ranking then blends text relevance
(``app.domain.memory.text_relevance``) with importance x recency and cuts to the limit.

The index is ``memory_terms`` (``app.domain.memory.memory_terms``; kept in step by the ORM on
every write and by ``record_use``, see ``app.db.orm``): one row per memory and term, clustered
by (agent_id, term, write_rank, memory_id), so a term's best postings (by importance x
recency as of the memory's last write) come first and sit together. Each row carries the
term's frequency in the memory and a copy of the memory's ``injection_rank``, so matching and
ranking never read a memory row; only the chosen ``limit`` rows are loaded. The same rows on
MariaDB and SQLite, so both match the same memories, and a search reads only its agent's
part whatever the size of the workspace. Its cost is bounded whatever a word's frequency:

1. How many postings each word (a prefix range of terms) and each tag (one term) has, each
   counted up to ``DF_CAP`` (an index range read with a LIMIT; one statement).
2. The driver: the rarest requirement (every word and every tag when all words are asked
   for; with any word, the words together or the rarest tag). A requirement with at most
   ``MAX_CANDIDATES`` postings is read whole (as is every other such requirement, in the
   same statement); a more common one gives the best ``MAX_CANDIDATES`` postings of each of
   its first ``MAX_FORMS`` forms (``berlin``, ``berliner``, ...; found by one index seek
   each): an ordered index read with a LIMIT, never a sort of all of its matches. At most
   ``MAX_CANDIDATES`` memories in all, the rarest requirement's first.
3. For the common requirements, whether each candidate holds them: point reads of the index
   at the candidate's write rank in each form (one statement).
4. The chosen memories' rows (at most ``limit``), checked: workspace, every tag exactly.

So a word in half of an agent's memories reads a few hundred index entries, not all its
matches. The price: among more than ``MAX_CANDIDATES`` matches of a common word, the
candidates are the most valuable as of their last write, not those holding it most often;
and a common word (more than ``MAX_CANDIDATES`` postings) matches through its first
``MAX_FORMS`` forms only, in code-point order (the word itself first): ``lead`` with
hundreds of memories finds ``lead``, ``leader``, ``leads``... but not a ninth form. A word
with fewer postings matches every form.

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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, literal, select, union_all, update
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
        counts, forms = await _counts(session, agent_id, required)
        postings = _Postings(session, agent_id, required, counts, forms)
        # Every word first: the rarest word bounds the candidates. Fewer than `limit` such
        # memories (or one word): any word, as ranked before.
        hits = await _matching(postings, every_word=True)
        if len(words) > 1 and len(hits) < limit:
            hits = await _matching(postings, every_word=False)
    ranked = [h.id for h in rank_search_hits(hits, now=now, limit=limit)]
    if not ranked:
        return []
    # Whole rows for the chosen few only, checked: the workspace, and every tag exactly (a
    # tag term is a digest).
    found = await session.scalars(
        select(orm.Memory).where(
            orm.Memory.id.in_(ranked),
            orm.Memory.workspace_id == workspace_id,
            orm.Memory.agent_id == agent_id,
        )
    )
    rows = {m.id: m for m in found if set(tags) <= set(map(str, m.tags or []))}
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
    # The term index's copy of the rank (what search ranks by) follows, as stored.
    stored = select(orm.Memory.injection_rank).where(orm.Memory.id == _TERMS.memory_id).scalar_subquery()
    await session.execute(
        update(orm.MemoryTerm)
        .where(orm.MemoryTerm.memory_id.in_(list(ranks)))
        .values(value_rank=stored)
        .execution_options(synchronize_session=False)
    )
    for memory in memories:
        if isinstance(memory, orm.Memory):
            set_committed_value(memory, "last_used_at", now)
            set_committed_value(memory, "injection_rank", ranks[memory.id])


async def _best_by_value(session: AsyncSession, workspace_id: int, agent_id: int) -> list[SearchHit]:
    """The agent's best MAX_CANDIDATES by importance x recency: the head of its index."""
    stmt = (
        select(orm.Memory.id, orm.Memory.injection_rank)
        .where(orm.Memory.workspace_id == workspace_id, orm.Memory.agent_id == agent_id)
        .order_by(orm.Memory.injection_rank.desc(), orm.Memory.id.desc())
        .limit(MAX_CANDIDATES)
    )
    return [SearchHit(id, 0.0, rank) for id, rank in await session.execute(stmt)]


def _in_range(term: _Term) -> Any:
    return and_(_TERMS.term >= term.low, _TERMS.term < term.high)


async def _counts(
    session: AsyncSession, agent_id: int, required: list[_Term]
) -> tuple[list[int], dict[int, list[str]]]:
    """Each requirement's postings, counted up to DF_CAP (its first DF_CAP entries of the
    index, in term order), and the forms met on the way: all of them when the count stays
    under DF_CAP; else all but the last may be followed by more (one statement)."""
    counts = []
    for i, term in enumerate(required):
        first = (
            select(_TERMS.term)
            .where(_TERMS.agent_id == agent_id, _in_range(term))
            .order_by(_TERMS.term)
            .limit(DF_CAP)
            .subquery()
        )
        counts.append(select(literal(i), first.c.term, func.count()).group_by(first.c.term))
    found = [0] * len(required)
    forms: dict[int, list[str]] = {i: [] for i in range(len(required))}
    for i, form, n in sorted((await session.execute(union_all(*counts))).all(), key=lambda r: (r[0], r[1])):
        found[int(i)] += int(n)
        forms[int(i)].append(form)
    return found, forms


@dataclass
class _Postings:
    """What one search has read of the index, shared by its two passes: each requirement's
    postings count, the forms of the common ones, and the postings read so far."""

    session: AsyncSession
    agent_id: int
    required: list[_Term]
    counts: list[int]
    # the forms met while counting (complete under DF_CAP postings)
    seen: dict[int, list[str]]
    forms: dict[int, list[str]] = field(default_factory=dict)
    # (requirement, memory id) -> frequency, for every posting read
    held: dict[tuple[int, int], int] = field(default_factory=dict)
    # memory id -> (write rank, value rank), for every memory met
    ranks: dict[int, tuple[float, float]] = field(default_factory=dict)
    # requirements read whole (at most MAX_CANDIDATES postings): absence there is known
    whole: set[int] = field(default_factory=set)
    # (requirement, memory id) pairs looked up one by one
    looked_up: set[tuple[int, int]] = field(default_factory=set)

    def small(self, i: int) -> bool:
        return self.counts[i] <= MAX_CANDIDATES

    def add(self, i: int, memory_id: int, frequency: int, write: float, value: float) -> None:
        self.held[(i, memory_id)] = self.held.get((i, memory_id), 0) + frequency
        self.ranks[memory_id] = (write, value)

    async def forms_of(self, i: int) -> list[str]:
        """The first MAX_FORMS terms of requirement i's range: those met while counting, and
        when the count reached DF_CAP, the ones after the last met, one index seek each (a
        loose index scan written out: neither engine does one for a DISTINCT, and MariaDB
        plans a recursive CTE's correlated MIN as a scan of the range). A tag has one form."""
        if i in self.forms:
            return self.forms[i]
        term = self.required[i]
        found = self.seen[i][:MAX_FORMS]
        after = found[-1] if found and self.counts[i] >= DF_CAP else None
        while term.is_word and after is not None and len(found) < MAX_FORMS:
            after = await self.session.scalar(
                select(_TERMS.term)
                .where(_TERMS.agent_id == self.agent_id, _TERMS.term > after, _TERMS.term < term.high)
                .order_by(_TERMS.term)
                .limit(1)
            )
            if after is not None:
                found.append(after)
        self.forms[i] = found
        return found

    async def read(self, drivers: list[int]) -> list[int]:
        """At most MAX_CANDIDATES memory ids from the drivers' postings, the rarest's first:
        a requirement with at most MAX_CANDIDATES postings whole, a more common one's best by
        write rank from each of its forms (an ordered read of the index with a LIMIT). Every
        other small requirement is read whole in the same statement."""
        columns = (_TERMS.memory_id, _TERMS.frequency, _TERMS.write_rank, _TERMS.value_rank)
        reads = []
        small = [i for i in range(len(self.required)) if self.small(i) and i not in self.whole]
        for i in small:
            term = self.required[i]
            reads.append(
                select(literal(i), *columns).where(_TERMS.agent_id == self.agent_id, _in_range(term))
            )
        best_of: dict[int, list[tuple[int, float]]] = {}
        for i in drivers:
            if self.small(i):
                continue
            for form in await self.forms_of(i):
                best = (
                    select(*columns)
                    .where(_TERMS.agent_id == self.agent_id, _TERMS.term == form)
                    .order_by(_TERMS.write_rank.desc(), _TERMS.memory_id.desc())
                    .limit(MAX_CANDIDATES)
                    .subquery()
                )
                reads.append(select(literal(i), *best.c))
        if reads:
            for i, memory_id, frequency, write, value in await self.session.execute(union_all(*reads)):
                self.add(int(i), memory_id, frequency, write, value)
                best_of.setdefault(int(i), []).append((memory_id, write))
        self.whole.update(small)
        for i in drivers:
            if self.small(i):
                best_of[i] = [(m, self.ranks[m][0]) for (j, m) in self.held if j == i]
        ids: dict[int, None] = {}
        for i in sorted(drivers, key=lambda i: self.counts[i]):
            for memory_id, _ in sorted(best_of.get(i, []), key=lambda r: (-r[1], -r[0])):
                if len(ids) >= MAX_CANDIDATES:
                    return list(ids)
                ids.setdefault(memory_id, None)
        return list(ids)

    async def look_up(self, ids: list[int]) -> None:
        """Whether each of ``ids`` holds each common requirement: point reads of the index at
        the memories' write ranks in every form (one statement): a range per (form, rank),
        the ids filtered within it. Not row values, which MariaDB's range optimizer handles
        several times slower; a row that pairs one candidate's rank with another's id is still
        a posting of a candidate, so nothing false is read."""
        reads = []
        for i in range(len(self.required)):
            if i in self.whole:
                continue
            missing = [m for m in ids if (i, m) not in self.held and (i, m) not in self.looked_up]
            if not missing:
                continue
            self.looked_up.update((i, m) for m in missing)
            forms = await self.forms_of(i)
            if not forms:
                continue
            reads.append(
                select(literal(i), _TERMS.memory_id, _TERMS.frequency).where(
                    _TERMS.agent_id == self.agent_id,
                    _TERMS.term.in_(forms),
                    _TERMS.write_rank.in_(sorted({self.ranks[m][0] for m in missing})),
                    # A filter, not part of the range: MariaDB would otherwise read every
                    # rank x id pair (200 x 200 ranges) instead of one range per rank.
                    (_TERMS.memory_id + 0).in_(missing),
                )
            )
        if not reads:
            return
        for i, memory_id, frequency in await self.session.execute(union_all(*reads)):
            write, value = self.ranks[memory_id]
            self.add(int(i), memory_id, frequency, write, value)


async def _matching(postings: _Postings, *, every_word: bool) -> list[SearchHit]:
    """The agent's memories holding every word (or any word) and every tag, among at most
    MAX_CANDIDATES read from the rarest requirement's postings, with their text relevance."""
    required, counts = postings.required, postings.counts
    words = [i for i, t in enumerate(required) if t.is_word]
    tags = [i for i, t in enumerate(required) if not t.is_word]
    if every_word or len(words) <= 1:
        options = [[i] for i in range(len(required))]
    else:
        options = [words, *([i] for i in tags)]
    # The driver: the option with the fewest postings (a word group: all of its words').
    drivers = min(options, key=lambda group: sum(counts[i] for i in group))
    if sum(counts[i] for i in drivers) == 0:
        return []
    ids = await postings.read(drivers)
    await postings.look_up(ids)
    word_counts = [counts[i] for i in words]
    hits = []
    for memory_id in ids:
        word_tf = [postings.held.get((i, memory_id), 0) for i in words]
        tags_held = all((i, memory_id) in postings.held for i in tags)
        words_held = all(word_tf) if every_word else (not word_tf or any(word_tf))
        if tags_held and words_held:
            relevance = text_relevance(word_tf, word_counts)
            hits.append(SearchHit(memory_id, relevance, postings.ranks[memory_id][1]))
    return hits
