"""An agent's input schema (JSON Schema 2020-12): what a run's input must look like.

Declared on the agent (``inputSchema``, a versioned field: docs/concepts/versions.md) and
checked where an input enters, ``startRun`` and a schedule's ``input``, so that a wrong input
is a ``VALIDATION_FAILED`` naming its path (``extensions.field``: ``input.customer.email``,
``input.items.0``) instead of a run that fails later. ``format`` is an annotation, as the
2020-12 default says; ``$ref`` resolves only inside the schema (nothing is fetched).
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from app.domain.errors import ValidationFailed

# The schema's own address, for resolving its "#/..." references (nothing is fetched).
_BASE = "urn:enverif:input-schema"

# A schema describes an input, it is not a document store: 64 KB is far more than any needs.
MAX_SCHEMA_BYTES = 65_536
# Python's re backtracks: one pattern such as "(a+)+$" and a 100 KB input would hold the API
# process for minutes, every tenant's requests with it.
REFUSED_KEYWORDS = frozenset({"pattern", "patternProperties"})


def check_schema(schema: Any, *, field: str = "inputSchema") -> dict[str, Any] | None:
    """``schema`` if it is a valid JSON Schema 2020-12 object (None: no schema)."""
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise ValidationFailed(f"{field} must be a JSON Schema object", field=field)
    if len(json.dumps(schema, default=str)) > MAX_SCHEMA_BYTES:
        raise ValidationFailed(f"{field} is larger than {MAX_SCHEMA_BYTES} bytes", field=field)
    if _keywords(schema) & REFUSED_KEYWORDS:
        raise ValidationFailed(
            f"{field} may not use pattern or patternProperties: a regular expression applied to "
            "every input can take the server's time without bound (use enum, format or lengths)",
            field=field,
        )
    if any(not ref.startswith("#") for ref in _references(schema)):
        raise ValidationFailed(f'{field} may refer only inside itself ($ref: "#/$defs/...")', field=field)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "".join(f"[{p!r}]" for p in exc.absolute_path)
        raise ValidationFailed(
            f"{field}{where} is not valid JSON Schema 2020-12: {exc.message}", field=field
        ) from None
    resolver = Registry().with_resource(_BASE, DRAFT202012.create_resource(schema)).resolver(base_uri=_BASE)
    for ref in _references(schema):
        try:
            resolver.lookup(ref)
        except Unresolvable:
            raise ValidationFailed(
                f"{field} refers to {ref!r}, which it does not hold", field=field
            ) from None
    # A reference that leads back to itself without reading the input ({"$ref": "#"}) would
    # recurse on every input: tried once here, on null, so that it is refused now.
    try:
        any(Draft202012Validator(schema).iter_errors(None))
    except (RecursionError, Unresolvable):
        raise ValidationFailed(f"{field} refers to itself without end", field=field) from None
    return schema


def check_input(schema: dict[str, Any] | None, value: Any, *, field: str = "input") -> None:
    """Refuse ``value`` that ``schema`` does not describe, naming the path of its most
    relevant error: ``field`` followed by the keys and indexes down to it."""
    if not schema:
        return
    try:
        error = best_match(Draft202012Validator(schema).iter_errors(value))
    except (RecursionError, Unresolvable):
        # A schema this module's check let through that still cannot be applied (a loop only
        # some inputs reach): the input cannot be judged, so it is not taken.
        raise ValidationFailed(
            f"{field} cannot be checked: the agent's inputSchema loops", field=field
        ) from None
    if error is None:
        return
    path = ".".join([field, *(str(part) for part in error.absolute_path)])
    raise ValidationFailed(f"{path}: {error.message[:500]}", field=path)


def _references(value: Any) -> list[str]:
    """Every ``$ref``/``$dynamicRef`` in a schema: a reference to anything but the schema
    itself could never resolve (nothing is fetched) and would fail every run's input."""
    found: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found += [str(node[k]) for k in ("$ref", "$dynamicRef") if k in node]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _keywords(value: Any) -> set[str]:
    """Every keyword a schema uses, at any depth (the names under ``properties``, ``$defs``
    and the like are names, not keywords)."""
    found: set[str] = set()
    stack: list[tuple[Any, bool]] = [(value, True)]  # (node, whether its keys are keywords)
    while stack:
        node, keywords = stack.pop()
        if isinstance(node, dict):
            if keywords:
                found.update(str(k) for k in node)
            for key, item in node.items():
                stack.append((item, not (keywords and key in _NAMED_SCHEMAS)))
        elif isinstance(node, list):
            stack.extend((item, True) for item in node)
    return found


# Keywords whose value maps names to schemas.
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "dependentSchemas", "patternProperties"})
