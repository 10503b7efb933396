"""Capability policy: decisions, risk classes and their evaluation (DESIGN §4)."""

from __future__ import annotations

import enum


class Decision(enum.StrEnum):
    ALLOW = "ALLOW"
    REQUIRE_APPROVAL = "REQUIRE_APPROVAL"
    DENY = "DENY"


class RiskClass(enum.StrEnum):
    READ = "READ"
    INTERNAL_WRITE = "INTERNAL_WRITE"
    EXTERNAL_WRITE = "EXTERNAL_WRITE"
    DESTRUCTIVE = "DESTRUCTIVE"
    SECRETS = "SECRETS"
