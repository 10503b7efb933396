"""The audit chain's pure rules (app.domain.audit): hashing, the first break, diffs."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.audit import GENESIS, chain_hash, diff, first_break


def _chain(n: int) -> list[tuple[int, str, str, dict[str, Any]]]:
    rows, prev = [], GENESIS
    for seq in range(1, n + 1):
        event = {
            "seq": seq,
            "action": "agent.update",
            "summary": f"change {seq}",
            "diff": {"a": {"before": seq}},
        }
        h = chain_hash(prev, event)
        rows.append((seq, prev, h, event))
        prev = h
    return rows


def test_an_intact_chain_holds() -> None:
    assert first_break(_chain(5), start_hash=GENESIS, start_seq=1) is None
    assert first_break([], start_hash=GENESIS, start_seq=1) is None


@pytest.mark.parametrize("at", [1, 3, 5])
def test_an_edited_event_is_found_where_it_is(at: int) -> None:
    rows = _chain(5)
    seq, prev, h, event = rows[at - 1]
    rows[at - 1] = (seq, prev, h, {**event, "summary": "nothing happened"})
    broken = first_break(rows, start_hash=GENESIS, start_seq=1)
    assert broken is not None and broken.seq == at and "edited" in broken.why


@pytest.mark.parametrize("at", [1, 2, 4])
def test_a_removed_event_is_found_where_it_was(at: int) -> None:
    rows = [r for r in _chain(5) if r[0] != at]
    broken = first_break(rows, start_hash=GENESIS, start_seq=1)
    assert broken is not None and broken.seq == at


def test_a_rehashed_edit_still_breaks_the_next_link() -> None:
    rows = _chain(3)
    seq, prev, _h, event = rows[1]
    forged = {**event, "summary": "forged"}
    rows[1] = (seq, prev, chain_hash(prev, forged), forged)
    broken = first_break(rows, start_hash=GENESIS, start_seq=1)
    assert broken is not None and broken.seq == 3


def test_the_hash_does_not_depend_on_key_order() -> None:
    assert chain_hash(GENESIS, {"a": 1, "b": [1, 2]}) == chain_hash(GENESIS, {"b": [1, 2], "a": 1})


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({}, {}, {}),
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1}, {"a": 2}, {"a": {"before": 1, "after": 2}}),
        ({}, {"name": "x"}, {"name": {"before": None, "after": "x"}}),
        ({"tools": ["a"]}, {"tools": ["a", "b"]}, {"tools": {"before": ["a"], "after": ["a", "b"]}}),
    ],
)
def test_diff_keeps_only_what_changed(
    before: dict[str, Any], after: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert diff(before, after) == expected


@pytest.mark.parametrize(
    "secret",
    ["my password is hunter2", "ghp_" + "a" * 36, {"api_key": "sk-proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7" * 2}],
)
def test_diff_redacts_credentials(secret: Any) -> None:
    changed = diff({"value": "ok"}, {"value": secret})
    assert str(changed["value"]["after"]).startswith("[redacted")
    assert changed["value"]["before"] == "ok"
