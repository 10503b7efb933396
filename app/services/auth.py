"""Workspaces and API tokens: issue, list, revoke, authenticate.

Tokens are 256-bit random strings shown once; only their sha256 is stored. A leaked database
therefore leaks no usable token, and lookup stays one indexed equality query.

A token is alive while it is neither revoked nor past its ``expires_at`` (the rules live in
``app.domain.tokens``). Every HTTP request looks the token up afresh, so revocation and
expiry bite on the next request in every process. Websockets authenticate once, so they
re-check by token id (``recheck``) on every new operation and on a timer
(``app.graphql.ws_auth``).
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, func, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.orm import ApiToken, Workspace
from app.domain.actors import SYSTEM, Actor, ActorKind
from app.domain.agents import Role
from app.domain.audit import diff as audit_diff
from app.domain.errors import Conflict, Forbidden, NotFound, Unauthenticated, ValidationFailed
from app.domain.tokens import (
    LAST_USED_RESOLUTION,
    TokenState,
    check_expiry,
    check_token_name,
    token_state,
    use_worth_recording,
)
from app.services import audit
from app.services.reads import Page, PageRequest, fetch_page
from app.services.runtime import Runtime
from app.services.token_cache import CachedToken, publish_revocation

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "evf_"
WORKSPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
INITIAL_TOKEN_NAME = "initial admin token"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: every read and write is scoped to ``workspace_id``."""

    workspace_id: int
    role: Role
    token_id: int
    # When the token stops working on its own; an open websocket closes then.
    expires_at: datetime | None = None
    # Who the change is recorded as: the token, unless the caller is the CLI (token_id 0).
    actor_kind: ActorKind = ActorKind.TOKEN
    actor_name: str | None = None

    @property
    def actor(self) -> Actor:
        if self.actor_kind is ActorKind.TOKEN:
            return Actor(ActorKind.TOKEN, self.token_id, self.actor_name)
        return Actor(self.actor_kind, None, self.actor_name)

    def require(self, needed: Role) -> None:
        if not self.role.allows(needed):
            raise Forbidden(f"this needs the {needed.value} role; the token has {self.role.value}")


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new token: ``secret`` is the only copy of the token in the clear, shown once."""

    secret: str
    row: ApiToken


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_role(value: str) -> Role:
    try:
        return Role(value.lower())
    except ValueError:
        raise ValidationFailed(
            f"unknown role {value!r}; use one of {', '.join(r.value for r in Role)}", field="role"
        ) from None


# -- workspaces and issuing tokens -------------------------------------------------------------


async def create_workspace(
    session: AsyncSession, *, name: str, actor: Actor = SYSTEM
) -> tuple[Workspace, str]:
    """Create a workspace and its first admin token; returns the token in the clear, once."""
    if not WORKSPACE_NAME.match(name):
        raise ValidationFailed(
            "workspace name must be 1-100 characters of letters, digits, '_', '.', '-'", field="name"
        )
    workspace = Workspace(name=name, created_at=utcnow())
    session.add(workspace)
    try:
        await session.flush()
    except IntegrityError:
        await session.rollback()
        raise Conflict(f"a workspace named {name!r} already exists", field="name") from None
    issued = await _issue(
        session, workspace_id=workspace.id, role=Role.ADMIN, name=INITIAL_TOKEN_NAME, expires_at=None,
        actor=actor,
    )  # fmt: skip
    await session.commit()
    return workspace, issued.secret


async def create_token(
    session: AsyncSession,
    *,
    workspace_name: str,
    role: Role,
    name: str | None = None,
    expires_at: datetime | None = None,
    actor: Actor = SYSTEM,
) -> str:
    """A new token for the named workspace (the command line); returns the secret, once."""
    issued = await issue_token(
        session, workspace_name=workspace_name, role=role, name=name, expires_at=expires_at, actor=actor
    )
    return issued.secret


async def issue_token(
    session: AsyncSession,
    *,
    workspace_name: str,
    role: Role,
    name: str | None = None,
    expires_at: datetime | None = None,
    actor: Actor = SYSTEM,
) -> IssuedToken:
    workspace = await _workspace_named(session, workspace_name)
    issued = await _issue(
        session, workspace_id=workspace.id, role=role, name=name, expires_at=expires_at, actor=actor
    )
    await session.commit()
    return issued


async def create_api_token(
    rt: Runtime, principal: Principal, *, role: Role, name: str, expires_at: datetime | None
) -> IssuedToken:
    """``createApiToken``: an admin mints a token for its own workspace."""
    principal.require(Role.ADMIN)
    async with rt.sessionmaker() as session, session.begin():
        return await _issue(
            session, workspace_id=principal.workspace_id, role=role, name=name, expires_at=expires_at,
            actor=principal.actor,
        )  # fmt: skip


async def _issue(
    session: AsyncSession,
    *,
    workspace_id: int,
    role: Role,
    name: str | None,
    expires_at: datetime | None,
    actor: Actor,
) -> IssuedToken:
    now = utcnow()
    expires_at = check_expiry(expires_at, now=now)
    if name is None:
        # Unnamed (older scripts, tests): a name is still needed to list and revoke it by.
        name = f"{role.value}-{secrets.token_hex(4)}"
    name = check_token_name(name)
    await _ensure_name_free(session, workspace_id=workspace_id, name=name)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        workspace_id=workspace_id,
        role=role.value,
        token_hash=hash_token(secret),
        prefix=secret[: len(TOKEN_PREFIX) + 4],
        name=name,
        created_at=now,
        expires_at=expires_at,
    )
    session.add(row)
    try:
        await session.flush()
    except IntegrityError:
        # Two creators passed the check at once; the unique index picked one.
        raise _name_taken(name) from None
    # The secret is never recorded, not even its prefix.
    shown = {
        "name": name,
        "role": role.value,
        "expires_at": None if expires_at is None else expires_at.isoformat(),
    }
    await audit.append(
        session, workspace_id=workspace_id, actor=actor, action="token.create", object_type="ApiToken",
        object_id=row.id, summary=f"created {role.value} token {name!r}", diff=audit_diff({}, shown), at=now,
    )  # fmt: skip
    return IssuedToken(secret=secret, row=row)


async def _ensure_name_free(session: AsyncSession, *, workspace_id: int, name: str) -> None:
    # Case-insensitive everywhere (MariaDB's collation is; SQLite is not), so "CI" and "ci"
    # never both exist: operators revoke by name.
    stmt = select(ApiToken.id).where(
        ApiToken.workspace_id == workspace_id, func.lower(ApiToken.name) == name.lower()
    )
    if await session.scalar(stmt) is not None:
        raise _name_taken(name)


def _name_taken(name: str) -> Conflict:
    return Conflict(f"a token named {name!r} already exists in this workspace", field="name")


async def _workspace_named(session: AsyncSession, name: str) -> Workspace:
    workspace = await session.scalar(select(Workspace).where(Workspace.name == name))
    if workspace is None:
        raise NotFound(f"no workspace named {name!r}", field="workspace")
    return workspace


# -- listing and revoking ------------------------------------------------------------------


def tokens_query(workspace_id: int) -> Select[ApiToken]:
    return select(ApiToken).where(ApiToken.workspace_id == workspace_id)


async def list_tokens(session: AsyncSession, *, workspace_id: int, page: PageRequest) -> Page[ApiToken]:
    return await fetch_page(session, tokens_query(workspace_id), id_column=ApiToken.id, page=page)


async def workspace_tokens(session: AsyncSession, *, workspace_name: str) -> list[ApiToken]:
    """Every token of the named workspace, oldest first (the command line)."""
    workspace = await _workspace_named(session, workspace_name)
    stmt = select(ApiToken).where(ApiToken.workspace_id == workspace.id).order_by(ApiToken.id)
    return list((await session.scalars(stmt)).all())


async def get_token(session: AsyncSession, principal: Principal, *, token_id: int) -> ApiToken:
    """An admin's view of one token of its workspace; another workspace's is NOT_FOUND."""
    principal.require(Role.ADMIN)
    row = await session.scalar(
        select(ApiToken).where(ApiToken.id == token_id, ApiToken.workspace_id == principal.workspace_id)
    )
    if row is None:
        raise NotFound("no API token with this id", field="id")
    return row


async def revoke_api_token(rt: Runtime, principal: Principal, *, token_id: int) -> ApiToken:
    """``revokeApiToken``. Revoking twice is fine and keeps the first ``revokedAt``."""
    principal.require(Role.ADMIN)
    async with rt.sessionmaker() as session, session.begin():
        row = await get_token(session, principal, token_id=token_id)
        await _revoke(session, row, principal.actor)
    await announce_revocation(rt, token_id)
    return row


async def announce_revocation(rt: Runtime, token_id: int) -> None:
    """After the commit: every API process's token cache forgets the token (this one first)."""
    if rt.token_cache is not None:
        rt.token_cache.drop(token_id)
    await publish_revocation(rt.redis, rt.settings, token_id)


async def revoke_token(
    session: AsyncSession,
    *,
    workspace_name: str,
    token_id: int | None = None,
    name: str | None = None,
    actor: Actor = SYSTEM,
) -> ApiToken:
    """Revoke by id or by name (the command line)."""
    if (token_id is None) == (name is None):
        raise ValidationFailed("name the token by its id or by its name, not both")
    workspace = await _workspace_named(session, workspace_name)
    stmt = select(ApiToken).where(ApiToken.workspace_id == workspace.id)
    if token_id is not None:
        stmt = stmt.where(ApiToken.id == token_id)
        missing = "no token with this id"
    else:
        assert name is not None
        stmt = stmt.where(func.lower(ApiToken.name) == name.strip().lower())
        missing = f"no token named {name!r}"
    row = await session.scalar(stmt)
    if row is None:
        raise NotFound(f"{missing} in workspace {workspace_name!r}", field="id" if token_id else "name")
    await _revoke(session, row, actor)
    await session.commit()
    return row


async def _revoke(session: AsyncSession, row: ApiToken, actor: Actor) -> None:
    if row.revoked_at is not None:
        return  # revoked already: nothing changes, nothing to record
    row.revoked_at = utcnow()
    await audit.append(
        session, workspace_id=row.workspace_id, actor=actor, action="token.revoke", object_type="ApiToken",
        object_id=row.id, summary=f"revoked token {row.name!r}", at=row.revoked_at,
    )  # fmt: skip


# -- authentication --------------------------------------------------------------------------


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


async def sign_in(
    rt: Runtime,
    *,
    token: str | None,
    sessions: Callable[[], AbstractAsyncContextManager[AsyncSession]] | None = None,
) -> Principal:
    """The principal of a live token, else UNAUTHENTICATED, plus a (throttled)
    ``lastUsedAt`` record: what every request does.

    A token seen in the last ``token_cache_ttl_s`` comes from the process's token cache
    (``app.services.token_cache``); otherwise it is read in a session from ``sessions``
    (the request's), by default a session of its own.
    """
    now = utcnow()
    if not token:
        raise Unauthenticated("missing bearer token")
    token_hash = hash_token(token)
    cache = rt.token_cache
    cached = cache.get(token_hash) if cache is not None else None
    if cached is not None:
        principal = _principal(cached, now)
        _maybe_record_use(rt, cached, now)
        return principal
    generation = cache.generation if cache is not None else 0
    async with (sessions or rt.read_sessionmaker)() as session:
        row = await session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash))
    if row is None:
        raise Unauthenticated("invalid token")
    principal = _principal(row, now)
    entry = _cached(row)
    _maybe_record_use(rt, entry, now)
    if cache is not None:
        cache.put(token_hash, entry, read_at_generation=generation)
    return principal


def _cached(row: ApiToken) -> CachedToken:
    return CachedToken(
        id=row.id,
        workspace_id=row.workspace_id,
        role=row.role,
        revoked_at=row.revoked_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        fetched_at=time.monotonic(),
    )


async def recheck(rt: Runtime, principal: Principal) -> Principal:
    """Is the token behind a long-lived connection still alive? UNAUTHENTICATED if not."""
    now = utcnow()
    async with rt.read_sessionmaker() as session:
        row = await session.scalar(select(ApiToken).where(ApiToken.id == principal.token_id))
        if row is None:  # its workspace was deleted
            raise Unauthenticated("invalid token")
        fresh = _principal(row, now)
    _maybe_record_use(rt, row, now)
    return fresh


def _principal(row: ApiToken | CachedToken, now: datetime) -> Principal:
    match token_state(revoked_at=row.revoked_at, expires_at=row.expires_at, now=now):
        case TokenState.REVOKED:
            raise Unauthenticated("this token has been revoked")
        case TokenState.EXPIRED:
            raise Unauthenticated("this token has expired")
    return Principal(
        workspace_id=row.workspace_id, role=Role(row.role), token_id=row.id, expires_at=row.expires_at
    )


def _maybe_record_use(rt: Runtime, row: ApiToken | CachedToken, now: datetime) -> None:
    # In the background: a read must never wait for a write (on SQLite, for the write lock).
    if use_worth_recording(row.last_used_at, now):
        if isinstance(row, CachedToken):
            row.last_used_at = now  # a cached token: this process records it once a minute
        rt.spawn(_record_use(rt, token_id=row.id, now=now), name="enverif-token-used")


async def _record_use(rt: Runtime, *, token_id: int, now: datetime) -> None:
    # Conditional, so API processes racing to record the same minute write once between them.
    # Best effort: lastUsedAt is a hint for operators, never a reason to refuse a request.
    stale = now - LAST_USED_RESOLUTION
    try:
        async with rt.sessionmaker() as session, session.begin():
            await session.execute(
                update(ApiToken)
                .where(
                    ApiToken.id == token_id,
                    or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at <= stale),
                )
                .values(last_used_at=now)
            )
    except SQLAlchemyError:
        logger.warning("could not record the use of API token %s", token_id, exc_info=True)
