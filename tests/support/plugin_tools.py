"""Misbehaving tool plugins, loaded by real worker processes through entry points. Each call
appends a line to ``$ENVERIF_TEST_PLUGIN_LOG`` so a test can count executions across
processes."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from typing import Any

from app.domain.policy import RiskClass
from app.engine.base import ToolContext


class _Logged:
    """No ``kind``: like plugins written before it existed, these do plain I/O."""

    risk = RiskClass.EXTERNAL_WRITE
    timeout_s: float | None = None
    description = "test plugin"
    parameters: dict[str, Any] = {"type": "object"}
    name = "test.base"

    def __init__(self, settings: Any) -> None:  # plugins are built with the settings
        self.settings = settings

    def log(self, ctx: ToolContext) -> None:
        with open(os.environ["ENVERIF_TEST_PLUGIN_LOG"], "a") as f:
            f.write(f"{self.name} {ctx.step_id}\n")


class DatetimeTool(_Logged):
    name = "test.datetime"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.log(ctx)
        return {"at": datetime.now(UTC)}


class HugeTool(_Logged):
    name = "test.huge"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.log(ctx)
        return {"blob": "x" * 5_000_000}


class DeepTool(_Logged):
    """A result nested 40 levels deep: SQLite would store it, MariaDB refuses past 31."""

    name = "test.deep"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.log(ctx)
        value: Any = "bottom"
        for _ in range(40):
            value = {"down": value}
        return value


class HangingTool(_Logged):
    name = "test.hang"
    timeout_s = 1.0

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.log(ctx)
        await asyncio.sleep(3_600)
        return {"never": True}
