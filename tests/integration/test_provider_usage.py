"""What the remote providers report reaches the run: each turn's usage on its step, the run's
and its tree's totals, and their cost at the deployment's prices (docs/concepts/budgets.md),
through a real worker against the vendors' loopback fakes (tests/support/vendors.py)."""

from __future__ import annotations

import pytest

from app.settings import Settings
from tests.integration.test_provider_runs import ANTHROPIC_KEY, OPENAI_KEY, anthropic_model, openai_model
from tests.support.runs import scripted_agent, start_run, wait_run
from tests.support.vendors import (
    FakeVendor,
    anthropic_app,
    anthropic_text,
    openai_app,
    openai_text,
    openai_usage,
)

pytestmark = pytest.mark.usefixtures("worker")

USAGE = "inputTokens outputTokens cacheReadTokens cacheWriteTokens costUsd turns"
RUN_USAGE = f"query($id: ID!) {{ run(id: $id) {{ status usage {{ {USAGE} }} treeUsage {{ {USAGE} }} steps {{ usage {{ {USAGE} }} }} }} }}"


@pytest.fixture(scope="module")
def settings(settings: Settings) -> Settings:
    # USD per 1M tokens: a million input tokens of gpt-test cost 2 dollars.
    prices = {
        "gpt-test": {"input": 2.0, "output": 8.0, "cacheRead": 0.5},
        "claude-test": {"input": 3.0, "output": 15.0},
    }
    return settings.model_copy(update={"model_prices": prices})


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPENAI_KEY, "sk-openai-test")
    monkeypatch.setenv(ANTHROPIC_KEY, "sk-ant-test")


async def _usage_of(gql, workspace, run_id: str) -> dict:
    await wait_run(gql, workspace.viewer, run_id)
    return (await gql.ok(RUN_USAGE, {"id": run_id}, token=workspace.viewer))["run"]


async def test_an_openai_turns_usage_shows_on_its_step_and_its_run(
    gql, workspace, model_server, keys
) -> None:
    api = FakeVendor()
    api.replies.append(openai_text("done", usage=openai_usage(prompt=1_120, completion=30, cached=120)))
    url = model_server.mount(openai_app(api))
    agent = await scripted_agent(gql, workspace.admin, model=openai_model(url), tools=[])
    run = await _usage_of(gql, workspace, await start_run(gql, workspace.operator, agent))

    assert run["status"] == "SUCCEEDED"
    expected_cost = (1_000 * 2.0 + 30 * 8.0 + 120 * 0.5) / 1_000_000
    usage = run["usage"]
    assert (usage["inputTokens"], usage["outputTokens"], usage["cacheReadTokens"], usage["turns"]) == (
        1_000,
        30,
        120,
        1,
    )
    assert usage["costUsd"] == pytest.approx(expected_cost)
    assert run["treeUsage"] == usage  # a run alone is its whole tree
    assert [s["usage"]["inputTokens"] for s in run["steps"] if s["usage"]] == [1_000]


async def test_an_anthropic_turns_cache_reads_and_writes_are_counted(
    gql, workspace, model_server, keys
) -> None:
    api = FakeVendor()
    reported = {
        "input_tokens": 400,
        "output_tokens": 12,
        "cache_read_input_tokens": 50,
        "cache_creation_input_tokens": 9,
    }
    api.replies.append(anthropic_text("done", usage=reported))
    url = model_server.mount(anthropic_app(api))
    agent = await scripted_agent(gql, workspace.admin, model=anthropic_model(url), tools=[])
    run = await _usage_of(gql, workspace, await start_run(gql, workspace.operator, agent))

    assert run["status"] == "SUCCEEDED"
    usage = run["usage"]
    assert (
        usage["inputTokens"],
        usage["outputTokens"],
        usage["cacheReadTokens"],
        usage["cacheWriteTokens"],
    ) == (
        400,
        12,
        50,
        9,
    )
    assert usage["costUsd"] == pytest.approx((400 * 3.0 + 12 * 15.0) / 1_000_000)
