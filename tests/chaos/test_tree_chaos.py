"""Chaos: the tree scenario at length (tests/support/tree_chaos.py), and the workers' pace
after Redis outages at the scale the outage was first measured at (two workers, 3 s SIGKILLs
of Redis, three times). ``make chaos`` (MariaDB by default); the short versions are in
tests/integration/test_tree_chaos.py and test_worker_recovery.py."""

from __future__ import annotations

import pytest

from tests.support.throughput import Load, assert_back_to_pace
from tests.support.tree_chaos import Chaos, assert_trees_survive

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

LONG = Chaos(
    trees=16, workers=3, worker_kills=8, redis_kills=3, kill_every_s=2.0, redis_down_s=3.0, deadline_s=240
)
# Within two poll intervals is the goal; a loaded machine adds its own scheduling delays.
RECOVERY_BOUND_S = 1.0


async def test_trees_survive_worker_and_redis_kills(
    workspace, settings, sessionmaker, processes, tmp_path
) -> None:
    await assert_trees_survive(
        "tree chaos", LONG, settings=settings, workspace=workspace, sessionmaker=sessionmaker,
        processes=processes, tmp_path=tmp_path,
    )  # fmt: skip


async def test_throughput_is_back_at_once_after_each_redis_outage(
    workspace, settings, sessionmaker, processes, tmp_path
) -> None:
    await assert_back_to_pace(
        Load(workers=2, max_jobs=4, runs_per_s=20, outages=3, outage_s=3.0, gap_s=15.0), bound_s=RECOVERY_BOUND_S,
        settings=settings, workspace=workspace, sessionmaker=sessionmaker, processes=processes, tmp_path=tmp_path,
    )  # fmt: skip
