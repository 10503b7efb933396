"""Model providers as a user meets their limits, through GraphQL and a real arq worker:

- the openai provider's API key variables, and where each may be sent, are the deployment's
  (ENVERIF_PROVIDER_KEYS): refused at createAgent and updateAgent, and again in the worker
  for rows written before (or by hand), before a byte is sent; a loopback receiver outside
  the binding never sees the key;
- its requests go through the network guard (a loopback ``base_url`` is refused unless
  private networks are allowed) and its errors never show the remote body;
- scripted templates fail their run with a clear error at the output cap or the time
  budget, and never hold up another workspace's run.

Each test builds the worker it needs (settings differ from the session's), so this module
does not use the shared ``worker`` fixture.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.graphql.ids import from_global_id
from app.settings import Settings
from tests.conftest import stop_worker
from tests.support.graphql import CREATE_AGENT
from tests.support.runs import scripted_agent, start_run, wait_run
from tests.support.servers import serve
from tests.support.trees import overwrite_agent_config

# Bound by the session settings (tests/conftest.py) to the model server's /bound prefix.
KEY_ENV = "TEST_OPENAI_KEY_FOR_ENVERIF"
KEY = "sk-bound-key-must-not-leave"
SECRET_BODY = "db_password=hunter2-internal"

UPDATE_AGENT = """
mutation($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { id model } }
"""

WorkerFactory = Callable[..., AbstractAsyncContextManager[Any]]


@pytest.fixture
def make_worker(settings: Settings) -> WorkerFactory:
    """A real arq worker on this session's queue, with some settings changed."""

    @asynccontextmanager
    async def _worker(**overrides: Any) -> AsyncIterator[Any]:
        from workers.main import build_worker

        w = build_worker(settings.model_copy(update=overrides), handle_signals=False)
        task = asyncio.create_task(w.main())
        try:
            yield w
        finally:
            await stop_worker(w, task)

    return _worker


def listener(seen: list[dict[str, Any]], *, status: int = 200, body: Any = None) -> Starlette:
    """A chat-completions endpoint on 127.0.0.1 that records what reaches it."""

    async def completions(request: Request) -> JSONResponse:
        seen.append({"auth": request.headers.get("authorization"), "body": await request.json()})
        answer = body if body is not None else {"choices": [{"message": {"content": '"ok"'}}]}
        return JSONResponse(answer, status_code=status)

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def openai_model(base_url: str, key_env: str = KEY_ENV) -> dict[str, Any]:
    return {"provider": "openai", "model": "m", "base_url": base_url + "/v1", "api_key_env": key_env}


def seconds(run: dict[str, Any], start: str = "startedAt", end: str = "finishedAt") -> float:
    return (datetime.fromisoformat(run[end]) - datetime.fromisoformat(run[start])).total_seconds()


# -- API key variables --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["HOME", "PATH", "AWS_SECRET_ACCESS_KEY"])
async def test_create_agent_refuses_key_variables_outside_the_allowlist(
    gql, workspace, model_server, name: str
) -> None:
    spec = {"name": f"a-{name.lower()}", "model": openai_model(model_server.bound_url, name)}
    error = await gql.error(CREATE_AGENT, {"input": spec}, token=workspace.admin)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "model.api_key_env"}
    assert f"model.api_key_env {name!r} is not allowed" in error["message"]
    assert "OPENAI_API_KEY" in error["message"]


async def test_update_agent_refuses_key_variables_outside_the_allowlist(gql, workspace, model_server) -> None:
    agent = await scripted_agent(gql, workspace.admin, model=openai_model(model_server.bound_url))
    error = await gql.error(
        UPDATE_AGENT,
        {"id": agent, "input": {"model": openai_model(model_server.bound_url, "HOME")}},
        token=workspace.admin,
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "model.api_key_env"}
    view = await gql.ok("query($id: ID!) { agent(id: $id) { model } }", {"id": agent}, token=workspace.admin)
    assert view["agent"]["model"]["api_key_env"] == KEY_ENV  # nothing was written


# Loopback base URLs the session's binding (http://127.0.0.1:PORT/bound) does not cover, each a
# way an admin might try to have the key sent to a server of their own (OTHER: a listener on
# another loopback port).
TRICKS = {
    "another port": "http://127.0.0.1:{other}/bound",
    "another path": "http://127.0.0.1:{port}/elsewhere",
    "a prefix not at a segment boundary": "http://127.0.0.1:{port}/bound-evil",
    "dot segments": "http://127.0.0.1:{port}/bound/../elsewhere",
    "encoded dot segments": "http://127.0.0.1:{port}/bound/%2e%2e/elsewhere",
    "an encoded slash": "http://127.0.0.1:{port}/bound%2f..%2felsewhere",
    "userinfo naming the bound host": "http://127.0.0.1:{port}@127.0.0.1:{other}/bound",
    "another name for the host": "http://localhost:{port}/bound",
    "another scheme": "https://127.0.0.1:{port}/bound",
    "a query": "http://127.0.0.1:{port}/bound?next=http://127.0.0.1:{other}",
}


@pytest.mark.parametrize("trick", list(TRICKS))
async def test_create_and_update_agent_refuse_a_base_url_the_key_is_not_bound_to(
    gql, workspace, model_server, trick: str
) -> None:
    seen: list[dict[str, Any]] = []
    async with serve(listener(seen)) as other:
        url = TRICKS[trick].format(port=model_server.port, other=other.rsplit(":", 1)[1])
        spec = {"name": f"a-{uuid.uuid4().hex[:8]}", "model": openai_model(url)}
        error = await gql.error(CREATE_AGENT, {"input": spec}, token=workspace.admin)
        assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "model.base_url"}, error
        agent = await scripted_agent(gql, workspace.admin, model=openai_model(model_server.bound_url))
        error = await gql.error(
            UPDATE_AGENT, {"id": agent, "input": {"model": openai_model(url)}}, token=workspace.admin
        )
        assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "model.base_url"}, error
    assert seen == []


async def test_the_key_goes_to_its_bound_url_only(
    gql, workspace, sessionmaker, model_server, make_worker, monkeypatch
) -> None:
    """The legitimate case beside the refused one: the bound receiver gets the key; a run
    whose stored config points elsewhere (a row written by hand, or before the binding
    narrowed) fails before a byte is sent, and neither its receiver on this server nor one on
    another port ever sees the key."""
    monkeypatch.setenv(KEY_ENV, KEY)
    bound_seen: list[dict[str, Any]] = []
    other_seen: list[dict[str, Any]] = []
    bound_url = model_server.mount(listener(bound_seen))
    unbound_url = model_server.mount_unbound(listener(other_seen))
    async with serve(listener(other_seen)) as other_port_url:
        good = await scripted_agent(gql, workspace.admin, model=openai_model(bound_url), tools=[])
        bad = [
            await scripted_agent(gql, workspace.admin, model=openai_model(bound_url), tools=[])
            for _ in range(2)
        ]
        for agent, url in zip(bad, (unbound_url, other_port_url), strict=True):
            await overwrite_agent_config(
                sessionmaker, from_global_id(agent, "Agent"), model=openai_model(url)
            )
        async with make_worker():
            ok = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, good))
            refused = [
                await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, a))
                for a in bad
            ]
    assert ok["status"] == "SUCCEEDED", ok
    assert [s["auth"] for s in bound_seen] == [f"Bearer {KEY}"]
    for run in refused:
        assert run["status"] == "FAILED", run
        assert "model.base_url" in run["error"] and f"not where {KEY_ENV} may be sent" in run["error"], run
        assert KEY not in json.dumps(run)
    assert other_seen == []
    assert model_server.seen(unbound_url) == []
    assert all(
        r.authorization != f"Bearer {KEY}" for r in model_server.requests if r.path.startswith("/elsewhere")
    )


async def test_a_worker_whose_binding_narrowed_refuses_before_sending(
    gql, workspace, model_server, make_worker, monkeypatch
) -> None:
    """Checked again at call time, under the worker's own settings: an agent the API accepted
    runs under a deployment that no longer binds its key there."""
    monkeypatch.setenv(KEY_ENV, KEY)
    seen: list[dict[str, Any]] = []
    url = model_server.mount(listener(seen))
    agent = await scripted_agent(gql, workspace.admin, model=openai_model(url), tools=[])
    narrowed = {
        KEY_ENV: [model_server.origin + "/bound/someone-else"],
        "OPENAI_API_KEY": [model_server.bound_url],
    }
    async with make_worker(provider_keys=narrowed):
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "FAILED", run
    assert run["error"].startswith("agent configuration: model.base_url"), run
    assert seen == [] and model_server.seen(url) == []


async def test_a_stored_config_naming_another_variable_fails_the_run_without_sending(
    gql, workspace, sessionmaker, make_worker, model_server, monkeypatch
) -> None:
    monkeypatch.setenv("HOME_LIKE_SECRET_FOR_ENVERIF", "s3cr3t-value")
    seen: list[dict[str, Any]] = []
    url = model_server.mount(listener(seen))
    agent = await scripted_agent(gql, workspace.admin, model=openai_model(url), tools=[])
    # An old row, written before the allowlist existed (or by hand): the API would refuse it.
    await overwrite_agent_config(
        sessionmaker, from_global_id(agent, "Agent"), model=openai_model(url, "HOME_LIKE_SECRET_FOR_ENVERIF")
    )
    async with make_worker():
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "FAILED", run
    assert "api_key_env 'HOME_LIKE_SECRET_FOR_ENVERIF' is not allowed" in run["error"]
    assert seen == []  # nothing reached the listener
    assert "s3cr3t-value" not in json.dumps(run)


# -- network guard and errors -------------------------------------------------------------


async def test_a_loopback_base_url_is_refused_when_private_networks_are_not_allowed(
    gql, workspace, make_worker, model_server, monkeypatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-must-not-leave")
    seen: list[dict[str, Any]] = []
    url = model_server.mount(listener(seen))
    agent = await scripted_agent(gql, workspace.admin, model=openai_model(url), tools=[])
    async with make_worker(http_allow_private_networks=False):
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "FAILED", run
    assert "model provider failed" in run["error"]
    assert (
        "non-public address 127.0.0.1" in run["error"] and "private networks are not allowed" in run["error"]
    )
    assert seen == []  # the listener received nothing: no key, no request


async def test_a_provider_error_shows_the_status_but_never_the_body(
    gql, workspace, make_worker, model_server, monkeypatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    seen: list[dict[str, Any]] = []
    body = {"error": {"message": SECRET_BODY, "type": SECRET_BODY}, "detail": SECRET_BODY}
    url = model_server.mount(listener(seen, status=500, body=body))
    agent = await scripted_agent(gql, workspace.admin, model=openai_model(url), tools=[])
    async with make_worker(provider_max_retries=0):
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "FAILED", run
    assert "HTTP 500 Internal Server Error" in run["error"]
    assert "hunter2" not in run["error"] and "db_password" not in run["error"]
    assert len(seen) == 1


# -- scripted templates -------------------------------------------------------------------

CPU_LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("{{ 'a'|center(20000000) }}", "center would be longer than 1048576"),
        ("{{ '%20000000s'|format(1) }}", "format width 20000000"),
        ("{{ '{:>20000000}'.format(1) }}", "format width 20000000"),
        (
            "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "namespace value would be longer than 1048576",
        ),
        ("{{ ((2**1000)**1000)**10 }}", "integer above 64000 bits"),
        (CPU_LOOP, "longer than the template budget of 200 ms"),
    ],
)
async def test_template_bombs_fail_the_run_with_a_clear_error(
    gql, workspace, make_worker, template: str, fragment: str
) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": template}], tools=[])
    async with make_worker():
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "FAILED", run
    assert run["error"].startswith("model provider failed: scripted step 0: final")
    assert fragment in run["error"]
    # In about the budget (200 ms of CPU, at most 2 s of wall-clock time, plus starting a
    # render process on a busy machine); unbounded, the loop would run for hours and the
    # others would take gigabytes first.
    assert seconds(run) < 10, run


async def test_a_slow_template_does_not_hold_up_another_workspaces_run(
    gql, make_workspace, make_worker
) -> None:
    """With a long budget (1.5 s of CPU) so the overlap is wide: the other run still
    finishes fast, while the slow one burns."""
    slow_ws, quick_ws = await make_workspace(), await make_workspace()
    slow_agent = await scripted_agent(gql, slow_ws.admin, steps=[{"final": CPU_LOOP}], tools=[])
    # A loop too, so this run's template also goes to a render process (not in-process).
    quick_steps = [{"final": "{% for t in input.tags %}{{ t }}{% endfor %}"}]
    quick_agent = await scripted_agent(gql, quick_ws.admin, steps=quick_steps, tools=[])
    async with make_worker(template_timeout_ms=1_500):
        # Two runs at once, so both render processes are started before the timing below.
        warm = [await start_run(gql, quick_ws.operator, quick_agent, {"tags": ["w"]}) for _ in range(2)]
        for run_id in warm:
            await wait_run(gql, quick_ws.viewer, run_id)
        slow = await start_run(gql, slow_ws.operator, slow_agent)
        await wait_run(gql, slow_ws.viewer, slow, "RUNNING")
        await asyncio.sleep(0.2)  # the slow template is burning now
        quick = await wait_run(
            gql, quick_ws.viewer, await start_run(gql, quick_ws.operator, quick_agent, {"tags": ["a", "b"]})
        )
        slow_run = await wait_run(gql, slow_ws.viewer, slow, timeout_s=60)
    assert quick["status"] == "SUCCEEDED" and quick["result"] == "ab", quick
    assert slow_run["status"] == "FAILED" and "template budget of 1500 ms" in slow_run["error"], slow_run
    # Not stuck behind the slow template: done while it was still burning.
    assert datetime.fromisoformat(quick["finishedAt"]) < datetime.fromisoformat(slow_run["finishedAt"])
    assert seconds(quick) < 3, quick
