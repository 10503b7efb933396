"""The conformance kit for plugin authors, published as ``enverif.testing``.

A tool package (the ``enverif.tools`` entry-point group) or a provider package
(``enverif.providers``) runs these checks in its own test suite, so it finds out there, not
in a worker, when it breaks a rule the engine relies on::

    from enverif.testing import ToolCase, check_tool

    async def test_my_tool_keeps_the_rules():
        await check_tool(MyTool(settings), cases=[
            ToolCase({"id": "42"}),                              # answers with strict JSON
            ToolCase({"nope": 1}, error="INVALID_ARGUMENTS"),    # refuses as a ToolError
        ])

    async def test_my_provider_keeps_the_rules(enverif_settings):
        await check_provider(MyProvider, valid=[{"provider": "mine", "model": "m"}],
                             invalid=[{"provider": "mine"}], settings=enverif_settings)

Fixtures (``pytest_plugins = ["enverif.testing.fixtures"]``): ``enverif_settings``
(deployment settings for a test: private networks allowed, no database), ``tool_context``
and ``turn_context`` (factories of what the engine passes in).

Each check raises ``ConformanceError`` (an ``AssertionError``, so pytest shows it as a
failure) saying which rule was broken; none needs a database, Redis or a worker. What they
cannot check: a STATE tool's writes (they need a run's fenced transaction, ``RunWriter``),
and whether an I/O tool's side effects are idempotent under ``ctx.step_id``.
"""

from app.testing.checks import ConformanceError
from app.testing.providers import check_provider, turn_context
from app.testing.tools import ToolCase, check_tool, check_tool_call, check_tool_shape, tool_context

__all__ = [
    "ConformanceError",
    "ToolCase",
    "check_provider",
    "check_tool",
    "check_tool_call",
    "check_tool_shape",
    "tool_context",
    "turn_context",
]
