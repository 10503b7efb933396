"""The API processes' token cache (app.services.token_cache): a revocation through one
process is refused by every other at once, a cached token still stops at its expiry, and a
process that loses its revocation subscription stops trusting its cache.

The cross-process tests run two real ``enverif serve`` processes on the test's database and
Redis prefix; each has answered the token (so holds it in its cache) before it is revoked.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from app.clock import utcnow
from app.events.subscriber import subscriber_client_name
from app.services import auth
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.support.cli import ENVERIF, spawn_enverif
from tests.support.graphql import unique
from tests.support.workers import worker_env

WHO = "{ viewer { role } }"
CREATE = """
mutation($input: CreateApiTokenInput!) { createApiToken(input: $input) { token apiToken { id } } }
"""
REVOKE = "mutation($id: ID!) { revokeApiToken(id: $id) { revokedAt } }"


@contextmanager
def api_process(settings: Settings, log_path: Path) -> Iterator[str]:
    """A real ``enverif serve`` on a free port; yields its base URL."""
    with open(log_path, "wb") as out:
        proc = spawn_enverif(
            ["serve", "--port", "0"],
            env=worker_env(settings),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"Enverif API at (http://\S+)/graphql", log_path.read_text())):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@asynccontextmanager
async def two_api_processes(settings: Settings, tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    with (
        api_process(settings, tmp_path / "a.log") as url_a,
        api_process(settings, tmp_path / "b.log") as url_b,
    ):
        async with httpx.AsyncClient(base_url=url_a) as a, httpx.AsyncClient(base_url=url_b) as b:
            yield a, b


async def post(client: httpx.AsyncClient, query: str, token: str, **variables: Any) -> dict[str, Any]:
    response = await client.post(
        "/graphql",
        json={"query": query, "variables": variables},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def refused(body: dict[str, Any]) -> bool:
    return [e["extensions"]["code"] for e in body.get("errors") or []] == ["UNAUTHENTICATED"]


async def new_token(client: httpx.AsyncClient, admin: str, **fields: Any) -> tuple[str, str]:
    body = await post(client, CREATE, admin, input={"role": "viewer", "name": unique("tok"), **fields})
    created = body["data"]["createApiToken"]
    return created["token"], created["apiToken"]["id"]


async def test_revoked_through_one_process_is_refused_by_another_at_once(
    settings: Settings, workspace: WorkspaceFixture, tmp_path: Path
) -> None:
    async with two_api_processes(settings, tmp_path) as (a, b):
        token, token_id = await new_token(a, workspace.admin)
        for client in (a, b, a, b):  # both processes now hold it in their caches
            assert (await post(client, WHO, token))["data"] == {"viewer": {"role": "viewer"}}

        revoked = await post(a, REVOKE, workspace.admin, id=token_id)
        assert revoked["data"]["revokeApiToken"]["revokedAt"] is not None
        assert refused(await post(b, WHO, token))
        assert refused(await post(a, WHO, token))


async def test_revoked_with_the_command_line_is_refused_by_running_processes_at_once(
    settings: Settings, workspace: WorkspaceFixture, tmp_path: Path
) -> None:
    async with two_api_processes(settings, tmp_path) as (a, b):
        token, token_id = await new_token(a, workspace.admin)
        for client in (a, b):
            assert (await post(client, WHO, token))["data"] == {"viewer": {"role": "viewer"}}
        proc = await asyncio.create_subprocess_exec(
            *ENVERIF, "token", "revoke", "--workspace", workspace.name, "--id", token_id,
            env=worker_env(settings), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 0, (out, err)
        assert refused(await post(b, WHO, token))
        assert refused(await post(a, WHO, token))


async def test_a_cached_token_is_refused_at_its_expiry(
    gql: Any, app: Any, workspace: WorkspaceFixture
) -> None:
    expires_at = utcnow() + timedelta(seconds=1.5)
    data = await gql.ok(
        CREATE,
        {"input": {"role": "viewer", "name": unique("tok"), "expiresAt": expires_at.isoformat()}},
        token=workspace.admin,
    )
    token = data["createApiToken"]["token"]
    assert (await gql.ok(WHO, token=token))["viewer"]["role"] == "viewer"
    cache = app.state.runtime.token_cache
    assert cache.get(auth.hash_token(token)) is not None  # served from the cache from now on
    await asyncio.sleep((expires_at - utcnow()).total_seconds() + 0.05)
    err = await gql.error(WHO, token=token)
    assert err["extensions"]["code"] == "UNAUTHENTICATED" and "expired" in err["message"]


async def test_without_its_revocation_subscription_a_process_asks_the_database(
    gql: Any, app: Any, workspace: WorkspaceFixture, settings: Settings
) -> None:
    cache = app.state.runtime.token_cache
    await gql.ok(WHO, token=workspace.viewer)
    assert cache.usable and cache.get(auth.hash_token(workspace.viewer)) is not None

    admin = aioredis.from_url(settings.effective_redis_url)
    try:
        assert await _kill_by_name(admin, subscriber_client_name(settings.redis_prefix)) >= 1
        for _ in range(100):  # the reader notices the lost connection
            if not cache.usable:
                break
            await asyncio.sleep(0.01)
        # Bypassed and emptied: whatever was revoked meanwhile cannot be served from memory.
        assert not cache.usable and len(cache) == 0
        assert (await gql.ok(WHO, token=workspace.viewer))["viewer"]["role"] == "viewer"
        for _ in range(500):  # and it subscribes again
            if cache.usable:
                break
            await asyncio.sleep(0.01)
        assert cache.usable
    finally:
        await admin.aclose()


async def _kill_by_name(client: aioredis.Redis, name: str) -> int:
    killed = 0
    for entry in await client.client_list():
        if entry.get("name") == name:
            await client.client_kill_filter(_id=entry["id"])
            killed += 1
    return killed
