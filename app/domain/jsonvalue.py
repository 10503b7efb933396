"""Strict JSON for everything a run stores: tool results, tool arguments, final answers.

Both databases must store and return the same thing, so a value is reduced to what strict
JSON (RFC 8259) can carry: no NaN or Infinity (SQLite's JSON would take them, MariaDB's
would not), string keys only, nothing a serialiser would have to guess at (``datetime``,
``bytes``, sets). A value that does not fit is refused with a reason, never coerced; the
size cap is on the UTF-8 encoding, which is what the database stores. So is a depth cap:
MariaDB refuses JSON nested deeper than 31 arrays or objects (error 4025), SQLite does not,
and a run whose result MariaDB cannot store would crash on every attempt.
"""

from __future__ import annotations

import json
import math
from typing import Any

from app.domain.model_errors import ModelErrorCode

NOT_JSON = ModelErrorCode.NOT_JSON
TOO_LARGE = ModelErrorCode.TOO_LARGE
# Levels, counted as ``json_depth`` does: 32 is 31 nested arrays or objects around a value,
# the most MariaDB stores.
MAX_JSON_DEPTH = 32


def json_depth(value: Any) -> int:
    """Levels of ``value``: 1 for a scalar, one more for each array or object around it (an
    empty one counts as holding a level). Level by level, keeping only the arrays and objects
    of the next one (a 200 KB document: 2 ms, where a stack of every item took 11); no
    recursion, so a value too deep for the stack is measured too."""
    if not isinstance(value, _CONTAINERS):
        return 1
    depth = 1
    level = [value]
    while level:
        depth += 1
        inner = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, _CONTAINERS):
                    inner.append(child)
        level = inner
    return depth


_CONTAINERS = (dict, list, tuple)


def depth_error(value: Any, *, max_depth: int, what: str) -> str | None:
    """Why ``value`` is too deep to store, or None."""
    depth = json_depth(value)
    if depth > max_depth:
        return f"{what} is nested {depth} levels deep; at most {max_depth}"
    return None


class NotStorable(ValueError):
    """The value is not strict JSON, or is over the size cap. ``code`` is what the model sees."""

    def __init__(self, code: ModelErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def strict_json(value: Any, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH, what: str = "value") -> Any:
    """``value`` as it will come back from the database: a fresh tree of dict/list/str/
    int/float/bool/None. Raises ``NotStorable`` when it is not strict JSON, is nested
    deeper than ``max_depth`` levels or its encoding is larger than ``max_bytes``."""
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        _refuse_if_too_deep(value, max_depth=max_depth, what=what)
        raise NotStorable(NOT_JSON, f"{what} is not JSON: {_why(value, exc)}") from None
    except RecursionError:
        _refuse_if_too_deep(value, max_depth=max_depth, what=what)
        raise NotStorable(NOT_JSON, f"{what} is nested too deeply") from None
    # A value holds no more levels than brackets plus one: counting them in the encoding (at
    # C speed, those inside strings too) spares the walk for every value but the ones that
    # could be too deep.
    if encoded.count("[") + encoded.count("{") >= max_depth:
        _refuse_if_too_deep(value, max_depth=max_depth, what=what)
    size = len(encoded.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise NotStorable(TOO_LARGE, f"{what} is {size} bytes, over the cap of {max_bytes} bytes")
    try:
        # Round trip: tuples become lists, int keys become strings, exactly as stored.
        return json.loads(encoded)
    except RecursionError:
        raise NotStorable(NOT_JSON, f"{what} is nested too deeply") from None


def _refuse_if_too_deep(value: Any, *, max_depth: int, what: str) -> None:
    too_deep = depth_error(value, max_depth=max_depth, what=what)
    if too_deep is not None:
        raise NotStorable(NOT_JSON, too_deep)


def _why(value: Any, exc: Exception) -> str:
    bad = _first_bad(value, depth=0)
    if bad is not None:
        return bad
    return str(exc)


def _first_bad(value: Any, *, depth: int) -> str | None:
    """A short description of the first thing in ``value`` that strict JSON cannot hold."""
    if depth > 64:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a JSON number"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                return f"a key of type {type(k).__name__}"
            found = _first_bad(v, depth=depth + 1)
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _first_bad(item, depth=depth + 1)
            if found:
                return found
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return None
    return f"a value of type {type(value).__name__}"
