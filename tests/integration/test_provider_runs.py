"""Whole runs on the remote providers through a real worker, and live model output
(``runOutput``) over graphql-ws from a real uvicorn: the providers' loopback fakes speak the
vendors' wire formats (tests/support/vendors.py), streaming included."""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.settings import Settings
from tests.support.runs import DECIDE, scripted_agent, start_run, wait_run
from tests.support.servers import serve, sink_server
from tests.support.vendors import (
    FakeVendor,
    Reply,
    anthropic_app,
    anthropic_calls,
    anthropic_text,
    openai_app,
    openai_text,
)
from tests.support.ws import RUN_OUTPUT, GraphQLWS

pytestmark = pytest.mark.usefixtures("worker")

OPENAI_KEY = "TEST_OPENAI_KEY_FOR_ENVERIF"
ANTHROPIC_KEY = "TEST_ANTHROPIC_KEY_FOR_ENVERIF"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPENAI_KEY, "sk-openai-test")
    monkeypatch.setenv(ANTHROPIC_KEY, "sk-ant-test")


@pytest.fixture
async def ws_url(settings: Settings) -> AsyncIterator[str]:
    from app.main import create_app

    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url.replace("http://", "ws://") + "/graphql"


def openai_model(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "provider": "openai",
        "model": "gpt-test",
        "base_url": url + "/v1",
        "api_key_env": OPENAI_KEY,
        **extra,
    }


def anthropic_model(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "provider": "anthropic",
        "model": "claude-test",
        "base_url": url,
        "api_key_env": ANTHROPIC_KEY,
        **extra,
    }


async def output(ws: GraphQLWS, op: str, run_id: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    stream = await ws.events(op, timeout_s=timeout_s, field="runOutput")
    assert stream.complete  # the run ended: so did the subscription
    return list(stream)


async def approve_pending(gql: Any, workspace: Any, run_id: str) -> None:
    run = await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
    (pending,) = run["pendingApprovals"]
    await gql.ok(DECIDE, {"id": pending["id"], "approve": True}, token=workspace.operator)


# -- live output --------------------------------------------------------------------------


async def test_scripted_final_answer_streams_in_chunks_to_run_output(gql, workspace, ws_url) -> None:
    final = "The report: " + "all systems nominal, " * 12
    async with sink_server() as (_sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[{"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}}, {"final": final}],
        )
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
        ws = await GraphQLWS.open(ws_url, workspace.viewer)
        try:
            await ws.subscribe("1", run_id, query=RUN_OUTPUT, run=run_id)
            await asyncio.sleep(0.2)  # subscribed before the turn starts
            await approve_pending(gql, workspace, run_id)
            chunks = await output(ws, "1", run_id)
        finally:
            await ws.close()

    run = await wait_run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED" and run["result"] == final
    *pieces, done = chunks
    assert done == {"runId": run_id, "stepSeq": 2, "text": "", "done": True}
    assert "".join(p["text"] for p in pieces) == final  # in order, nothing twice
    assert len(pieces) == math.ceil(len(final) / 64) and all(len(p["text"]) <= 64 for p in pieces)
    assert {p["stepSeq"] for p in pieces} == {run["steps"][-1]["seq"]} == {2}


async def test_a_run_nobody_watches_writes_no_live_output(gql, workspace, settings) -> None:
    from redis.asyncio import Redis

    from app import keys
    from app.graphql.ids import from_global_id

    redis = Redis.from_url(settings.effective_redis_url)
    pubsub = redis.pubsub()
    await pubsub.subscribe(keys.output_channel(settings.redis_prefix))
    try:
        agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "nobody reads this " * 8}])
        unwatched = await start_run(gql, workspace.operator, agent)
        run = await wait_run(gql, workspace.viewer, unwatched)
        seen: set[int] = set()
        while (msg := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)) is not None:
            seen.add(json.loads(msg["data"])["r"])
    finally:
        await pubsub.aclose()
        await redis.aclose()
    assert run["status"] == "SUCCEEDED" and run["result"] == "nobody reads this " * 8
    # Nothing published for it (a watched run's pieces: the tests above and below).
    assert from_global_id(unwatched, "Run") not in seen


async def test_a_subscriber_joining_mid_turn_gets_the_text_so_far_first(
    gql, workspace, model_server, keys, ws_url
) -> None:
    text = "Streaming, one piece at a time, from a model that takes its time."
    api = FakeVendor(piece_chars=4)
    api.replies.append(Reply(body=openai_text(text).body, event_gap_s=0.08))
    url = model_server.mount(openai_app(api))
    agent = await scripted_agent(gql, workspace.admin, model=openai_model(url), tools=[])
    run_id = await start_run(gql, workspace.operator, agent)

    early = await GraphQLWS.open(ws_url, workspace.viewer)
    late = await GraphQLWS.open(ws_url, workspace.viewer)
    try:
        await early.subscribe("e", run_id, query=RUN_OUTPUT, run=run_id)
        first = await early.events("e", 1, field="runOutput", timeout_s=20)
        await asyncio.sleep(0.5)  # several pieces later
        await late.subscribe("l", run_id, query=RUN_OUTPUT, run=run_id)
        late_chunks = await output(late, "l", run_id)
        early_chunks = list(first) + await output(early, "e", run_id)
    finally:
        await early.close()
        await late.close()

    for chunks in (early_chunks, late_chunks):
        assert "".join(c["text"] for c in chunks) == text
        assert chunks[-1]["done"] is True
    # The late one's first chunk is everything said before it joined, in one piece.
    assert len(late_chunks[0]["text"]) > 4 and len(late_chunks) < len(early_chunks)
    assert api.requests[0]["json"]["stream"] is True
    run = await wait_run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED" and run["result"] == text  # the step has the whole text


async def test_run_output_of_another_workspaces_run_is_not_found(
    gql, workspace, make_workspace, ws_url
) -> None:
    other_workspace = await make_workspace()
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    run_id = await start_run(gql, workspace.operator, agent)
    ws = await GraphQLWS.open(ws_url, other_workspace.viewer)
    try:
        await ws.subscribe("1", run_id, query=RUN_OUTPUT, run=run_id)
        (error,) = await ws.errors("1")
    finally:
        await ws.close()
    assert error["extensions"]["code"] == "NOT_FOUND"


# -- whole runs ---------------------------------------------------------------------------


async def test_an_anthropic_agent_calls_tools_waits_for_approval_and_delegates_to_an_openai_child(
    gql, workspace, model_server, keys
) -> None:
    child_api = FakeVendor()
    child_api.responder = lambda body: openai_text(
        json.dumps({"child": "summary of " + json.loads(body["messages"][-1]["content"])["task"]})
    )
    child_name = f"child-{uuid.uuid4().hex[:8]}"
    await scripted_agent(
        gql,
        workspace.admin,
        name=child_name,
        model=openai_model(model_server.mount(openai_app(child_api))),
        tools=[],
    )

    parent_api = FakeVendor()
    async with sink_server() as (sink, sink_url):

        def parent(body: dict[str, Any]) -> Reply:
            results = [b for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                       for b in m["content"] if b["type"] == "tool_result"]  # fmt: skip
            if not results:
                return anthropic_calls(("http__get", {"url": sink_url + "/page?n=3"}), text="Fetching.")
            if len(results) == 1:
                return anthropic_calls(("webhook__post", {"url": sink_url + "/hook", "payload": {"n": 1}}))
            if len(results) == 2:
                return anthropic_calls(("agents__delegate", {"agent": child_name, "task": "summarise"}))
            child = json.loads(results[-1]["content"])
            return anthropic_text(
                json.dumps({"page": json.loads(results[0]["content"])["body"], "child": child["result"]})
            )

        parent_api.responder = parent
        agent = await scripted_agent(
            gql,
            workspace.admin,
            model=anthropic_model(model_server.mount(anthropic_app(parent_api))),
            tools=["http.get", "webhook.post", "agents.delegate"],
        )
        run_id = await start_run(gql, workspace.operator, agent, {"q": "go"})
        await approve_pending(gql, workspace, run_id)
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=40)

    assert run["status"] == "SUCCEEDED", run
    assert run["result"] == {"page": "page 3", "child": {"child": "summary of summarise"}}
    assert [(s["tool"], s["status"]) for s in run["steps"]] == [
        ("http.get", "SUCCEEDED"),
        ("webhook.post", "SUCCEEDED"),
        ("agents.delegate", "SUCCEEDED"),
        (None, "SUCCEEDED"),
    ]
    assert sink.pages == 1 and len(sink.deliveries) == 1
    # Every parent turn streamed (the worker listens), with the key in x-api-key only.
    # Four turns; a turn may be asked again when a resumed run's wake-ups race (at least once).
    assert len({len(r["json"]["messages"]) for r in parent_api.requests}) == 4
    assert all(
        r["json"]["stream"] is True and r["headers"]["x-api-key"] == "sk-ant-test"
        for r in parent_api.requests
    )
    last = parent_api.requests[-1]["json"]
    assert sorted(t["name"] for t in last["tools"]) == ["agents__delegate", "http__get", "webhook__post"]
    uses = [b for m in last["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert [u["name"] for u in uses] == ["http__get", "webhook__post", "agents__delegate"]
    assert child_api.requests and child_api.requests[0]["headers"]["authorization"] == "Bearer sk-openai-test"


async def test_a_rate_limited_provider_fails_the_run_with_its_code(
    gql, workspace, model_server, keys, settings
) -> None:
    api = FakeVendor()
    api.responder = lambda body: Reply(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "secret-quota-detail"}},
                                       headers={"retry-after": "0"})  # fmt: skip
    agent = await scripted_agent(
        gql, workspace.admin, model=anthropic_model(model_server.mount(anthropic_app(api))), tools=[]
    )
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent), timeout_s=40)
    assert run["status"] == "FAILED"
    assert run["error"].endswith("[PROVIDER_RATE_LIMITED]") and "HTTP 429" in run["error"]
    assert "secret-quota-detail" not in run["error"]
    assert len(api.requests) == settings.provider_max_retries + 1


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ({"provider": "anthropic", "model": "claude-test", "max_tokens": -1}, "model.max_tokens"),
        ({"provider": "anthropic", "model": "claude-test", "temperature": 0.5}, "model.temperature"),
        ({"provider": "anthropic", "model": "claude-test", "api_key_env": "HOME"}, "model.api_key_env"),
        ({"provider": "openai", "model": "gpt-test", "tool_choice": "always"}, "model.tool_choice"),
        (
            {"provider": "openai", "model": "gpt-test", "max_tokens": 5, "max_completion_tokens": 5},
            "model.max_completion_tokens",
        ),
    ],
)
async def test_create_agent_refuses_a_bad_model_config_naming_the_field(
    gql, workspace, model: dict[str, Any], field: str
) -> None:
    error = await gql.error(
        "mutation($input: CreateAgentInput!) { createAgent(input: $input) { id } }",
        {"input": {"name": f"bad-{uuid.uuid4().hex[:8]}", "model": model}},
        token=workspace.admin,
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}
