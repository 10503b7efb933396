"""Workspaces and API tokens.

Tokens are 256-bit random strings shown once; only their sha256 is stored. A leaked database
therefore leaks no usable token, and lookup stays one indexed equality query.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.orm import ApiToken, Workspace
from app.domain.agents import Role
from app.domain.errors import Conflict, Forbidden, NotFound, Unauthenticated, ValidationFailed

TOKEN_PREFIX = "evf_"
WORKSPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: every read and write is scoped to ``workspace_id``."""

    workspace_id: int
    role: Role
    token_id: int

    def require(self, needed: Role) -> None:
        if not self.role.allows(needed):
            raise Forbidden(f"this needs the {needed.value} role; the token has {self.role.value}")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_role(value: str) -> Role:
    try:
        return Role(value.lower())
    except ValueError:
        raise ValidationFailed(
            f"unknown role {value!r}; use one of {', '.join(r.value for r in Role)}", field="role"
        ) from None


async def create_workspace(session: AsyncSession, *, name: str) -> tuple[Workspace, str]:
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
    token = await _issue(session, workspace_id=workspace.id, role=Role.ADMIN, name="initial admin token")
    await session.commit()
    return workspace, token


async def create_token(
    session: AsyncSession, *, workspace_name: str, role: Role, name: str | None = None
) -> str:
    workspace = await session.scalar(select(Workspace).where(Workspace.name == workspace_name))
    if workspace is None:
        raise NotFound(f"no workspace named {workspace_name!r}", field="workspace")
    token = await _issue(session, workspace_id=workspace.id, role=role, name=name)
    await session.commit()
    return token


async def _issue(session: AsyncSession, *, workspace_id: int, role: Role, name: str | None) -> str:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiToken(
            workspace_id=workspace_id,
            role=role.value,
            token_hash=hash_token(token),
            prefix=token[: len(TOKEN_PREFIX) + 4],
            name=name,
            created_at=utcnow(),
        )
    )
    await session.flush()
    return token


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


async def authenticate(session: AsyncSession, *, token: str | None) -> Principal:
    if not token:
        raise Unauthenticated("missing bearer token")
    row = await session.scalar(
        select(ApiToken).where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
    )
    if row is None:
        raise Unauthenticated("invalid or revoked token")
    return Principal(workspace_id=row.workspace_id, role=Role(row.role), token_id=row.id)
