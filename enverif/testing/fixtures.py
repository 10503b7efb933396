"""The kit's pytest fixtures: ``pytest_plugins = ["enverif.testing.fixtures"]``."""

from app.testing.fixtures import enverif_settings, tool_context, turn_context

__all__ = ["enverif_settings", "tool_context", "turn_context"]
