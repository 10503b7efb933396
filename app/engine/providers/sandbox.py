"""The Jinja2 sandbox of scripted templates, with size caps that cannot be walked around.

Rendering itself happens in the subprocess pool of ``templates.py``, which enforces the time
budget (and survives C-level work by being killed); this module stops allocation bombs
*early*, before the memory is taken, and is also what validates templates at
``createAgent``. Every path that can build something big from something small is capped at
``max_len`` (``ENVERIF_TEMPLATE_MAX_OUTPUT_BYTES``: characters for strings, items for lists):

- binary operators ``*``, ``**``, ``%``, ``+`` (intercepted: never constant-folded at
  compile time, so validating a template cannot be made to run it);
- ``str.format`` / ``format_map`` (widths and precisions in format specs) and printf ``%``;
- filters: a pre-check for the ones whose output can outgrow their input (``center``,
  ``format``, ``indent``, ``join``, ``replace``, ``batch``, ``slice``, ``wordwrap``) and a
  size check of every filter's result. Filters are also run at compile time (constant
  folding), so the caps protect the validating API process as well;
- method calls (``'a'.center(n)``, ``(1).to_bytes(n)``, ``s.replace(...)``, ``sep.join(...)``);
- ``namespace`` attributes (a loop doubling ``ns.s`` stops at the cap);
- integers: at most ``MAX_INT_BITS`` bits from ``*`` and ``**``;
- the rendered output, counted as it is generated.

``lipsum`` is removed (it builds text from a size argument). ``fromjson`` is added: tools
answer with text (``http.get``'s body), and a procedure reads JSON APIs; its output is never
bigger than its input, and it takes strict JSON only (no NaN or Infinity).
"""

from __future__ import annotations

import copy
import functools
import json
import re
import string
from _string import formatter_field_name_split  # type: ignore[import-not-found]  # str.format's own
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, Undefined, nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, _PassArg

DEFAULT_MAX_LEN = 1_048_576
# Big enough for any sane arithmetic (2**1000 has 1001 bits), small enough to stay cheap.
MAX_INT_BITS = 64_000
MAX_EXPONENT = 1_000
_DIGITS = re.compile(r"\d+")
_PRINTF_SPEC = re.compile(r"%(?:\([^)]*\))?[^a-zA-Z%]*[a-zA-Z%]")


class RenderError(Exception):
    """A template failed (syntax, sandbox refusal, cap, error in an expression)."""


def _size(value: Any) -> int:
    if isinstance(value, str | bytes | bytearray | list | tuple | dict | set | frozenset):
        return len(value)
    return 0


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"fromjson: {name} is not JSON")


def _fromjson(value: Any) -> Any:
    if not isinstance(value, str):
        raise TypeError(f"fromjson takes a string, not {type(value).__name__}")
    try:
        return json.loads(value, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("fromjson: the JSON is nested too deeply") from None


class _CappedNamespace(Namespace):
    max_len = DEFAULT_MAX_LEN

    def __setitem__(self, name: str, value: Any) -> None:
        cap = type(self).max_len  # not self.max_len: Namespace resolves attributes to its items
        if _size(value) > cap:
            raise SecurityError(f"a namespace value would be longer than {cap}")
        super().__setitem__(name, value)


class _CappedFormatter(string.Formatter):
    """``str.format`` under the sandbox's attribute rules, with widths and precisions capped."""

    def __init__(self, env: CappedSandbox) -> None:
        self._env = env

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, i in rest:
            obj = self._env.getattr(obj, i) if is_attr else self._env.getitem(obj, i)
        return obj, first

    def format_field(self, value: Any, format_spec: str) -> Any:
        self._env.check_widths(format_spec)
        return super().format_field(value, format_spec)


class CappedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, *, max_len: int = DEFAULT_MAX_LEN) -> None:
        # Autoescape stays off: the output is JSON data and tool arguments, not HTML.
        super().__init__(undefined=StrictUndefined, autoescape=False)
        self.max_len = max_len
        namespace = type("namespace", (_CappedNamespace,), {"max_len": max_len})
        self.globals.pop("lipsum", None)
        self.filters["fromjson"] = _fromjson
        self.globals["namespace"] = namespace
        for name, fn in list(self.filters.items()):
            self.filters[name] = self._capped_filter(name, fn)

    # -- checks -----------------------------------------------------------------------

    def refuse_if_long(self, n: int, what: str) -> None:
        if n > self.max_len:
            raise SecurityError(f"{what} would be longer than {self.max_len}")

    def check_result(self, value: Any, what: str) -> Any:
        self.refuse_if_long(_size(value), what)
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
            raise SecurityError(f"{what}: integers are limited to {MAX_INT_BITS} bits")
        return value

    def check_widths(self, spec: str, *, printf: bool = False) -> None:
        """Refuse a format spec whose width or precision would exceed the cap.

        Every run of digits counts (a digit used as fill only makes this stricter). In
        printf specs ``*`` takes the width from the arguments, so it is refused; in
        ``str.format`` specs it is a fill character.
        """
        if printf and "*" in spec:
            raise SecurityError("'*' widths are not allowed in templates")
        for digits in _DIGITS.findall(spec):
            if len(digits) > 9 or int(digits) > self.max_len:
                raise SecurityError(f"format width {digits} is larger than {self.max_len}")

    def printf(self, template: str, args: Any) -> str:
        for spec in _PRINTF_SPEC.findall(template):
            self.check_widths(spec, printf=True)
        return str(self.check_result(template % args, "'%' formatting"))

    def estimate_join(self, sep: Any, items: list[Any]) -> int:
        return sum(len(str(i)) if isinstance(i, str) else 1 for i in items) + len(sep) * max(
            0, len(items) - 1
        )

    def estimate_replace(self, s: Any, old: Any, new: Any, count: int = -1) -> int:
        if not (isinstance(s, str) and isinstance(old, str) and isinstance(new, str)):
            return 0
        n = len(s) + 1 if old == "" else s.count(old)
        if count is not None and count >= 0:
            n = min(n, count)
        return len(s) + n * max(0, len(new) - len(old))

    # -- operators, calls, filters ----------------------------------------------------

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(n, int):
                    self.refuse_if_long(len(seq) * n, "'*'")
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise SecurityError(f"'*' would build an integer above {MAX_INT_BITS} bits")
        elif operator == "**":
            if isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
                raise SecurityError(f"exponents above {MAX_EXPONENT} are not allowed")
            if isinstance(left, int) and isinstance(right, int) and right > 0:
                if left.bit_length() * right > MAX_INT_BITS:
                    raise SecurityError(f"'**' would build an integer above {MAX_INT_BITS} bits")
        elif operator == "%" and isinstance(left, str):
            return self.printf(left, right)
        elif (
            operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple)
        ):
            self.refuse_if_long(len(left) + len(right), "'+'")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str | bytes):
            if name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
                __self.refuse_if_long(args[0], f"{name}()")
            elif name == "expandtabs":
                tab = args[0] if args else kwargs.get("tabsize", 8)
                if isinstance(tab, int):
                    __self.refuse_if_long(len(owner) * max(tab, 1), "expandtabs()")
            elif name == "replace" and len(args) >= 2:
                __self.refuse_if_long(__self.estimate_replace(owner, *args[:3]), "replace()")
            elif name == "join" and args:
                items = list(args[0])
                __self.refuse_if_long(__self.estimate_join(owner, items), "join()")
                args = (items, *args[1:])
        elif isinstance(owner, int) and name == "to_bytes":
            length = args[0] if args else kwargs.get("length", 1)
            if isinstance(length, int):
                __self.refuse_if_long(length, "to_bytes()")
        result = super().call(__context, __obj, *args, **kwargs)
        return __self.check_result(result, f"{name or 'call'}()")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        f_self: str = value.__self__
        is_map = value.__name__ == "format_map"
        formatter = _CappedFormatter(self)

        def capped(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                return str(self.check_result(formatter.vformat(f_self, (), args[0]), "format_map()"))
            return str(self.check_result(formatter.vformat(f_self, args, kwargs), "format()"))

        return functools.update_wrapper(capped, value)

    def _capped_filter(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        pre = _FILTER_PRECHECKS.get(name)
        # Filters marked pass_context/pass_eval_context/pass_environment get that first.
        skip = 0 if _PassArg.from_obj(fn) is None else 1

        @functools.wraps(fn)  # keeps the pass_* marker, so Jinja still passes it
        def capped(*args: Any, **kwargs: Any) -> Any:
            if pre is not None:
                args = (*args[:skip], *pre(self, list(args[skip:]), kwargs))
            return self.check_result(fn(*args, **kwargs), f"filter {name!r}")

        return capped


# Pre-checks of the filters whose output can outgrow their input: each gets the filter's
# arguments (without the pass_* one) and returns them, possibly materialised.
Args = list[Any]


def _arg(args: Args, kwargs: dict[str, Any], i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _pre_center(env: CappedSandbox, args: Args, kwargs: dict[str, Any]) -> Args:
    width = _arg(args, kwargs, 1, "width", 80)
    if isinstance(width, int):
        env.refuse_if_long(width, "center")
    return args


def _pre_format(env: CappedSandbox, args: Args, kwargs: dict[str, Any]) -> Args:
    if args:
        for spec in _PRINTF_SPEC.findall(str(args[0])):
            env.check_widths(spec, printf=True)
    return args


def _pre_indent(env: CappedSandbox, args: Args, kwargs: dict[str, Any]) -> Args:
    s = str(_arg(args, kwargs, 0, "s", ""))
    width = _arg(args, kwargs, 1, "width", 4)
    pad = width if isinstance(width, int) else len(str(width))
    env.refuse_if_long(len(s) + (s.count("\n") + 1) * pad, "indent")
    return args


def _pre_join(env: CappedSandbox, args: Args, kwargs: dict[str, Any]) -> Args:
    value, sep = _arg(args, kwargs, 0, "value", ""), _arg(args, kwargs, 1, "d", "")
    if isinstance(value, str | Undefined) or not isinstance(sep, str) or not args:
        return args
    items = list(value)  # materialised once: a generator would be spent by the check
    env.refuse_if_long(env.estimate_join(sep, items), "join")
    return [items, *args[1:]]


def _pre_replace(env: CappedSandbox, args: Args, kwargs: dict[str, Any]) -> Args:
    if len(args) >= 3:
        count = _arg(args, kwargs, 3, "count", None)
        s, old, new = args[:3]
        env.refuse_if_long(env.estimate_replace(s, old, new, -1 if count is None else count), "replace")
    return args


def _pre_count_arg(name: str, arg: str) -> Callable[[CappedSandbox, Args, dict[str, Any]], Args]:
    def check(env: CappedSandbox, args: Args, kwargs: dict[str, Any]) -> Args:
        n = _arg(args, kwargs, 1, arg, 0)
        if isinstance(n, int):
            env.refuse_if_long(n, name)
        return args

    return check


def _pre_round(env: CappedSandbox, args: Args, kwargs: dict[str, Any]) -> Args:
    # round(5, -10**9) computes 10**(10**9); so does the filter's ceil/floor method.
    precision = _arg(args, kwargs, 1, "precision", 0)
    if isinstance(precision, int) and abs(precision) > MAX_EXPONENT:
        raise SecurityError(f"round() precision is limited to {MAX_EXPONENT}")
    return args


def _pre_wordwrap(env: CappedSandbox, args: Args, kwargs: dict[str, Any]) -> Args:
    s = str(_arg(args, kwargs, 0, "s", ""))
    wrap = _arg(args, kwargs, 3, "wrapstring", None) or "\n"
    env.refuse_if_long(len(s) * max(1, len(str(wrap))), "wordwrap")
    return args


_FILTER_PRECHECKS: dict[str, Callable[[CappedSandbox, Args, dict[str, Any]], Args]] = {
    "center": _pre_center,
    "format": _pre_format,
    "indent": _pre_indent,
    "join": _pre_join,
    "replace": _pre_replace,
    "batch": _pre_count_arg("batch", "linecount"),
    "slice": _pre_count_arg("slice", "slices"),
    "wordwrap": _pre_wordwrap,
    "round": _pre_round,
}


# -- compiling and rendering --------------------------------------------------------------

Compiled = Callable[[dict[str, Any]], Any]


def single_expression(env: CappedSandbox, source: str) -> str | None:
    """The inner expression when ``source`` is exactly ``{{ expr }}``, else ``None``."""
    if not (source.startswith("{{") and source.endswith("}}")):
        return None
    try:
        tree = env.parse(source)
    except TemplateSyntaxError:
        return None
    body = tree.body
    if len(body) != 1 or not isinstance(body[0], nodes.Output) or len(body[0].nodes) != 1:
        return None  # e.g. "{{ a }} and {{ b }}"
    if isinstance(body[0].nodes[0], nodes.TemplateData):
        return None
    inner = source[2:-2]
    # Whitespace-control markers belong to the delimiters ("{{- x -}}"), not the expression.
    if inner[:1] in ("-", "+"):
        inner = inner[1:]
    if inner[-1:] in ("-", "+"):
        inner = inner[:-1]
    return inner


def compile_template(env: CappedSandbox, source: str) -> Compiled:
    """Compile one string; raises ``TemplateSyntaxError`` for templates that don't parse."""
    if "{" not in source:
        return lambda _variables: source  # plain text: nothing to render
    expression = single_expression(env, source)
    if expression is not None:
        compiled = env.compile_expression(expression, undefined_to_none=False)
        return lambda variables: compiled(**variables)
    template = env.from_string(source)

    def render(variables: dict[str, Any]) -> str:
        # Counted as it is generated: a loop printing forever stops at the cap, not at OOM.
        out: list[str] = []
        size = 0
        for chunk in template.generate(variables):
            size += len(chunk)
            env.refuse_if_long(size, "rendered text")
            out.append(chunk)
        return "".join(out)

    return render


# Templates made only of these take time linear in their own size and the data they read:
# no loops, calls, assignments, macros, or operators that multiply sizes (``*``, ``**``,
# ``%``, ``~`` -- concatenation is not interceptable and ``str()`` of a multiplied list is
# not bounded by the list's length). They are the common case (``{{ input.url }}``,
# ``{{ results[-1].body }}``), and the pool renders them in-process, skipping the
# subprocess round trip. Anything else goes to a render subprocess under the time budget.
_LINEAR_NODES: tuple[type[nodes.Node], ...] = (
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.If, nodes.Name, nodes.Const,
    nodes.Getattr, nodes.Getitem, nodes.Slice, nodes.Compare, nodes.Operand, nodes.And,
    nodes.Or, nodes.Not, nodes.Neg, nodes.Pos, nodes.CondExpr, nodes.List, nodes.Tuple,
    nodes.Dict, nodes.Pair, nodes.Add, nodes.Sub, nodes.Div, nodes.FloorDiv, nodes.Filter,
    nodes.Test,
)  # fmt: skip
_LINEAR_FILTERS = frozenset(
    {"length", "count", "string", "lower", "upper", "trim", "default", "d", "first", "last",
     "int", "float", "abs", "tojson", "capitalize", "title", "bool"}
)  # fmt: skip
_LINEAR_TESTS = frozenset(
    {"defined", "undefined", "none", "number", "string", "mapping", "sequence", "boolean",
     "integer", "float", "true", "false", "eq", "ne", "lt", "gt", "le", "ge", "in", "odd", "even"}
)  # fmt: skip


def is_linear(env: CappedSandbox, source: str) -> bool:
    """Whether ``source`` is in the linear-time subset above (plain text is)."""
    if "{" not in source:
        return True
    try:
        tree = env.parse(source)
    except TemplateSyntaxError:
        return False  # let the subprocess report it
    for node in tree.find_all(nodes.Node):
        if not isinstance(node, _LINEAR_NODES):
            return False
        if isinstance(node, nodes.Name) and node.ctx != "load":
            return False
        if isinstance(node, nodes.Filter) and node.name not in _LINEAR_FILTERS:
            return False
        if isinstance(node, nodes.Test) and node.name not in _LINEAR_TESTS:
            return False
        if isinstance(node, nodes.Filter | nodes.Test) and (node.dyn_args or node.dyn_kwargs):
            return False
    return True


def has_templates(value: Any) -> bool:
    """Whether any string in ``value`` needs rendering (plain data skips the renderer)."""
    if isinstance(value, str):
        return "{" in value
    if isinstance(value, dict):
        return any(has_templates(v) for v in value.values())
    if isinstance(value, list):
        return any(has_templates(v) for v in value)
    return False


def to_json(value: Any, where: str) -> Any:
    """Check a rendered value is JSON and return a plain copy (no aliasing of run state)."""
    if isinstance(value, Undefined):
        str(value)  # StrictUndefined raises UndefinedError naming what was undefined
        raise RenderError(f"{where} is undefined")
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return str(value)  # drops str subclasses such as Markup
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise RenderError(f"{where} has a non-string key {key!r}; JSON keys are strings")
            out[key] = to_json(item, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [to_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise RenderError(
        f"{where} rendered to a {type(value).__name__}, which is not JSON "
        "(try a filter such as |list or |string)"
    )


class Renderer:
    """Renders template trees in this process, with compiled templates cached by source."""

    def __init__(self, *, max_len: int = DEFAULT_MAX_LEN, cache_size: int = 4_096) -> None:
        self.env = CappedSandbox(max_len=max_len)
        self.compile: Callable[[str], Compiled] = functools.lru_cache(maxsize=cache_size)(
            functools.partial(compile_template, self.env)
        )

        self.linear: Callable[[str], bool] = functools.lru_cache(maxsize=cache_size)(
            functools.partial(is_linear, self.env)
        )

    def all_linear(self, value: Any) -> bool:
        return all(self.linear(text) for _, text in iter_strings(value, ""))

    def render_tree(self, value: Any, variables: dict[str, Any], where: str) -> Any:
        if isinstance(value, str):
            try:
                rendered = self.compile(value)(variables)
                return to_json(rendered, where)
            except RenderError:
                raise
            except MemoryError:
                raise RenderError(f"{where}: template {_short(value)} ran out of memory") from None
            except Exception as exc:  # template errors, sandbox refusals, errors in expressions
                raise RenderError(
                    f"{where}: template {_short(value)} failed: {type(exc).__name__}: {_short_text(exc)}"
                ) from None
        if isinstance(value, dict):
            return {key: self.render_tree(item, variables, f"{where}.{key}") for key, item in value.items()}
        if isinstance(value, list):
            return [self.render_tree(item, variables, f"{where}[{i}]") for i, item in enumerate(value)]
        return copy.deepcopy(value)

    def encode(self, value: Any, *, streaming: bool = True) -> str:
        """JSON text of a rendered value, refused past the cap.

        ``streaming`` counts while encoding (Python's slower encoder), for values a template
        may have multiplied (``[s] * 10**6`` is small in memory, huge as text). Without it,
        the C encoder runs first: only for linear templates, whose output is no bigger than
        data already held plus capped strings.
        """
        if not streaming:
            text = _ENCODER.encode(value)
            if len(text) > self.env.max_len:
                raise RenderError(f"the rendered output is larger than {self.env.max_len} characters")
            return text
        out: list[str] = []
        size = 0
        for chunk in _ENCODER.iterencode(value):
            size += len(chunk)
            if size > self.env.max_len:
                raise RenderError(f"the rendered output is larger than {self.env.max_len} characters")
            out.append(chunk)
        return "".join(out)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _short(source: str, limit: int = 200) -> str:
    return repr(source if len(source) <= limit else source[:limit] + "...")


def _short_text(exc: BaseException, limit: int = 300) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "..."


def iter_strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every (path, string) in a JSON tree, for validation."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from iter_strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from iter_strings(item, f"{where}[{i}]")
