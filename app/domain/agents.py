"""Agents, workspaces' roles and schedules: enums and plain rules."""

from __future__ import annotations

import enum


class AgentStatus(enum.StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    ARCHIVED = "ARCHIVED"


class Role(enum.StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _ROLE_RANK[self]

    def allows(self, needed: Role) -> bool:
        return self.rank >= needed.rank


_ROLE_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


class OverlapPolicy(enum.StrEnum):
    SKIP = "SKIP"
    ALLOW = "ALLOW"


DEFAULT_MEMORY_MAX_ITEMS = 20
DEFAULT_MEMORY_MAX_CHARS = 4_000
