"""The short version of the tree chaos scenario (tests/support/tree_chaos.py; the long one
is in tests/chaos): a few 3-level delegation trees with approvals and webhooks, one worker
SIGKILL and one SIGKILL of a private Redis, then the invariants over database and receiver."""

from __future__ import annotations

import pytest

from tests.conftest import DB_KIND
from tests.support.tree_chaos import Chaos, assert_trees_survive

pytestmark = [
    pytest.mark.timeout(240),
    # The production leg, where row locks are real; the long version runs there too.
    pytest.mark.skipif(DB_KIND != "mysql", reason="tree chaos runs on the MariaDB leg"),
]

SHORT = Chaos(
    trees=4, workers=2, worker_kills=1, redis_kills=1, kill_every_s=3.0, redis_down_s=2.0, deadline_s=120
)


async def test_trees_survive_a_worker_kill_and_a_redis_kill(
    workspace, settings, sessionmaker, processes, tmp_path
) -> None:
    outcome = await assert_trees_survive(
        "tree chaos (short)", SHORT, settings=settings, workspace=workspace, sessionmaker=sessionmaker,
        processes=processes, tmp_path=tmp_path,
    )  # fmt: skip
    assert outcome.approvals + outcome.rejections == SHORT.trees * 2  # one approval per leaf
