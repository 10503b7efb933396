"""The configuration page's tables say what ``app.settings.Settings`` reads, exactly.

``docs/operating/configuration.md`` is the operator's manual of settings: an operator copies
a variable name from its tables and expects it to work, and trusts the default it states.
So every field of ``Settings`` (each is read from the environment) must have a row under its
real variable name, the row's default must be the field's default, and no row may name a
variable that ``Settings`` does not read. The page groups the settings in several tables;
every table whose header is ``| variable | default | meaning |`` counts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic.fields import FieldInfo

from app.settings import Settings

REPO = Path(__file__).parents[2]
PAGE = REPO / "docs" / "operating" / "configuration.md"
WHERE = PAGE.relative_to(REPO)
HEADER = "| variable | default | meaning |"

# Settings whose default is "nothing set" (None), which the table describes in words because
# the value that applies is derived from other settings (app.settings: effective_*_url).
DESCRIBED_IN_WORDS = {
    "ENVERIF_DATABASE_URL": "SQLite in `ENVERIF_HOME`",
    "ENVERIF_REDIS_URL": "embedded Redis in `ENVERIF_HOME`",
    "ENVERIF_PROVIDER_KEY_ENVS": "unset (deprecated)",
    "ENVERIF_CORS_ORIGINS": "none",
}

# Fields that are deliberately not in the table, with the reason. None today: every field
# of Settings is an operator's knob.
UNDOCUMENTED: dict[str, str] = {}

_ROW = re.compile(r"^\|(?P<names>[^|]*)\|(?P<defaults>[^|]*)\|")
_CODE = re.compile(r"`([^`]*)`")


@dataclass(frozen=True)
class Row:
    """One variable of the table (a row may name several, with a default each)."""

    line: int
    variable: str
    default: str  # the literal between backticks, or the cell's words when it has none

    @property
    def where(self) -> str:
        return f"{WHERE}:{self.line} ({self.variable})"


def table_lines() -> list[tuple[int, str]]:
    """(line number, text) of every row of the page's settings tables: from each header line
    to the first line that is not part of a table."""
    found: list[tuple[int, str]] = []
    in_table = False
    for number, text in enumerate(PAGE.read_text().splitlines(), start=1):
        if text.strip() == HEADER:
            in_table = True
        elif in_table and not text.startswith("|"):
            in_table = False
        elif in_table:
            found.append((number, text))
    return found


def page_rows() -> list[Row]:
    rows: list[Row] = []
    for number, text in table_lines():
        match = _ROW.match(text)
        if match is None or not match["names"].strip().startswith("`"):
            continue  # the |---| rule
        names = _CODE.findall(match["names"])
        cell = match["defaults"].strip()
        literals = _CODE.findall(cell)
        if re.fullmatch(r"`[^`]*`(\s*,\s*`[^`]*`)*", cell):
            defaults = literals
        else:
            defaults = [cell] * len(names)
        assert len(defaults) == len(names), (
            f"{WHERE}:{number}: {len(names)} variables but {len(defaults)} defaults: {text}"
        )
        rows += [Row(number, name, default) for name, default in zip(names, defaults, strict=True)]
    assert rows, f"no table with the header {HEADER!r} in {WHERE}"
    return rows


def env_name(field_name: str, field: FieldInfo) -> str:
    """The variable pydantic-settings reads for a field: its alias if it has one, else
    env_prefix + the field's name (case-insensitive, so written in capitals)."""
    assert not Settings.model_config.get("case_sensitive"), "names below assume case_sensitive=False"
    alias = field.validation_alias or field.alias
    if alias is not None:
        assert isinstance(alias, str), f"Settings.{field_name}: teach this test about {alias!r}"
        return alias.upper()
    return f"{Settings.model_config.get('env_prefix', '')}{field_name}".upper()


def default_of(field: FieldInfo) -> object:
    return field.get_default(call_default_factory=True)


def as_written(value: object) -> str:
    """A default as the table writes it: 10.0 as 10, False as false, a tuple comma-separated,
    a mapping as JSON."""
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple | list):
        return ",".join(as_written(item) for item in value) or "empty"
    return str(value)


SETTINGS_BY_ENV = {
    env_name(name, field): (name, field)
    for name, field in Settings.model_fields.items()
    if name not in UNDOCUMENTED
}


def test_the_table_names_each_variable_once() -> None:
    seen: dict[str, Row] = {}
    for row in page_rows():
        assert row.variable not in seen, f"{row.where} repeats {WHERE}:{seen[row.variable].line}"
        seen[row.variable] = row


def test_every_setting_is_in_the_table() -> None:
    documented = {row.variable for row in page_rows()}
    missing = [
        f"{variable} (Settings.{name}, default {as_written(default_of(field))!r})"
        for variable, (name, field) in SETTINGS_BY_ENV.items()
        if variable not in documented
    ]
    assert not missing, f"settings missing from the tables of {WHERE}: " + ", ".join(missing)


@pytest.mark.parametrize("row", page_rows(), ids=lambda row: row.variable)
def test_the_table_states_the_real_name_and_default(row: Row) -> None:
    assert row.variable in SETTINGS_BY_ENV, f"{row.where}: Settings reads no such variable"
    name, field = SETTINGS_BY_ENV[row.variable]
    if default_of(field) is None:
        assert DESCRIBED_IN_WORDS.get(row.variable) == row.default, (
            f"{row.where}: Settings.{name} defaults to None (derived from other settings); "
            f"the table says {row.default!r}: update DESCRIBED_IN_WORDS if the words changed"
        )
        return
    assert row.default == as_written(default_of(field)), (
        f"{row.where}: the table says the default is {row.default!r}, "
        f"Settings.{name} defaults to {default_of(field)!r}"
    )


def test_the_table_is_checked_against_values_not_words() -> None:
    # Guard against a check that cannot fail: the normalisation keeps what tells defaults apart.
    assert as_written(10.0) == "10" and as_written(0.01) == "0.01"
    assert as_written(False) == "false" and as_written(0) == "0"
    assert as_written(("A", "B")) == "A,B" and as_written(()) == "empty"
    assert as_written(Path(".enverif")) == ".enverif"
    assert set(DESCRIBED_IN_WORDS) <= SETTINGS_BY_ENV.keys()
    assert all(name in Settings.model_fields for name in UNDOCUMENTED)
