"""``make bench-peers``'s arithmetic and table (bench/peers/compare.py): the medians over
repetitions, the ratio to the floor of the same database in the same repetition, and the
Markdown row docs/performance.md carries."""

from __future__ import annotations

import pytest

from bench.peers.compare import Measurement, Row, format_table, format_targets, summarise


def m(engine: str, database: str, repetition: int, rate: float, main: float | None = 1.0,
      db: float | None = None, redis: float | None = None) -> Measurement:  # fmt: skip
    return Measurement(engine, database, repetition, rate, main, db, redis)


def test_the_ratio_is_taken_per_repetition_against_the_same_databases_floor() -> None:
    measurements = [
        # The machine slows down over the sitting: the floor halves, so does the engine.
        m("floor", "sqlite", 1, 400.0), m("dbos", "sqlite", 1, 100.0),
        m("floor", "sqlite", 2, 200.0), m("dbos", "sqlite", 2, 50.0),
        m("floor", "sqlite", 3, 100.0), m("dbos", "sqlite", 3, 30.0),
        m("floor", "mariadb", 1, 1000.0),  # another database's floor never counts
    ]  # fmt: skip
    rows = {(r.engine, r.database): r for r in summarise(measurements)}
    dbos = rows[("dbos", "sqlite")]
    # Per repetition 0.25, 0.25, 0.30: median 0.25.
    assert dbos.ratio_to_floor == pytest.approx(0.25)
    assert dbos.runs_per_s == 50.0
    assert dbos.repetitions == 3
    assert rows[("floor", "sqlite")].ratio_to_floor == 1.0


def test_the_median_of_ratios_is_not_the_ratio_of_medians() -> None:
    measurements = [
        m("floor", "postgres", 1, 100.0), m("langgraph", "postgres", 1, 90.0),
        m("floor", "postgres", 2, 300.0), m("langgraph", "postgres", 2, 60.0),
        m("floor", "postgres", 3, 200.0), m("langgraph", "postgres", 3, 30.0),
    ]  # fmt: skip
    row = next(r for r in summarise(measurements) if r.engine == "langgraph")
    assert row.ratio_to_floor == pytest.approx(0.2)  # 0.9, 0.2, 0.15
    assert row.runs_per_s / 200.0 == pytest.approx(0.3)  # the medians' ratio, not reported


def test_without_a_floor_there_is_no_ratio_and_missing_cpu_is_left_out_of_the_median() -> None:
    rows = summarise([m("enverif", "mariadb", 1, 80.0, main=10.0, db=None),
                      m("enverif", "mariadb", 2, 90.0, main=12.0, db=2.0, redis=1.0)])  # fmt: skip
    (row,) = rows
    assert row.ratio_to_floor is None
    assert (row.main_cpu_ms, row.db_cpu_ms, row.redis_cpu_ms) == (11.0, 2.0, 1.0)


def test_the_table_has_one_line_per_row_and_says_where_the_cpu_went() -> None:
    rows = [
        Row("floor", "sqlite", 412.34, 1.0, 2.0, None, None, 3),
        Row("enverif", "mariadb", 101.96, 0.291, 9.64, 2.25, 0.8, 3),
        Row("dbos", "postgres", 96.0, None, None, None, None, 3),
        Row("langgraph", "mariadb", 58.0, 0.16, 13.5, None, None, 3),
    ]
    lines = format_table(rows).splitlines()
    assert lines[0] == "| engine | database | runs/s | CPU ms per run (main + db) | x floor |"
    assert lines[2] == "| raw script: 3 GETs + 3 INSERT+COMMIT | sqlite | 412.3 | 2.0 | 1.00 |"
    assert (
        lines[3] == "| Enverif worker, webhook.post x3 | mariadb | 102.0 | 9.6 + 2.2 (+ redis 0.8) | 0.29 |"
    )
    assert lines[4] == "| DBOS workflow, 3 steps | postgres | 96.0 | n/a | n/a |"
    # A server database whose processes could not be read says so instead of looking free.
    assert (
        lines[5] == "| LangGraph ReAct agent, checkpoint per superstep | mariadb | 58.0 | 13.5 + n/a | 0.16 |"
    )
    assert len(lines) == 6


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [Row("floor", "sqlite", 200.0, 1.0, 5.0, None, None, 3),
             Row("enverif", "sqlite", 80.0, 0.40, 13.0, None, 0.3, 3),
             Row("dbos", "sqlite", 70.0, 0.35, 14.0, None, None, 3)],
            ["- Enverif on sqlite >= 0.40 x floor: 0.40 (met)",
             "- Enverif ahead of DBOS on sqlite: 0.40 against 0.35 x floor (met)"],
        ),
        (
            [Row("floor", "mariadb", 180.0, 1.0, 5.5, 0.6, None, 3),
             Row("enverif", "mariadb", 63.0, 0.35, 15.6, 3.7, 0.4, 3)],
            ["- Enverif on mariadb >= 0.45 x floor: 0.35 (not met)",
             "- mariadbd <= 1 ms of CPU per Enverif run: 3.7 ms (the floor's: 0.6) (not met)"],
        ),
        (
            # Level with DBOS is not ahead of it; a server whose CPU was not read says nothing.
            [Row("enverif", "sqlite", 70.0, 0.34, 14.0, None, None, 3),
             Row("dbos", "sqlite", 70.0, 0.34, 14.0, None, None, 3),
             Row("enverif", "mariadb", 50.0, 0.50, 15.0, None, None, 3)],
            ["- Enverif on sqlite >= 0.40 x floor: 0.34 (not met)",
             "- Enverif on mariadb >= 0.45 x floor: 0.50 (met)",
             "- Enverif ahead of DBOS on sqlite: 0.34 against 0.34 x floor (not met)"],
        ),
        ([Row("langgraph", "sqlite", 55.0, 0.29, 16.0, None, None, 3)], []),
    ],
)  # fmt: skip
def test_the_targets_are_said_beside_what_was_measured(rows: list[Row], expected: list[str]) -> None:
    assert format_targets(rows).splitlines() == expected
