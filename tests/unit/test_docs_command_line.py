"""The command line page's synopsis shows the ``enverif`` command as its parser builds it.

An operator types what the "Synopsis" block of ``docs/operating/cli.md`` shows, so each line
of it must name a real subcommand, only options that subcommand has (taking a value exactly
when the option does), its positional arguments and required options; and every subcommand
and option the parser has must be shown there. The parser is built and inspected; no command
runs.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.cli import build_parser

REPO = Path(__file__).parents[2]
PAGE = REPO / "docs" / "operating" / "cli.md"
WHERE = PAGE.relative_to(REPO)
SECTION = "## Synopsis"

_OPTION_NAME = re.compile(r"--[a-z][a-z0-9-]*")
# `--option VALUE`: the value is the next word when it is not another bracket or option.
_OPTION = re.compile(rf"({_OPTION_NAME.pattern})(?: ([^\s\[\]()|-][^\s\[\]()|]*))?")


@dataclass(frozen=True)
class Entry:
    """One command of the block: its synopsis (what is typed) and the lines that describe it."""

    line: int
    synopsis: str
    description: str

    @property
    def words(self) -> list[str]:
        return self.synopsis.split()

    @property
    def where(self) -> str:
        return f"{WHERE}:{self.line} ({' '.join(self.words[:3])})"


def page_entries() -> list[Entry]:
    """Each ``enverif ...`` line of the section's code block, with the lines under it.

    A line's description starts after a gap of two or more spaces; lines under a command are
    more synopsis when they start left of the description column, description otherwise."""
    lines = PAGE.read_text().splitlines()
    start = lines.index(SECTION)
    opening = lines.index("```", start)
    block = lines[opening + 1 : lines.index("```", opening + 1)]
    column = min(m.end() for text in block if (m := re.match(r"enverif\S*(?: \S+)* {2,}", text)))
    entries: list[tuple[int, list[str], list[str]]] = []
    for number, text in enumerate(block, start=opening + 2):
        if text.startswith("enverif "):
            synopsis, _, description = text.partition("  ")
            entries.append((number, [synopsis], [description.strip()]))
        else:
            assert entries, f"{WHERE}:{number}: text before the first enverif command: {text!r}"
            indent = len(text) - len(text.lstrip())
            entries[-1][1 if indent < column else 2].append(text.strip())
    assert entries, f"no enverif commands in the code block under {SECTION!r} in {WHERE}"
    return [Entry(number, " ".join(syn), " ".join(filter(None, desc))) for number, syn, desc in entries]


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def leaf_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every runnable command, e.g. ("token", "create"), with its parser."""
    children = subparsers_of(parser)
    if not children:
        return {path: parser}
    leaves: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for name, child in children.items():
        leaves |= leaf_commands(child, (*path, name))
    return leaves


def options_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        option: action
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    }


def command_of(entry: Entry) -> tuple[tuple[str, ...], argparse.ArgumentParser]:
    """Walk the parser along the entry's words, as argparse would pick subcommands."""
    parser = build_parser()
    path: tuple[str, ...] = ()
    for word in entry.words[1:]:
        children = subparsers_of(parser)
        if not children:
            break
        assert word in children, (
            f"{entry.where}: `enverif {' '.join((*path, word))}` is not a command; "
            f"after `enverif {' '.join(path)}` the parser has {', '.join(sorted(children))}"
        )
        path, parser = (*path, word), children[word]
    assert not subparsers_of(parser), f"{entry.where}: `enverif {' '.join(path)}` needs a subcommand"
    return path, parser


ENTRIES = page_entries()


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: " ".join(entry.words[1:3]))
def test_each_command_shown_exists_as_shown(entry: Entry) -> None:
    path, parser = command_of(entry)
    options = options_of(parser)
    for option, value in _OPTION.findall(entry.synopsis):
        assert option in options, f"{entry.where}: `enverif {' '.join(path)}` has no option {option}"
        takes_value = options[option].nargs != 0
        assert takes_value == bool(value), (
            f"{entry.where}: {option} is shown {'with value ' + value if value else 'without a value'}, "
            f"but the parser's {option} {'takes' if takes_value else 'takes no'} value"
        )
    for option in _OPTION_NAME.findall(entry.description):
        assert option in options, f"{entry.where}: the description names {option}, which is not an option"
    for action in parser._actions:
        if not action.option_strings:
            assert action.metavar in entry.words, (
                f"{entry.where}: the positional argument {action.metavar} is not shown"
            )
        elif action.required and not isinstance(action, argparse._HelpAction):
            assert set(action.option_strings) & set(_OPTION_NAME.findall(entry.synopsis)), (
                f"{entry.where}: the required option {action.option_strings[0]} is not shown"
            )


def test_every_command_and_option_is_shown() -> None:
    shown: dict[tuple[str, ...], set[str]] = {}
    for entry in ENTRIES:
        path, _ = command_of(entry)
        shown.setdefault(path, set()).update(_OPTION_NAME.findall(entry.synopsis))
    missing = []
    for path, parser in leaf_commands(build_parser()).items():
        if path not in shown:
            missing.append(f"`enverif {' '.join(path)}`")
            continue
        missing += [
            f"`enverif {' '.join(path)} {option}`"
            for option in options_of(parser)
            if option.startswith("--") and option not in shown[path]
        ]
    assert not missing, f"not shown in {WHERE} {SECTION!r}: " + ", ".join(missing)
