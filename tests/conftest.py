"""Shared fixtures. Everything with I/O runs against the real thing: the database named by
``ENVERIF_TEST_DB`` (``sqlite`` or ``mysql``), a real Redis, real arq workers.

Each test session gets its own database (a temp SQLite file, or a fresh MariaDB schema) and
its own Redis key prefix, so the SQLite and MariaDB legs can share one Redis server. Tests
create their own workspaces instead of cleaning up after each other.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx
import hypothesis
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db import migrate
from app.db.session import create_engine, create_sessionmaker
from app.domain.agents import Role
from app.services import auth
from app.services.runtime import Runtime, open_runtime
from app.settings import Settings
from tests.support.model_server import ModelServer, bindings
from tests.support.model_server import model_server as serve_model_server

# Real worker processes (the ``processes`` fixture) for fault and engine tests, and the
# ``enverif`` command in its own process (the ``enverif`` fixture).
pytest_plugins = ["tests.support.cli", "tests.support.workers"]

# Pure properties are fast; a wall-clock deadline would only make them flaky on a busy machine.
hypothesis.settings.register_profile("enverif", deadline=None)
hypothesis.settings.load_profile("enverif")

DB_KIND = os.environ.get("ENVERIF_TEST_DB", "sqlite")
MYSQL_SERVER_URL = os.environ.get("ENVERIF_TEST_MYSQL_URL", "mysql+asyncmy://root@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("ENVERIF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def pytest_report_header(config: pytest.Config) -> str:
    return f"enverif: database={DB_KIND} redis={REDIS_URL}"


async def _create_mysql_database(name: str) -> str:
    server = create_engine(MYSQL_SERVER_URL)
    async with server.begin() as conn:
        await conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
    await server.dispose()
    return make_url(MYSQL_SERVER_URL).set(database=name).render_as_string(hide_password=False)


async def _drop_mysql_database(name: str) -> None:
    server = create_engine(MYSQL_SERVER_URL)
    async with server.begin() as conn:
        await conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    await server.dispose()


async def _migrate(url: str) -> None:
    engine = create_engine(url)
    await migrate.upgrade(engine)
    await engine.dispose()


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if DB_KIND == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('db') / 'enverif.db'}"
        asyncio.run(_migrate(url))
        yield url
    elif DB_KIND == "mysql":
        name = f"enverif_t_{uuid.uuid4().hex[:12]}"
        url = asyncio.run(_create_mysql_database(name))
        asyncio.run(_migrate(url))
        yield url
        asyncio.run(_drop_mysql_database(name))
    else:
        raise RuntimeError(f"ENVERIF_TEST_DB must be sqlite or mysql, not {DB_KIND!r}")


@pytest.fixture(scope="session")
def redis_prefix() -> str:
    return f"enverif-test-{uuid.uuid4().hex[:10]}"


# The key variables the session's deployment binds to its model server (ENVERIF_PROVIDER_KEYS):
# a key may go there, under its /bound prefix, and nowhere else.
TEST_KEY_ENVS = ("OPENAI_API_KEY", "TEST_OPENAI_KEY_FOR_ENVERIF", "TEST_ANTHROPIC_KEY_FOR_ENVERIF")


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServer]:
    """A loopback stand-in for model vendors (``tests/support/model_server.py``)."""
    with serve_model_server() as server:
        yield server


@pytest.fixture(scope="session")
def settings(
    database_url: str, redis_prefix: str, tmp_path_factory: pytest.TempPathFactory, model_server: ModelServer
) -> Settings:
    return Settings(
        home=tmp_path_factory.mktemp("home"),
        database_url=database_url,
        redis_url=REDIS_URL,
        redis_prefix=redis_prefix,
        http_allow_private_networks=True,
        # Where the deployment lets its API keys go: the session's model server, nowhere else.
        provider_keys=bindings(model_server, *TEST_KEY_ENVS),
        lease_s=5.0,
        sweep_interval_s=1,
        # A test that ends with a run in flight waits at most this for its step to end.
        worker_stop_grace_s=3.0,
    )


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(settings.effective_database_url)
    yield eng
    await eng.dispose()


@pytest.fixture
async def runtime(settings: Settings) -> AsyncIterator[Runtime]:
    """A process runtime (database engines, the arq pool) on the test's database and Redis."""
    rt = await open_runtime(settings)
    yield rt
    await rt.close()


@pytest.fixture
def sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return create_sessionmaker(engine)


@dataclass
class WorkspaceFixture:
    id: int
    name: str
    admin: str
    operator: str
    viewer: str

    def token(self, role: str) -> str:
        return str(getattr(self, role))


@pytest.fixture
def make_workspace(sessionmaker: async_sessionmaker[AsyncSession]):  # type: ignore[no-untyped-def]
    async def _make(name: str | None = None) -> WorkspaceFixture:
        name = name or f"ws-{uuid.uuid4().hex[:10]}"
        async with sessionmaker() as session:
            workspace, admin = await auth.create_workspace(session, name=name)
        async with sessionmaker() as session:
            operator = await auth.create_token(session, workspace_name=name, role=Role.OPERATOR)
        async with sessionmaker() as session:
            viewer = await auth.create_token(session, workspace_name=name, role=Role.VIEWER)
        return WorkspaceFixture(id=workspace.id, name=name, admin=admin, operator=operator, viewer=viewer)

    return _make


@pytest.fixture
async def workspace(make_workspace) -> WorkspaceFixture:  # type: ignore[no-untyped-def]
    return await make_workspace()


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[Any]:
    """The real ASGI app with its lifespan (engine, Redis, event hub) running."""
    from app.main import create_app

    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://enverif.test") as c:
        yield c


class GraphQLClient:
    """Posts GraphQL over HTTP exactly as a frontend would."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def raw(
        self, query: str, variables: dict[str, Any] | None = None, *, token: str | None
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = await self.http.post(
            "/graphql", json={"query": query, "variables": variables or {}}, headers=headers
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def ok(
        self, query: str, variables: dict[str, Any] | None = None, *, token: str | None
    ) -> dict[str, Any]:
        body = await self.raw(query, variables, token=token)
        assert not body.get("errors"), body["errors"]
        data: dict[str, Any] = body["data"]
        return data

    async def error(
        self, query: str, variables: dict[str, Any] | None = None, *, token: str | None
    ) -> dict[str, Any]:
        """Returns the first error; asserts there is one."""
        body = await self.raw(query, variables, token=token)
        assert body.get("errors"), f"expected an error, got {body}"
        err: dict[str, Any] = body["errors"][0]
        return err


@pytest.fixture
def gql(client: httpx.AsyncClient) -> GraphQLClient:
    return GraphQLClient(client)


@pytest.fixture
async def worker(settings: Settings) -> AsyncIterator[Any]:
    """A real arq worker consuming this session's queue, in the test's event loop."""
    from workers.main import build_worker

    w = build_worker(settings, handle_signals=False)
    task = asyncio.create_task(w.main())
    yield w
    await stop_worker(w, task)


async def stop_worker(w: Any, task: asyncio.Task[None]) -> None:
    """Stop an in-process worker as SIGTERM stops a worker process (``workers.main.stop_worker``:
    its jobs finish their step or hand their run back), then close it."""
    from workers.main import stop_worker as stop

    await stop(w, task)
    await w.close()


@pytest.fixture
def stub_resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str] | OSError]:
    """Answers for chosen names (under ``.localhost``) instead of DNS; other names resolve
    as usual (the tests only use loopback otherwise). As a safety net, a TCP connection to
    anything but loopback fails the test instead of leaving the machine, so a broken guard
    shows up as a failure and not as traffic."""
    answers: dict[str, list[str] | OSError] = {}
    real_getaddrinfo = asyncio.BaseEventLoop.getaddrinfo
    real_connect = httpcore.AnyIOBackend.connect_tcp

    async def getaddrinfo(
        self: asyncio.BaseEventLoop, host: Any, port: Any, *args: Any, **kwargs: Any
    ) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in answers:
            return await real_getaddrinfo(self, host, port, *args, **kwargs)
        answer = answers[name]
        if isinstance(answer, OSError):
            raise answer
        return [_addrinfo(address, int(port or 0)) for address in answer]

    async def connect_tcp(
        self: httpcore.AnyIOBackend, host: str, port: int, *args: Any, **kwargs: Any
    ) -> Any:
        assert ipaddress.ip_address(host).is_loopback, f"a test tried to connect to {host}"
        return await real_connect(self, host, port, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(httpcore.AnyIOBackend, "connect_tcp", connect_tcp)
    return answers


def _addrinfo(address: str, port: int) -> tuple[Any, ...]:
    if ":" in address:
        return (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
