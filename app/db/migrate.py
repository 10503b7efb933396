"""Run alembic migrations from inside the application (``enverif migrate``, tests, dev)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine

ROOT = Path(__file__).resolve().parents[2]


def alembic_config() -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.attributes["configure_logging"] = False
    return cfg


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    await _run(engine, lambda cfg: command.upgrade(cfg, revision))


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    await _run(engine, lambda cfg: command.downgrade(cfg, revision))


async def _run(engine: AsyncEngine, fn) -> None:  # type: ignore[no-untyped-def]
    cfg = alembic_config()

    def _sync(connection) -> None:  # type: ignore[no-untyped-def]
        cfg.attributes["connection"] = connection
        fn(cfg)

    async with engine.begin() as connection:
        await connection.run_sync(_sync)
