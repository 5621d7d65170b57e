"""The sandbox of mtok's Jinja engine: the one policy through which a template reaches into values.

A :class:`Sandbox` is to mtok's engine what jinja2's ``ImmutableSandboxedEnvironment``
is to jinja2 (whose rules transformers renders chat templates under): every attribute
and item lookup (``x.name``, ``x[key]``, ``|attr``, the ``attribute=`` of
``map``/``sort``/``groupby``/..., the fields of ``str.format``), every call and every
growing operator of a template goes through one of its methods, so that a subclass can
tighten all of them at once.  Its rules:

* ``x.name`` tries the attribute, then the item; ``x[key]`` the item, then (for a
  string key) the attribute; what is found neither way is an :class:`Undefined`.
* No attribute starting with ``_`` is reachable (so no ``__class__``, ``__globals__``,
  ...), nor ``mro`` of a type, a frame's, code object's or generator's internals, nor
  the methods that mutate a list, dict, set or deque (``append``, ``update``,
  ``pop``...): those give an Undefined that raises a TemplateError of kind
  ``security`` when used.
* ``str.format``/``format_map`` look fields up with these same rules, however the
  method was obtained: it is wrapped when looked up, and again when called.
* Only what the template was given is callable: the globals and filters mtok
  defines, macros, and the public methods of the values in the context; a callable
  marked ``unsafe_callable``/``alters_data`` (jinja2's and Django's markers) is not.

A template is compiled against one policy (``ChatTemplate(..., sandbox=...)``, default
:data:`SANDBOX`): its generated code calls that policy's methods, and the filters reach
it as :func:`policy` while it renders.

Operators and calls that build values charge the render's budget first
(:mod:`mtok.chat.guards`), so a template cannot build past its memory or size limit.
"""

from __future__ import annotations

import string
import threading
import types
from collections import abc, deque
from typing import Any, Callable, Dict, Optional, Tuple

from _string import formatter_field_name_split  # the stdlib's own parser of "a.b[0]"

from . import guards
from .errors import TemplateError
from .limits import current
from .markup import Markup, escape
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


def _is_safe_attribute(obj: Any, attr: str) -> bool:
    """jinja2's ``ImmutableSandboxedEnvironment.is_safe_attribute`` (it depends on the type only)."""
    if attr.startswith("_") or attr in _RUNNER_ATTRS or isinstance(obj, _FRAME_TYPES):
        return False
    if attr == "mro" and isinstance(obj, type):
        return False
    for cls, names in _MUTATORS:
        if attr in names and isinstance(obj, cls):
            return False
    return True


def str_format_of(value: Any) -> Optional[Tuple[str, bool]]:
    """``(the string, is format_map)`` when ``value`` is a bound ``str.format``/``format_map``, else None."""
    if isinstance(value, (types.BuiltinMethodType, types.MethodType)) \
            and getattr(value, "__name__", None) in ("format", "format_map"):
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str):
            return owner, value.__name__ == "format_map"
    return None


class Sandbox:
    """The policy: what a template may look up, call and build.  Subclass it to tighten."""

    def __init__(self) -> None:
        self._safe: Dict[Tuple[type, str], bool] = {}

    def is_safe_attribute(self, obj: Any, attr: str) -> bool:
        key = (type(obj), attr)
        safe = self._safe.get(key)
        if safe is None:
            if len(self._safe) > 4096:  # names can come from data (``x|attr(name)``): keep the cache bounded
                self._safe.clear()
            safe = self._safe[key] = _is_safe_attribute(obj, attr)
        return safe

    def is_safe_callable(self, obj: Any) -> bool:
        return not (getattr(obj, "unsafe_callable", False) or getattr(obj, "alters_data", False))

    def checked(self, obj: Any, name: str, value: Any) -> Any:
        """``value``, found as attribute ``name`` of ``obj``, as a template may have it."""
        fmt = str_format_of(value)
        if fmt is not None:
            return self.format_method(*fmt)
        if self.is_safe_attribute(obj, name):
            return value
        return unsafe_attr(obj, name)

    def getattr(self, obj: Any, name: str) -> Any:
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
        return self.checked(obj, name, value)

    def attr(self, obj: Any, name: Any) -> Any:
        """``obj|attr(name)``: the attribute only, never the item."""
        if type(obj) is Namespace:
            return self.getattr(obj, name)
        try:
            value = getattr(obj, name)
        except AttributeError:
            return Undefined(f"{type(obj).__name__!r} object has no attribute {name!r}")
        return self.checked(obj, name, value)

    def getitem(self, obj: Any, key: Any) -> Any:
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
                    return self.checked(obj, key, value)
        return undefined_attr(obj, key)

    def call(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """A call in a template.  A builtin method of a value: what it builds is charged (and a
        ``str.format`` that reached here unwrapped is sandboxed now).  Anything else (a macro, a global):
        a step of the budget, and refused where jinja2's sandbox refuses it."""
        if type(obj) is types.BuiltinMethodType or _of_markup(obj):
            if not isinstance(obj.__self__, str) or obj.__name__ not in ("format", "format_map"):
                args, charged = guards.before_call(obj, args, kwargs)
                return guards.after_call(obj(*args, **kwargs), charged)
            obj = self.format_method(obj.__self__, obj.__name__ == "format_map")
        current().spend(1)
        if type(obj) is not Macro:
            if not self.is_safe_callable(obj):
                raise TemplateError(f"{obj!r} is not safely callable", "security")
            fmt = str_format_of(obj)  # a str subclass's format
            if fmt is not None:
                obj = self.format_method(*fmt)
        return obj(*args, **kwargs)

    def format_method(self, template: str, is_map: bool) -> Callable[..., str]:
        """``template.format``/``format_map`` whose fields are looked up by this sandbox (escaped into a
        Markup template, as jinja2's sandbox does)."""
        formatter = _EscapingFormatter(self) if isinstance(template, Markup) else _Formatter(self)

        def format_(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs:
                    raise TemplateError("format_map() takes no keyword arguments", "type")
                if len(args) != 1:
                    raise TemplateError(f"format_map() takes exactly one argument ({len(args)} given)", "type")
                args, kwargs = (), args[0]
            return type(template)(formatter.vformat(template, args, kwargs))

        return format_

    # -- the operators that build ----------------------------------------------------------------
    add = staticmethod(guards.add)
    mul = staticmethod(guards.mul)
    pow_ = staticmethod(guards.pow_)
    mod = staticmethod(guards.mod)

    @staticmethod
    def concat(*parts: Any) -> str:
        return guards.concat(parts)

    @staticmethod
    def setns(ns: Any, attr: str, value: Any) -> None:
        """``{% set ns.attr = value %}``: only a namespace takes assignments."""
        if type(ns) is not Namespace:
            raise TemplateError("cannot assign attribute on non-namespace object", "type")
        check_namespace_key(attr)
        ns._attrs[attr] = value


class _Formatter(string.Formatter):
    """``str.format``'s field lookups through the sandbox, and each field charged to the budget."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def format_field(self, value: Any, format_spec: str) -> Any:
        guards.format_field(value, format_spec, current())
        return super().format_field(value, format_spec)

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = self.sandbox.getattr(obj, key) if is_attr else self.sandbox.getitem(obj, key)
        return obj, first


class _EscapingFormatter(_Formatter):
    """``Markup.format``: each field formatted, escaped unless it is HTML already, and charged so."""

    def format_field(self, value: Any, format_spec: str) -> Any:
        if hasattr(value, "__html__") and not format_spec:
            return value.__html__()
        guards.format_field(value, format_spec, current())
        text = string.Formatter.format_field(self, value, format_spec)
        guards.charge(current(), guards.joined_size(Markup(), text))
        return escape(text)


def _of_markup(obj: Any) -> bool:
    """A bound method of a Markup (or ``Markup.escape``): sized and charged as str's methods are."""
    owner = getattr(obj, "__self__", None) if type(obj) is types.MethodType else None
    return isinstance(owner, Markup) or owner is Markup


SANDBOX = Sandbox()  # the policy of the python backend's templates unless one is given
_active = threading.local()


class active:
    """``with active(policy):`` makes ``policy`` the one :func:`policy` gives in this thread (a render's,
    or a compile's folding), and restores the one before."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def __enter__(self) -> Sandbox:
        self.outer = getattr(_active, "sandbox", None)
        _active.sandbox = self.sandbox
        return self.sandbox

    def __exit__(self, *exc: Any) -> None:
        _active.sandbox = self.outer


def policy() -> Sandbox:
    """The sandbox of the render (or compile) running in this thread: what filters look values up with."""
    return getattr(_active, "sandbox", None) or SANDBOX
