"""Runtime values of mtok's Jinja engine: Undefined, namespace, loop, macro, cycler, joiner.

They behave as jinja2's do where a template can observe it: an :class:`Undefined`
prints as nothing, is false, iterates as empty and has length 0, and any other use
(arithmetic, attribute, item, call, comparison, ``int()``) raises a TemplateError;
``loop`` has ``index``, ``index0``, ``revindex``, ``revindex0``, ``first``, ``last``,
``length``, ``previtem``, ``nextitem``, ``depth``, ``cycle`` and ``changed``; a
``namespace`` prints as ``<Namespace {...}>``.  Strings are ``str``, or the
:class:`~mtok.chat.markup.Markup` that ``|safe``/``|escape`` make (nothing autoescapes,
like transformers' environment, but a Markup escapes what is added to it).
"""

from __future__ import annotations

from typing import Any, Iterator, List

from .errors import TemplateError


class Undefined:
    """A missing value, with what was looked up so that errors can say so."""

    __slots__ = ("_hint", "_kind")

    def __init__(self, hint: str = "value is undefined", kind: str = "undefined"):
        self._hint = hint
        self._kind = kind

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise TemplateError(self._hint, self._kind)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _fail
    __pos__ = __neg__ = __call__ = __getitem__ = _fail
    __lt__ = __le__ = __gt__ = __ge__ = __int__ = __float__ = __complex__ = __pow__ = __rpow__ = _fail

    def __getattr__(self, name: str) -> Any:
        if name[:2] == "__" and name[-2:] == "__":
            raise AttributeError(name)
        return self._fail()

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other)

    def __ne__(self, other: Any) -> bool:
        return type(self) is not type(other)

    def __hash__(self) -> int:
        return id(type(self))

    def __str__(self) -> str:
        return ""

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Undefined"


def undefined_name(name: str) -> Undefined:
    return Undefined(f"{name!r} is undefined")


def _type_repr(obj: Any) -> str:
    if obj is None:
        return "None"
    cls = type(obj)
    return f"{cls.__name__} object" if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__} object"


def undefined_attr(obj: Any, name: Any) -> Undefined:
    if isinstance(name, str):
        return Undefined(f"{_type_repr(obj)!r} has no attribute {name!r}")
    return Undefined(f"{_type_repr(obj)} has no element {name!r}")


def unsafe_attr(obj: Any, name: str) -> Undefined:
    return Undefined(f"access to attribute {name!r} of {type(obj).__name__!r} object is unsafe.", "security")


class Namespace:
    """``namespace(...)``: the one object a template may assign attributes to."""

    __slots__ = ("_attrs",)

    def __init__(*args: Any, **kwargs: Any):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for key in attrs:
            check_namespace_key(key)
        object.__setattr__(self, "_attrs", attrs)

    def __repr__(self) -> str:
        return f"<Namespace {self._attrs!r}>"


def check_namespace_key(key: Any) -> None:
    if isinstance(key, str) and key.startswith("_"):
        raise TemplateError(f"a namespace cannot hold an underscore-prefixed attribute: {key!r}", "security")


class LoopContext:
    """The ``loop`` variable of one ``for`` (the items are a list, so its length is known)."""

    __slots__ = ("_items", "index0", "length", "depth0", "_last_changed", "_recurse")

    def __init__(self, items: List[Any], depth0: int = 0, recurse: Any = None):
        self._items = items
        self.index0 = -1
        self.length = len(items)
        self.depth0 = depth0
        self._last_changed: Any = _NOTHING
        self._recurse = recurse  # a recursive loop's function of its items

    @property
    def index(self) -> int:
        return self.index0 + 1

    @property
    def revindex(self) -> int:
        return self.length - self.index0

    @property
    def revindex0(self) -> int:
        return self.length - self.index0 - 1

    @property
    def first(self) -> bool:
        return self.index0 == 0

    @property
    def last(self) -> bool:
        return self.index0 == self.length - 1

    @property
    def depth(self) -> int:
        return self.depth0 + 1

    @property
    def previtem(self) -> Any:
        if self.index0 == 0:
            return Undefined("there is no previous item")
        return self._items[self.index0 - 1]

    @property
    def nextitem(self) -> Any:
        if self.index0 + 1 >= self.length:
            return Undefined("there is no next item")
        return self._items[self.index0 + 1]

    def cycle(self, *args: Any) -> Any:
        if not args:
            raise TemplateError("no items for cycling given", "type")
        return args[self.index0 % len(args)]

    def changed(self, *value: Any) -> bool:
        if self._last_changed != value:
            self._last_changed = value
            return True
        return False

    def __call__(self, iterable: Any) -> Any:
        if self._recurse is None:
            raise TemplateError("Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.",
                                "type")
        return self._recurse(iterable, self.depth0 + 1)

    def __repr__(self) -> str:
        return f"<LoopContext {self.index}/{self.length}>"


_NOTHING = object()


class Macro:
    """A ``{% macro %}`` (or a ``caller``): called with jinja2's argument rules, returns a string."""

    # What a template may read is what jinja2's Macro shows: name, arguments, catch_kwargs,
    # catch_varargs, caller; the function and the render's budget stay private.
    __slots__ = ("name", "_func", "arguments", "catch_kwargs", "catch_varargs", "caller", "_rt")

    def __init__(self, name: str, func: Any, args: List[str], catch_kwargs: bool, catch_varargs: bool,
                 caller: bool, rt: Any):
        self.name = name
        self._func = func
        self.arguments = tuple(args)
        self.catch_kwargs = catch_kwargs
        self.catch_varargs = catch_varargs
        self.caller = caller
        self._rt = rt

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        n = len(self.arguments)
        values: List[Any] = list(args[:n])
        for name in self.arguments[:len(values)]:
            if name in kwargs:
                raise TemplateError(f"macro {self.name!r} got multiple values for argument {name!r}", "type")
        for name in self.arguments[len(values):]:
            values.append(kwargs.pop(name, _MISSING))
        if self.caller:
            caller = kwargs.pop("caller", None)
            values.append(caller if caller is not None else Undefined("No caller defined"))
        if kwargs and not self.catch_kwargs:
            raise TemplateError(f"macro {self.name!r} takes no keyword argument {next(iter(kwargs))!r}", "type")
        if self.catch_kwargs:
            values.append(kwargs)
        if self.catch_varargs:
            values.append(tuple(args[n:]))
        elif len(args) > n:
            raise TemplateError(f"macro {self.name!r} takes not more than {n} argument(s)", "type")
        rt = self._rt
        rt.depth += 1
        if rt.depth > rt.limits.max_depth:
            raise TemplateError(f"macros nested deeper than {rt.limits.max_depth} calls", "limit")
        try:
            return self._func(*values)
        finally:
            rt.depth -= 1

    def __repr__(self) -> str:
        return f"<Macro {self.name!r}>"


_MISSING = Undefined("missing macro argument")
MISSING = _MISSING


class Cycler:
    """``cycler(a, b, ...)``: ``next()`` walks the items round, ``current`` is the next one."""

    def __init__(self, *items: Any):
        if not items:
            raise TemplateError("at least one item has to be provided", "type")
        self.items = items
        self.pos = 0

    def reset(self) -> None:
        self.pos = 0

    @property
    def current(self) -> Any:
        return self.items[self.pos]

    def next(self) -> Any:
        rv = self.current
        self.pos = (self.pos + 1) % len(self.items)
        return rv


class Joiner:
    """``joiner(sep)``: returns '' the first time it is called, ``sep`` after."""

    def __init__(self, sep: str = ", "):
        self.sep = sep
        self.used = False

    def __call__(self) -> str:
        if not self.used:
            self.used = True
            return ""
        return self.sep
