"""API tokens through GraphQL over HTTP: create (secret shown once), list, revoke, names,
roles, workspaces, and revoked or expired tokens refused on the very next request."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.clock import utcnow
from app.db import orm
from app.services import auth
from tests.conftest import WorkspaceFixture
from tests.support.graphql import pk, unique

TOKEN_FIELDS = "id name role createdAt expiresAt lastUsedAt revokedAt"
CREATE = f"""
mutation($input: CreateApiTokenInput!) {{
  createApiToken(input: $input) {{ token apiToken {{ {TOKEN_FIELDS} }} }}
}}
"""
REVOKE = f"mutation($id: ID!) {{ revokeApiToken(id: $id) {{ {TOKEN_FIELDS} }} }}"
LIST = f"""
query($first: Int, $after: String) {{
  apiTokens(first: $first, after: $after) {{
    edges {{ cursor node {{ {TOKEN_FIELDS} }} }}
    pageInfo {{ hasNextPage endCursor }}
  }}
}}
"""
WHO = "{ viewer { role workspace { name } } }"


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


async def create(gql: Any, admin: str, **fields: Any) -> dict[str, Any]:
    token_input = {"role": "viewer", "name": unique("tok"), **fields}
    data = await gql.ok(CREATE, {"input": token_input}, token=admin)
    created: dict[str, Any] = data["createApiToken"]
    return created


async def test_create_shows_the_secret_once_and_the_token_works(
    gql: Any, workspace: WorkspaceFixture
) -> None:
    expires = utcnow() + timedelta(days=30)
    created = await create(gql, workspace.admin, role="operator", name="deploy bot", expiresAt=_iso(expires))
    secret, token = created["token"], created["apiToken"]
    assert secret.startswith(auth.TOKEN_PREFIX)
    assert token["name"] == "deploy bot" and token["role"] == "operator"
    assert token["expiresAt"] is not None
    assert abs(datetime.fromisoformat(token["expiresAt"]) - expires) < timedelta(seconds=1)
    assert token["revokedAt"] is None and token["lastUsedAt"] is None

    assert (await gql.ok(WHO, token=secret))["viewer"] == {
        "role": "operator",
        "workspace": {"name": workspace.name},
    }

    # Listed, but the secret is nowhere to be read again.
    listed = await gql.ok(LIST, token=workspace.admin)
    nodes = {e["node"]["id"]: e["node"] for e in listed["apiTokens"]["edges"]}
    assert nodes[token["id"]]["name"] == "deploy bot"
    assert secret not in str(listed)
    # The fixture's tokens were named for them (they were created without a name).
    assert len(nodes) == 4 and all(n["name"] for n in nodes.values())
    node = await gql.ok(
        "query($id: ID!) { node(id: $id) { id ... on ApiToken { name } } }",
        {"id": token["id"]},
        token=workspace.admin,
    )
    assert node["node"] == {"id": token["id"], "name": "deploy bot"}


async def test_list_pages_newest_first(gql: Any, make_workspace: Any) -> None:
    ws = await make_workspace()
    names = [unique("p") for _ in range(3)]
    for name in names:
        await create(gql, ws.admin, name=name)
    first = await gql.ok(LIST, {"first": 2}, token=ws.admin)
    page = first["apiTokens"]
    assert [e["node"]["name"] for e in page["edges"]] == names[::-1][:2]
    assert page["pageInfo"]["hasNextPage"] is True
    rest = await gql.ok(LIST, {"first": 10, "after": page["pageInfo"]["endCursor"]}, token=ws.admin)
    # The third named one, then the fixture's three (viewer, operator, initial admin).
    rest_names = [e["node"]["name"] for e in rest["apiTokens"]["edges"]]
    assert len(rest_names) == 4
    assert rest_names[0] == names[0] and rest_names[-1] == auth.INITIAL_TOKEN_NAME


async def test_names_are_unique_in_a_workspace_whatever_the_case(
    gql: Any, workspace: WorkspaceFixture, make_workspace: Any
) -> None:
    name = unique("ci")
    await create(gql, workspace.admin, name=name)
    for taken in (name, name.upper(), f"  {name}  "):
        err = await gql.error(CREATE, {"input": {"role": "viewer", "name": taken}}, token=workspace.admin)
        assert err["extensions"]["code"] == "CONFLICT", err
        assert err["extensions"]["field"] == "name"
    # Another workspace may use the same name.
    other = await make_workspace()
    await create(gql, other.admin, name=name)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"expiresAt": "2020-01-01T00:00:00Z"}, "expiresAt"),
        ({"role": "superuser"}, "role"),
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
    ],
)
async def test_invalid_input_is_refused(
    gql: Any, workspace: WorkspaceFixture, fields: dict[str, Any], field: str
) -> None:
    token_input = {"role": "viewer", "name": unique("bad"), **fields}
    err = await gql.error(CREATE, {"input": token_input}, token=workspace.admin)
    assert err["extensions"]["code"] == "VALIDATION_FAILED", err
    assert err["extensions"]["field"] == field


@pytest.mark.parametrize("role", ["viewer", "operator"])
async def test_only_admins_manage_tokens(gql: Any, workspace: WorkspaceFixture, role: str) -> None:
    target = (await create(gql, workspace.admin))["apiToken"]
    caller = workspace.token(role)
    for query, variables in [
        (LIST, {}),
        (CREATE, {"input": {"role": "viewer", "name": unique("x")}}),
        (REVOKE, {"id": target["id"]}),
    ]:
        err = await gql.error(query, variables, token=caller)
        assert err["extensions"]["code"] == "FORBIDDEN", (query, err)
    # Nor can it escalate by minting an admin token; and the target was not revoked.
    listed = await gql.ok(LIST, token=workspace.admin)
    assert {e["node"]["id"]: e["node"]["revokedAt"] for e in listed["apiTokens"]["edges"]}[
        target["id"]
    ] is None


async def test_another_workspaces_token_is_not_found(
    gql: Any, workspace: WorkspaceFixture, make_workspace: Any
) -> None:
    other = await make_workspace()
    theirs = await create(gql, other.admin)
    err = await gql.error(REVOKE, {"id": theirs["apiToken"]["id"]}, token=workspace.admin)
    assert err["extensions"]["code"] == "NOT_FOUND"
    node = await gql.ok(
        "query($id: ID!) { node(id: $id) { id } }", {"id": theirs["apiToken"]["id"]}, token=workspace.admin
    )
    assert node["node"] is None
    assert (await gql.ok(WHO, token=theirs["token"]))["viewer"]["role"] == "viewer"  # untouched


async def test_a_revoked_token_is_refused_on_the_next_request(gql: Any, workspace: WorkspaceFixture) -> None:
    created = await create(gql, workspace.admin, role="operator")
    assert (await gql.ok(WHO, token=created["token"]))["viewer"]["role"] == "operator"

    revoked = (await gql.ok(REVOKE, {"id": created["apiToken"]["id"]}, token=workspace.admin))[
        "revokeApiToken"
    ]
    assert revoked["revokedAt"] is not None

    err = await gql.error(WHO, token=created["token"])
    assert err["extensions"]["code"] == "UNAUTHENTICATED"
    assert "revoked" in err["message"]
    # Revoking again is harmless and keeps the first revocation time.
    again = (await gql.ok(REVOKE, {"id": created["apiToken"]["id"]}, token=workspace.admin))["revokeApiToken"]
    assert again["revokedAt"] == revoked["revokedAt"]


async def test_an_admin_can_revoke_its_own_token(gql: Any, make_workspace: Any) -> None:
    ws = await make_workspace()
    me = (await gql.ok(LIST, token=ws.admin))["apiTokens"]["edges"]
    mine = next(e["node"] for e in me if e["node"]["name"] == auth.INITIAL_TOKEN_NAME)
    await gql.ok(REVOKE, {"id": mine["id"]}, token=ws.admin)
    err = await gql.error(LIST, token=ws.admin)
    assert err["extensions"]["code"] == "UNAUTHENTICATED"


async def test_an_expired_token_is_refused(gql: Any, workspace: WorkspaceFixture) -> None:
    created = await create(gql, workspace.admin, expiresAt=_iso(utcnow() + timedelta(seconds=1.5)))
    assert (await gql.ok(WHO, token=created["token"]))["viewer"]["role"] == "viewer"
    await asyncio.sleep(2.0)
    err = await gql.error(WHO, token=created["token"])
    assert err["extensions"]["code"] == "UNAUTHENTICATED"
    assert "expired" in err["message"]


async def test_last_used_at_is_written_at_most_once_a_minute(
    gql: Any,
    workspace: WorkspaceFixture,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = await create(gql, workspace.admin)
    token_pk = pk(created["apiToken"]["id"])

    async def last_used() -> datetime | None:
        async with sessionmaker() as session:
            row = await session.get(orm.ApiToken, token_pk)
            assert row is not None
            return row.last_used_at

    async def last_used_after(previous: datetime | None) -> datetime:
        # Recorded in the background, so that no read waits for a write: poll briefly.
        for _ in range(100):
            value = await last_used()
            if value is not None and value != previous:
                return value
            await asyncio.sleep(0.05)
        pytest.fail(f"lastUsedAt stayed {previous}")

    assert await last_used() is None
    await gql.ok(WHO, token=created["token"])
    first = await last_used_after(None)
    await gql.ok(WHO, token=created["token"])
    await asyncio.sleep(0.5)
    assert await last_used() == first  # within the minute: no write

    # A minute later (the API process's clock moved on rather than waited for; the token
    # stays in its token cache), it is written again.
    later = utcnow() + timedelta(seconds=61)
    monkeypatch.setattr(auth, "utcnow", lambda: later)
    await gql.ok(WHO, token=created["token"])
    assert await last_used_after(first) == later


@pytest.mark.parametrize(
    ("given", "access"),
    [
        ({"access": "OPERATOR"}, "OPERATOR"),
        ({"role": "viewer"}, "VIEWER"),
        ({"access": "ADMIN", "role": "Admin"}, "ADMIN"),
    ],
)
async def test_the_role_is_the_role_enum_beside_the_old_string(
    gql: Any, workspace: Any, given: dict[str, str], access: str
) -> None:
    # issue 27 item 6: `access: Role` beside the deprecated `role: String`, in answers and input.
    mutation = """mutation($input: CreateApiTokenInput!) {
      createApiToken(input: $input) { token apiToken { role access } } }"""
    created = await gql.ok(mutation, {"input": {"name": unique("t"), **given}}, token=workspace.admin)
    assert created["createApiToken"]["apiToken"] == {"role": access.lower(), "access": access}
    token = created["createApiToken"]["token"]
    assert await gql.ok("{ viewer { role access } }", token=token) == {
        "viewer": {"role": access.lower(), "access": access}
    }


@pytest.mark.parametrize("given", [{}, {"access": "VIEWER", "role": "admin"}])
async def test_a_token_needs_one_role(gql: Any, workspace: Any, given: dict[str, str]) -> None:
    mutation = "mutation($input: CreateApiTokenInput!) { createApiToken(input: $input) { token } }"
    error = await gql.error(mutation, {"input": {"name": unique("t"), **given}}, token=workspace.admin)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "access"}
