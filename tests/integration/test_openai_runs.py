"""A whole run driven by the `openai` provider, through the worker, against a local server
that speaks the chat-completions API: a tool call, its result fed back, a final answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.runs import scripted_agent, start_run, wait_run
from tests.support.servers import sink_server

pytestmark = pytest.mark.usefixtures("worker")


def chat_server(page_url: str, seen: list[dict[str, Any]]) -> Starlette:
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append({"auth": request.headers.get("authorization"), "body": body})
        tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_messages:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "http__get", "arguments": json.dumps({"url": page_url})},
                    }
                ],
            }
        else:
            fetched = json.loads(tool_messages[-1]["content"])
            message = {"role": "assistant", "content": json.dumps({"summary": fetched["body"]})}
        return JSONResponse(
            {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
        )

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


async def test_an_openai_model_calls_a_tool_then_answers(gql, workspace, model_server, monkeypatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY_FOR_ENVERIF", "sk-test-not-stored")
    seen: list[dict[str, Any]] = []
    async with sink_server() as (sink, sink_url):
        # Where the session binds the key (tests/conftest.py): the model server's /bound.
        model_url = model_server.mount(chat_server(sink_url + "/page?n=7", seen))
        agent = await scripted_agent(
            gql,
            workspace.admin,
            model={
                "provider": "openai",
                "model": "local-test",
                "base_url": model_url + "/v1",
                "api_key_env": "TEST_OPENAI_KEY_FOR_ENVERIF",
            },
            tools=["http.get"],
        )
        run = await wait_run(
            gql, workspace.viewer, await start_run(gql, workspace.operator, agent, {"q": "hi"})
        )

    assert run["status"] == "SUCCEEDED", run
    assert run["result"] == {"summary": "page 7"}
    assert [(s["tool"], s["status"]) for s in run["steps"]] == [
        ("http.get", "SUCCEEDED"),
        (None, "SUCCEEDED"),
    ]
    assert sink.pages == 1
    assert len(seen) == 2 and all(s["auth"] == "Bearer sk-test-not-stored" for s in seen)
    assert [t["function"]["name"] for t in seen[0]["body"]["tools"]] == ["http__get"]
    # The key was read from the environment; it is nowhere in what the API shows.
    agent_view = await gql.ok(
        "query($id: ID!) { agent(id: $id) { model } }", {"id": agent}, token=workspace.admin
    )
    assert "sk-test" not in json.dumps(agent_view)
