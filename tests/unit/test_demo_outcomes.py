"""The demo agents (app/dev/demo.toml) as an example should be: an operator's rejection, a
failed fetch, a child that failed or was never started, and an input without the keys they
read all end in a readable answer, never a template error (issue 27 item 12). Each script is
rendered turn by turn, as the scripted provider renders it, with such results."""

from __future__ import annotations

from typing import Any

import pytest

from app.dev.demo import demo_agents
from app.domain.model_errors import ModelErrorCode, model_error
from app.engine.providers.sandbox import Renderer

AGENTS = {a.name: a for a in demo_agents("http://127.0.0.1:8000")}
REJECTED = model_error(ModelErrorCode.REJECTED, "not this week")
CHILD_FAILED = {
    "status": "FAILED",
    "result": None,
    "error": "the enricher ran out of budget",
    "runId": "UnVuOjk",
}
CHILD_OK = {"status": "SUCCEEDED", "result": {"posted": 200}, "error": None, "runId": "UnVuOjk"}
NOT_DELEGATED = model_error(ModelErrorCode.DENIED, "agents.delegate is denied by policy")
PAGE = {"status": 200, "body": '{"companies": [], "candidates": []}'}
FETCH_FAILED = model_error("NETWORK_ERROR", "connection refused")


def play(name: str, outcomes: dict[str, Any], run_input: Any) -> Any:
    """The final answer of ``name``'s script when each tool answers with ``outcomes[tool]``."""
    renderer = Renderer()
    results: list[Any] = []
    for turn, step in enumerate(AGENTS[name].model["steps"]):
        variables = {"input": run_input, "results": results, "memories": [], "run": {"id": 7, "depth": 0}}
        where = f"{name} step {turn}"
        if "final" in step:
            return renderer.render_tree(step["final"], variables, where)
        for call in step.get("calls", [step]):
            renderer.render_tree(call.get("args", {}), variables, where)
            results = [*results, outcomes.get(call["call"], {})]
    raise AssertionError(f"{name} has no final step")


@pytest.mark.parametrize("run_input", [{}, {"task": None, "company": None}])
@pytest.mark.parametrize("name", ["researcher", "enricher"])
def test_a_rejected_post_is_reported(name: str, run_input: Any) -> None:
    final = play(name, {"http.get": PAGE, "webhook.post": REJECTED}, run_input)
    assert final == {"fetched": 200, "posted": "not posted: not this week"}


@pytest.mark.parametrize("name", ["researcher", "enricher"])
def test_a_failed_fetch_is_reported(name: str) -> None:
    final = play(name, {"http.get": FETCH_FAILED, "webhook.post": REJECTED}, {})
    assert final["fetched"] == "not fetched: connection refused"


@pytest.mark.parametrize(
    ("name", "key"), [("lead-researcher", "enrichment"), ("research-director", "research")]
)
@pytest.mark.parametrize(
    ("child", "outcome", "says"),
    [
        (CHILD_OK, "SUCCEEDED", None),
        (CHILD_FAILED, "FAILED", "ran out of budget"),
        (NOT_DELEGATED, "not delegated: agents.delegate is denied by policy", "denied by policy"),
    ],
)
def test_a_parent_reports_how_its_child_ended(
    name: str, key: str, child: Any, outcome: str, says: str | None
) -> None:
    final = play(name, {"agents.delegate": child, "agents.list": {"agents": []}}, {})
    assert final["outcome"] == outcome
    if says is None:
        assert final[key] == {"posted": 200}
    else:
        assert says in final[key] and "did not finish" in final[key]


def test_the_qualifier_takes_an_input_without_domains() -> None:
    assert play("qualifier", {"http.get": PAGE}, {}) == {"qualified": [], "rejected": []}


def test_the_prospector_reports_a_rejected_lead() -> None:
    feed = {"status": 200, "body": '{"candidates": [{"domain": "a.example"}]}'}
    qualified = {"status": "SUCCEEDED", "result": {"qualified": [{"domain": "a.example"}], "rejected": []}}
    outcomes = {"http.get": feed, "memory.search": {"memories": []}, "agents.delegate": qualified,
                "memory.remember": {"ok": True}, "mcp.crm.create_lead": REJECTED}  # fmt: skip
    final = play("prospector", outcomes, {})
    assert final["report"].endswith("leads created in the CRM: none (not this week).")
    assert final["qualified"] == ["a.example"]
