"""The ``enverif`` parser as an operator meets it in ``--help``: every argument explained,
every option's default in sight, and the old ``run start`` still parsing as ``runs start``
while no longer listed. The parser is built and inspected; no command runs."""

from __future__ import annotations

import argparse

import pytest

from app.cli import build_parser, runs
from app.cli.watch.reconnect import DEFAULT_MAX_FAILURES
from tests.unit.test_docs_command_line import leaf_commands

LEAVES = leaf_commands(build_parser())


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a for a in parser._actions if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_every_argument_has_help_and_every_option_shows_its_default(path: tuple[str, ...]) -> None:
    parser = LEAVES[path]
    assert parser.description, f"`enverif {' '.join(path)} --help` has no description"
    text = " ".join(parser.format_help().split())
    # One of a required group (token revoke --id | --name) has no default: one must be given.
    required = {id(a) for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    for action in _arguments(parser):
        name = action.option_strings[0] if action.option_strings else action.metavar
        assert action.help, f"`enverif {' '.join(path)}` {name} has no help"
        if action.option_strings and action.nargs != 0 and not action.required and id(action) not in required:
            # The formatter appends "(default: ...)" unless the help already says it.
            assert "default" in parser._get_formatter()._expand_help(action), (
                f"`enverif {' '.join(path)} {name}` does not say its default"
            )
    assert "==SUPPRESS==" not in text


def test_defaults_are_the_ones_the_help_names() -> None:
    watch = " ".join(LEAVES[("runs", "watch")].format_help().split())
    assert f"(default: {DEFAULT_MAX_FAILURES})" in watch
    assert "(default: ENVERIF_URL or http://127.0.0.1:8000/graphql)" in watch
    assert "(default: ENVERIF_TOKEN)" in watch
    listing = " ".join(LEAVES[("runs", "list")].format_help().split())
    assert f"(default: {runs.DEFAULT_LIMIT})" in listing


def test_the_old_run_start_parses_as_runs_start_and_is_not_listed() -> None:
    parser = build_parser()
    argv = ["start", "--workspace", "w", "--agent", "a", "--input", "{}", "--json"]
    old, new = parser.parse_args(["run", *argv]), parser.parse_args(["runs", *argv])
    assert old.handler is new.handler is runs.cmd_start
    assert {k: v for k, v in vars(old).items() if k != "command"} == {
        k: v for k, v in vars(new).items() if k != "command"
    }
    listed = parser.format_help()
    assert "runs " in listed and "\n    run " not in listed and " run\n" not in listed
    assert "Deprecated" in LEAVES[("run", "start")].format_help()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["runs", "list", "--workspace", "w", "--status", "SLEEPING"], "invalid choice: 'SLEEPING'"),
        (["runs", "show", "--workspace", "w"], "RUN_ID"),
        (["runs", "cancel", "UnVuOjE"], "--workspace"),
    ],
)
def test_a_bad_command_line_is_a_usage_error(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert needle in capsys.readouterr().err
