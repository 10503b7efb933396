"""Which memories an agent starts a run with: pure ranking under a budget."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# A memory untouched for this long counts half as much as a fresh one of equal importance.
RECENCY_HALF_LIFE_DAYS = 30.0


@dataclass(frozen=True, slots=True)
class MemoryCandidate:
    id: int
    key: str
    value: str
    importance: float
    updated_at: datetime
    last_used_at: datetime | None


def value_score(memory: MemoryCandidate, now: datetime) -> float:
    """importance x recency, recency halving every RECENCY_HALF_LIFE_DAYS since last touched."""
    touched = max(memory.updated_at, memory.last_used_at or memory.updated_at)
    age_days = max((now - touched).total_seconds(), 0.0) / 86_400
    recency: float = 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
    return memory.importance * recency


def injection_size(memory: MemoryCandidate) -> int:
    return len(memory.key) + len(memory.value)


def select_for_injection(
    candidates: list[MemoryCandidate], *, now: datetime, max_items: int, max_chars: int
) -> list[MemoryCandidate]:
    """Highest value first, within both budgets. A memory too large for what is left of the
    character budget is skipped, so one huge memory cannot crowd out all the others. Ties
    break on id (newer first) so the choice is deterministic."""
    ranked = sorted(candidates, key=lambda m: (-value_score(m, now), -m.id))
    chosen: list[MemoryCandidate] = []
    chars = 0
    for memory in ranked:
        if len(chosen) >= max_items:
            break
        size = injection_size(memory)
        if chars + size > max_chars:
            continue
        chosen.append(memory)
        chars += size
    return chosen
