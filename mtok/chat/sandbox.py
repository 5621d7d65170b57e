"""The sandbox of mtok's Jinja engine: how a template reaches into values.

The rules are those of jinja2's ``ImmutableSandboxedEnvironment``, which transformers
renders chat templates in:

* ``x.name`` tries the attribute, then the item; ``x[key]`` the item, then (for a
  string key) the attribute; what is found neither way is an :class:`Undefined`.
* No attribute starting with ``_`` is reachable (so no ``__class__``, ``__globals__``,
  ...), nor the methods that mutate a list, dict, set or deque (``append``,
  ``update``, ``pop``...): those give an Undefined that raises a TemplateError of
  kind ``security`` when used.
* ``str.format``/``format_map`` look fields up with these same rules, so a format
  string cannot reach internals either.
* Only what the template was given is callable: the globals and filters mtok defines,
  macros, and the public methods of the values in the context.

Operators that could build a value far past the output limit (``*`` and ``+`` on
strings and lists, ``**``) check the size first (jinja2 would try, and run out of
memory or time).
"""

from __future__ import annotations

import re
import string
import types
from collections import abc, deque
from typing import Any, Tuple

from _string import formatter_field_name_split  # the stdlib's own parser of "a.b[0]"

from .errors import TemplateError
from .limits import MAX_OUTPUT
from .runtime import Macro, Namespace, Undefined, check_namespace_key, undefined_attr, unsafe_attr

_MUTATORS: Tuple[Tuple[Any, frozenset], ...] = (
    (abc.MutableSet, frozenset(["add", "clear", "difference_update", "discard", "pop", "remove",
                                "symmetric_difference_update", "update"])),
    (abc.MutableMapping, frozenset(["clear", "pop", "popitem", "setdefault", "update"])),
    (abc.MutableSequence, frozenset(["append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"])),
    (deque, frozenset(["append", "appendleft", "clear", "extend", "extendleft", "pop", "popleft", "remove",
                       "rotate"])),
)
_DICT_ATTRS = frozenset(dir(dict))
_FRAME_TYPES = (types.CodeType, types.TracebackType, types.FrameType)
_RUNNER_ATTRS = frozenset(["gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_code",
                           "ag_frame"])


def is_safe_attribute(obj: Any, attr: str) -> bool:
    """jinja2's ``ImmutableSandboxedEnvironment.is_safe_attribute`` (it depends on the type only)."""
    key = (type(obj), attr)
    safe = _SAFE.get(key)
    if safe is None:
        if len(_SAFE) > 4096:  # names can come from data (``x|attr(name)``): keep the cache bounded
            _SAFE.clear()
        safe = _SAFE[key] = _is_safe_attribute(obj, attr)
    return safe


_SAFE: dict = {}


def _is_safe_attribute(obj: Any, attr: str) -> bool:
    if attr.startswith("_") or attr in _RUNNER_ATTRS or isinstance(obj, _FRAME_TYPES):
        return False
    if attr == "mro" and isinstance(obj, type):
        return False
    for cls, names in _MUTATORS:
        if attr in names and isinstance(obj, cls):
            return False
    return True


def _checked(obj: Any, name: str, value: Any) -> Any:
    if isinstance(value, (types.BuiltinMethodType, types.MethodType)) and name in ("format", "format_map") \
            and isinstance(getattr(value, "__self__", None), str):
        return _sandboxed_format(value.__self__, name == "format_map")
    if is_safe_attribute(obj, name):
        return value
    return unsafe_attr(obj, name)


def getattr_(obj: Any, name: str) -> Any:
    """``obj.name`` in a template."""
    if type(obj) is dict and name not in _DICT_ATTRS:
        try:
            return obj[name]
        except KeyError:
            return undefined_attr(obj, name)
    if type(obj) is Namespace:
        attrs = obj._attrs
        return attrs[name] if name in attrs else undefined_attr(obj, name)
    if type(obj) is Undefined:  # only its real (dunder) attributes exist, and they are unsafe
        return unsafe_attr(obj, name) if name[:2] == "__" and hasattr(obj, name) else obj._fail()
    try:
        value = getattr(obj, name)
    except AttributeError:
        try:
            return obj[name]
        except (TypeError, LookupError):
            return undefined_attr(obj, name)
    return _checked(obj, name, value)


def getitem(obj: Any, key: Any) -> Any:
    """``obj[key]`` in a template."""
    try:
        return obj[key]
    except (TypeError, LookupError):
        if type(obj) is Namespace:
            return obj._attrs[key] if key in obj._attrs else undefined_attr(obj, key)
        if isinstance(key, str):
            try:
                value = getattr(obj, key)
            except AttributeError:
                pass
            else:
                return _checked(obj, key, value)
    return undefined_attr(obj, key)


class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> Any:
        if any(len(n) > 7 and int(n) > MAX_OUTPUT for n in re.findall(r"\d+", format_spec)):
            raise _too_big(max(int(n) for n in re.findall(r"\d+", format_spec)))
        return super().format_field(value, format_spec)

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = getattr_(obj, key) if is_attr else getitem(obj, key)
        return obj, first


def _sandboxed_format(template: str, is_map: bool) -> Any:
    formatter = _Formatter()

    def format_(*args: Any, **kwargs: Any) -> str:
        if is_map:
            if kwargs:
                raise TemplateError("format_map() takes no keyword arguments", "type")
            if len(args) != 1:
                raise TemplateError(f"format_map() takes exactly one argument ({len(args)} given)", "type")
            args, kwargs = (), args[0]
        return formatter.vformat(template, args, kwargs)

    return format_


def _too_big(n: int) -> TemplateError:
    return TemplateError(f"the template built a value of {n} items, over the limit of {MAX_OUTPUT}", "limit")


def mul(a: Any, b: Any) -> Any:
    """``a * b``, refusing to build a string or list past the output limit."""
    if isinstance(a, (str, list, tuple)) and isinstance(b, int) and len(a) * b > MAX_OUTPUT:
        raise _too_big(len(a) * b)
    if isinstance(b, (str, list, tuple)) and isinstance(a, int) and len(b) * a > MAX_OUTPUT:
        raise _too_big(len(b) * a)
    return a * b


def add(a: Any, b: Any) -> Any:
    rv = a + b
    if isinstance(rv, (str, list, tuple)) and len(rv) > MAX_OUTPUT:
        raise _too_big(len(rv))
    return rv


def pow_(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and b > 4096:
        raise TemplateError(f"{a} ** {b} is too large to compute", "limit")
    return a ** b


_PRINTF_SIZES = re.compile(r"%[-+ #0(]*(?:\(\w*\))?[-+ #0]*(\d*)(?:\.(\d*))?")


def check_printf(fmt: str) -> None:
    """Refuse a printf-style format whose width or precision alone passes the output limit."""
    for width, precision in _PRINTF_SIZES.findall(fmt):
        for n in (width, precision):
            if n and len(n) > 7 and int(n) > MAX_OUTPUT:
                raise _too_big(int(n))


def mod(a: Any, b: Any) -> Any:
    if isinstance(a, str):
        check_printf(a)
    return a % b


def concat(*parts: Any) -> str:
    rv = "".join([p if type(p) is str else str(p) for p in parts])
    if len(rv) > MAX_OUTPUT:
        raise _too_big(len(rv))
    return rv


def setns(ns: Any, attr: str, value: Any) -> None:
    """``{% set ns.attr = value %}``: only a namespace takes assignments."""
    if type(ns) is not Namespace:
        raise TemplateError("cannot assign attribute on non-namespace object", "type")
    check_namespace_key(attr)
    ns._attrs[attr] = value


def check_str_growth(text: str, name: str, args: Any) -> None:
    """Refuse str methods that would build a string past the output limit (``'x'.ljust(10**9)``,
    ``s.replace('x', big)``) before Python allocates it."""
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        grows = len(args[1]) - len(args[0])
        if grows > 0 and len(text) + text.count(args[0]) * grows > MAX_OUTPUT:
            raise _too_big(len(text) + text.count(args[0]) * grows)
    elif any(isinstance(a, int) and a > MAX_OUTPUT for a in args) and name in _WIDTH_METHODS:
        raise _too_big(max(a for a in args if isinstance(a, int)))


_WIDTH_METHODS = frozenset(["center", "ljust", "rjust", "zfill", "expandtabs"])


def call(obj: Any, *args: Any, **kwargs: Any) -> Any:
    """A call in a template: refuses what jinja2's sandbox refuses."""
    if type(obj) in _PLAIN_CALLABLES:
        if type(getattr(obj, "__self__", None)) is str:
            check_str_growth(obj.__self__, obj.__name__, args)
        return obj(*args, **kwargs)
    if getattr(obj, "unsafe_callable", False) or getattr(obj, "alters_data", False):
        raise TemplateError(f"{obj!r} is not safely callable", "security")
    return obj(*args, **kwargs)


_PLAIN_CALLABLES = (types.BuiltinMethodType, types.BuiltinFunctionType, Macro)
