"""pytest fixtures of the conformance kit: ``pytest_plugins = ["enverif.testing.fixtures"]``
in a plugin package's ``conftest.py``. (pytest is the plugin's test dependency, not ours.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.engine.base import ToolContext, TurnContext
from app.settings import Settings
from app.testing.providers import turn_context as _turn_context
from app.testing.tools import tool_context as _tool_context


@pytest.fixture
def enverif_settings(tmp_path: Any) -> Settings:
    """Deployment settings for a plugin's tests: private networks allowed (a test server is
    on loopback), everything else at its default; nothing connects to a database or Redis."""
    return Settings(home=tmp_path, http_allow_private_networks=True)


@pytest.fixture
def tool_context(enverif_settings: Settings) -> Callable[..., ToolContext]:
    """``tool_context(step_id=1, **fields)``: the context the engine passes an I/O tool."""

    def make(*, step_id: int | None = 1, **fields: Any) -> ToolContext:
        return _tool_context(enverif_settings, step_id=step_id, **fields)

    return make


@pytest.fixture
def turn_context() -> Callable[..., TurnContext]:
    """``turn_context(turn=0, history=..., tools=..., input=...)``: what a model is asked with."""
    return _turn_context
