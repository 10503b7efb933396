"""The ``enverif`` command as an operator runs it: the installed console script, a real
process, the session's database (either leg) and the test Redis."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.orm import ApiToken, Workspace
from app.domain.agents import Role
from app.domain.errors import Unauthenticated
from app.graphql.ids import parse_global_id
from app.services import auth
from app.services.runtime import Runtime
from tests.conftest import REDIS_URL
from tests.support.cli import Enverif, assert_one_line_error, cli_env, in_thread, spawn_enverif
from tests.support.cli import enverif as enverif

# The old name, for tests that import it from here; the helpers live in tests/support/cli.py.
_env = cli_env


def _name() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


async def test_workspace_create_json_prints_a_working_admin_token(
    enverif: Enverif, sessionmaker: async_sessionmaker[AsyncSession], runtime: Runtime
) -> None:
    name = _name()
    proc = await in_thread(enverif, "workspace", "create", name, "--json")
    assert proc.returncode == 0, proc.stderr

    out = json.loads(proc.stdout)  # exactly one JSON document on stdout
    assert set(out) == {"workspace_id", "token"}
    async with sessionmaker() as session:
        workspace = await session.scalar(select(Workspace).where(Workspace.name == name))
        assert workspace is not None
        assert parse_global_id(out["workspace_id"]) == ("Workspace", workspace.id)
    principal = await auth.sign_in(runtime, token=out["token"])
    assert principal.workspace_id == workspace.id
    assert principal.role is Role.ADMIN


async def test_tokens_are_stored_hashed_never_in_the_clear(
    enverif: Enverif, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    name = _name()
    token = json.loads((await in_thread(enverif, "workspace", "create", name, "--json")).stdout)["token"]
    async with sessionmaker() as session:
        rows = (await session.scalars(select(ApiToken).join(Workspace).where(Workspace.name == name))).all()
    assert len(rows) == 1
    stored = [str(getattr(rows[0], c.key)) for c in ApiToken.__table__.columns]
    assert not any(token in value for value in stored)
    assert rows[0].token_hash == auth.hash_token(token)


def test_workspace_create_prints_the_token_for_humans(enverif: Enverif) -> None:
    name = _name()
    proc = enverif("workspace", "create", name)
    assert proc.returncode == 0, proc.stderr
    assert name in proc.stdout
    assert any(line.startswith(auth.TOKEN_PREFIX) for line in proc.stdout.splitlines()), proc.stdout


def test_duplicate_workspace_is_a_one_line_error(enverif: Enverif) -> None:
    name = _name()
    assert enverif("workspace", "create", name, "--json").returncode == 0
    assert_one_line_error(enverif("workspace", "create", name, "--json"), name, "already exists")


def test_invalid_workspace_name_is_a_one_line_error(enverif: Enverif) -> None:
    assert_one_line_error(enverif("workspace", "create", "no spaces allowed"), "workspace name")


async def test_token_create_for_a_role(enverif: Enverif, runtime: Runtime) -> None:
    name = _name()
    assert (await in_thread(enverif, "workspace", "create", name)).returncode == 0
    proc = await in_thread(enverif, "token", "create", "--workspace", name, "--role", "operator", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["workspace"] == name and out["role"] == "operator"
    principal = await auth.sign_in(runtime, token=out["token"])
    assert principal.role is Role.OPERATOR
    assert principal.role.allows(Role.VIEWER) and not principal.role.allows(Role.ADMIN)


def test_token_for_unknown_workspace_is_a_one_line_error(enverif: Enverif) -> None:
    missing = _name()
    proc = enverif("token", "create", "--workspace", missing, "--role", "viewer")
    assert_one_line_error(proc, missing)


def test_unknown_role_is_a_one_line_error(enverif: Enverif) -> None:
    name = _name()
    assert enverif("workspace", "create", name).returncode == 0
    proc = enverif("token", "create", "--workspace", name, "--role", "superuser")
    assert_one_line_error(proc, "superuser", "viewer", "operator", "admin")


def test_unreachable_database_is_a_one_line_error(enverif: Enverif) -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    url = "mysql+asyncmy://enverif:s3cret@127.0.0.1:1/enverif"
    proc = enverif("workspace", "create", _name(), ENVERIF_DATABASE_URL=url)
    assert_one_line_error(proc, "database", "127.0.0.1:1")
    assert "s3cret" not in proc.stderr  # the password is never echoed


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("ENVERIF_PORT", "eighty", "ENVERIF_PORT"),
        ("ENVERIF_DATABASE_URL", "postgresql://db/enverif", "ENVERIF_DATABASE_URL"),
        ("ENVERIF_MAX_DELEGATION_DEPTH", "-1", "ENVERIF_MAX_DELEGATION_DEPTH"),
    ],
)
def test_bad_setting_is_a_one_line_error(enverif: Enverif, variable: str, value: str, needle: str) -> None:
    assert_one_line_error(enverif("workspace", "create", _name(), **{variable: value}), needle)


def test_migrate_a_fresh_sqlite_database_then_use_it(enverif: Enverif, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    unmigrated = enverif("workspace", "create", "early", ENVERIF_DATABASE_URL=url)
    assert_one_line_error(unmigrated, "enverif migrate")

    proc = enverif("migrate", ENVERIF_DATABASE_URL=url)
    assert proc.returncode == 0, proc.stderr
    assert "revision" in proc.stdout
    assert enverif("workspace", "create", "early", ENVERIF_DATABASE_URL=url).returncode == 0

    down = enverif("migrate", "--downgrade", "base", ENVERIF_DATABASE_URL=url)
    assert down.returncode == 0, down.stderr
    assert_one_line_error(enverif("workspace", "create", "late", ENVERIF_DATABASE_URL=url), "enverif migrate")


def test_serve_answers_then_stops_cleanly_on_sigterm(database_url: str, tmp_path: Path) -> None:
    env = _env(
        tmp_path / "home",
        ENVERIF_DATABASE_URL=database_url,
        ENVERIF_REDIS_URL=REDIS_URL,
        ENVERIF_REDIS_PREFIX=f"cli-{uuid.uuid4().hex[:8]}",
    )
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as out:
        proc = spawn_enverif(
            ["serve", "--port", "0"],
            env=env,
            cwd=tmp_path,
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
        health = httpx.get(f"{found.group(1)}/healthz", timeout=5)
        # The API answers and reaches both services, but no worker runs on this prefix:
        # unhealthy, since nothing queued would ever run.
        assert health.status_code == 503, health.text
        body = health.json()
        assert {k: body[k] for k in ("status", "database", "redis", "workers")} == {
            "status": "degraded", "database": "ok", "redis": "ok", "workers": 0
        }  # fmt: skip
        # Not dev mode: the demo routes do not exist.
        assert httpx.get(f"{found.group(1)}/dev/page", timeout=5).status_code == 404

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log_path.read_text()


def test_serve_refuses_an_unmigrated_database(enverif: Enverif, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    assert_one_line_error(enverif("serve", "--port", "0", ENVERIF_DATABASE_URL=url), "enverif migrate")


def test_worker_burst_exits_when_the_queue_is_empty(enverif: Enverif) -> None:
    proc = enverif("worker", "--burst", ENVERIF_REDIS_PREFIX=f"cli-{uuid.uuid4().hex[:8]}")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_worker_names_an_unreachable_redis(enverif: Enverif) -> None:
    proc = enverif("worker", "--burst", ENVERIF_REDIS_URL="redis://127.0.0.1:1/0")
    assert_one_line_error(proc, "Redis", "127.0.0.1:1")


# -- token lifecycle: create, list, revoke ----------------------------------------------------


async def test_token_create_list_revoke(enverif: Enverif, runtime: Runtime) -> None:
    name = _name()
    admin = json.loads((await in_thread(enverif, "workspace", "create", name, "--json")).stdout)["token"]
    proc = (await in_thread(enverif, 
        "token", "create", "--workspace", name, "--role", "viewer", "--name", "ci-bot",
        "--expires-at", "2099-01-31T00:00:00Z", "--json",
    ))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    created = json.loads(proc.stdout)
    assert created["name"] == "ci-bot" and created["role"] == "viewer" and created["workspace"] == name
    assert created["expires_at"] == "2099-01-31T00:00:00Z" and created["state"] == "ACTIVE"
    assert parse_global_id(created["id"]) is not None
    secret = created["token"]

    # Names are unique in the workspace.
    again = await in_thread(
        enverif, "token", "create", "--workspace", name, "--role", "admin", "--name", "CI-BOT"
    )
    assert_one_line_error(again, "already exists")

    # Listing shows every token, never a secret (nor the start of one).
    listed = await in_thread(enverif, "token", "list", "--workspace", name, "--json")
    assert listed.returncode == 0, listed.stderr
    assert auth.TOKEN_PREFIX not in listed.stdout
    tokens = {t["name"]: t for t in json.loads(listed.stdout)["tokens"]}
    assert set(tokens) == {auth.INITIAL_TOKEN_NAME, "ci-bot"}
    assert tokens["ci-bot"]["id"] == created["id"] and tokens["ci-bot"]["revoked_at"] is None
    human = await in_thread(enverif, "token", "list", "--workspace", name)
    assert human.returncode == 0 and "ci-bot" in human.stdout and auth.TOKEN_PREFIX not in human.stdout

    # Revoke by name: the token stops working.
    proc = await in_thread(enverif, "token", "revoke", "--workspace", name, "--name", "ci-bot")
    assert proc.returncode == 0, proc.stderr
    assert "ci-bot" in proc.stdout
    with pytest.raises(Unauthenticated):
        await auth.sign_in(runtime, token=secret)

    # Revoke by id, as `token list` printed it.
    admin_id = tokens[auth.INITIAL_TOKEN_NAME]["id"]
    proc = await in_thread(enverif, "token", "revoke", "--workspace", name, "--id", admin_id, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "REVOKED"
    with pytest.raises(Unauthenticated):
        await auth.sign_in(runtime, token=admin)
    states = {
        t["name"]: t["state"]
        for t in json.loads(
            (await in_thread(enverif, "token", "list", "--workspace", name, "--json")).stdout
        )["tokens"]
    }
    assert states == {auth.INITIAL_TOKEN_NAME: "REVOKED", "ci-bot": "REVOKED"}


def test_revoking_an_unknown_token_is_a_one_line_error(enverif: Enverif) -> None:
    name, other = _name(), _name()
    assert enverif("workspace", "create", name).returncode == 0
    assert enverif("workspace", "create", other).returncode == 0
    theirs = json.loads(enverif("token", "list", "--workspace", other, "--json").stdout)["tokens"][0]["id"]

    assert_one_line_error(enverif("token", "revoke", "--workspace", name, "--name", "nope"), "nope", name)
    assert_one_line_error(enverif("token", "revoke", "--workspace", name, "--id", "garbage"), "garbage")
    # Another workspace's token id is unknown here, and stays alive.
    assert_one_line_error(enverif("token", "revoke", "--workspace", name, "--id", theirs), "no token")
    states = [
        t["state"]
        for t in json.loads(enverif("token", "list", "--workspace", other, "--json").stdout)["tokens"]
    ]
    assert states == ["ACTIVE"]
    # Neither --id nor --name: a usage error, no traceback.
    usage = enverif("token", "revoke", "--workspace", name)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr and "--id" in usage.stderr


@pytest.mark.parametrize(
    ("expires_at", "needle"),
    [("2001-01-01T00:00:00Z", "future"), ("2099-01-01T00:00:00", "timezone"), ("next tuesday", "ISO 8601")],
)
def test_bad_expiry_is_a_one_line_error(enverif: Enverif, expires_at: str, needle: str) -> None:
    name = _name()
    assert enverif("workspace", "create", name).returncode == 0
    proc = enverif("token", "create", "--workspace", name, "--role", "viewer", "--expires-at", expires_at)
    assert_one_line_error(proc, needle)
