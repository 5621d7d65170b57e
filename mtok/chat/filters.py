"""Filters and tests of mtok's Jinja engine, with jinja2's semantics
(``{{ x|name(args) }}``, ``x is name(args)``).

Each filter is ``f(value, *args, **kwargs)``.  They behave as jinja2's built-in
filters do in a non-autoescaping environment: string filters stringify their input
(an Undefined becomes ''), ``first``/``last``/``min``/``max`` of an empty sequence
are Undefined, ``map``/``select``/``reject``/``unique``/``batch`` return iterators
(as jinja2's do), ``default`` replaces only an Undefined unless asked to treat falsy
values so.  ``tojson`` is transformers' (``json.dumps``, ``ensure_ascii=False``, with
``indent``/``separators``/``sort_keys``), not jinja2's HTML-safe one.  ``safe``,
``escape`` and ``forceescape`` return a :class:`~mtok.chat.markup.Markup`, and the
string filters keep one a Markup (jinja2's ``soft_str``); nothing autoescapes.  Each
filter of :data:`FILTERS` is wrapped by :func:`~mtok.chat.filter_guards.guard_filter`: what it
would build is checked against the render's budget first where its arguments say, and
what it built is charged after.

Tests (:data:`TESTS`): ``number`` counts booleans (as jinja2's does), ``integer``
does not; ``sequence`` is anything with a length and items; ``defined`` is false
only for an Undefined.  The two tables are one module because each names the
other (``x is filter``; ``select`` and ``reject`` apply tests).
"""

from __future__ import annotations

import json
import math
import operator
import pprint
import re
import textwrap
from collections import abc, namedtuple
from itertools import chain, groupby
from numbers import Number
from typing import Any, Callable, Dict, Iterator, List, Optional

from .errors import TemplateError
from .markup import Markup, escape
from .runtime import Undefined
from .filter_guards import guard_filter
from .guards import printed
from .sandbox import policy


def _sequence(value: Any) -> bool:
    try:
        len(value)
        value.__getitem__  # noqa: B018 -- having it is the test
    except Exception:
        return False
    return True


def _iterable(value: Any) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


TESTS: Dict[str, Callable[..., bool]] = {
    "odd": lambda value: value % 2 == 1,
    "even": lambda value: value % 2 == 0,
    "divisibleby": lambda value, num: value % num == 0,
    "defined": lambda value: not isinstance(value, Undefined),
    "undefined": lambda value: isinstance(value, Undefined),
    "none": lambda value: value is None,
    "boolean": lambda value: value is True or value is False,
    "false": lambda value: value is False,
    "true": lambda value: value is True,
    "integer": lambda value: isinstance(value, int) and value is not True and value is not False,
    "float": lambda value: isinstance(value, float),
    "lower": lambda value: str(value).islower(),
    "upper": lambda value: str(value).isupper(),
    "string": lambda value: isinstance(value, str),
    "mapping": lambda value: isinstance(value, abc.Mapping),
    "number": lambda value: isinstance(value, Number),
    "sequence": _sequence,
    "iterable": _iterable,
    "callable": callable,
    "sameas": lambda value, other: value is other,
    "escaped": lambda value: hasattr(value, "__html__"),
    "in": lambda value, seq: value in seq,
    "==": operator.eq, "eq": operator.eq, "equalto": operator.eq,
    "!=": operator.ne, "ne": operator.ne,
    ">": operator.gt, "gt": operator.gt, "greaterthan": operator.gt,
    ">=": operator.ge, "ge": operator.ge,
    "<": operator.lt, "lt": operator.lt, "lessthan": operator.lt,
    "<=": operator.le, "le": operator.le,
}
TESTS["filter"] = lambda value: value in FILTERS
TESTS["test"] = lambda value: value in TESTS


_WORD_START = re.compile(r"([-\s({\[<]+)")
_WORD = re.compile(r"\w+")


def _text(value: Any) -> str:
    """A string as it is (a Markup stays one, as jinja2's ``soft_str`` keeps it), else printed."""
    return value if isinstance(value, str) else printed(value)


def _lower_if_str(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _parts(attribute: Any) -> List[Any]:
    if attribute is None:
        return []
    if isinstance(attribute, str):
        return [int(x) if x.isdigit() else x for x in attribute.split(".")]
    return [attribute]


def attrgetter(attribute: Any, postprocess: Optional[Callable] = None, default: Any = None) -> Callable:
    """Looks ``"a.b.0"`` up in an item with the template's item rules (jinja2's make_attrgetter)."""
    parts = _parts(attribute)
    getitem = policy().getitem

    def get(item: Any) -> Any:
        for part in parts:
            item = getitem(item, part)
            if default is not None and isinstance(item, Undefined):
                item = default
        return postprocess(item) if postprocess is not None else item

    return get


def multi_attrgetter(attribute: Any, postprocess: Optional[Callable] = None) -> Callable:
    split = attribute.split(",") if isinstance(attribute, str) else [attribute]
    getters = [attrgetter(a, postprocess) for a in split]
    return lambda item: [g(item) for g in getters]


def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
           sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def do_default(value: Any, default_value: Any = "", boolean: bool = False) -> Any:
    if isinstance(value, Undefined) or (boolean and not value):
        return default_value
    return value


def do_join(value: Any, d: Any = "", attribute: Any = None) -> str:
    if attribute is not None:
        value = map(attrgetter(attribute), value)
    return str(d).join(map(printed, value))


def do_first(seq: Any) -> Any:
    for item in seq:
        return item
    return Undefined("No first item, sequence was empty.")


def do_last(seq: Any) -> Any:
    for item in reversed(seq):
        return item
    return Undefined("No last item, sequence was empty.")


def do_title(s: Any) -> str:
    return "".join(item[0].upper() + item[1:].lower() for item in _WORD_START.split(_text(s)) if item)


def do_replace(s: Any, old: Any, new: Any, count: Optional[int] = None) -> str:
    return str(s).replace(str(old), str(new), -1 if count is None else count)


def do_trim(value: Any, chars: Optional[str] = None) -> str:
    return _text(value).strip(chars)


def do_items(value: Any) -> Iterator[Any]:
    if isinstance(value, Undefined):
        return iter(())
    if not isinstance(value, abc.Mapping):
        raise TemplateError("Can only get item pairs from a mapping.", "type")
    return iter(list(value.items()))


def do_dictsort(value: Any, case_sensitive: bool = False, by: str = "key", reverse: bool = False) -> List[Any]:
    if by not in ("key", "value"):
        raise TemplateError('You can only sort by either "key" or "value"', "type")
    pos = 0 if by == "key" else 1

    def key(item: Any) -> Any:
        return item[pos] if case_sensitive else _lower_if_str(item[pos])

    return sorted(value.items(), key=key, reverse=reverse)


def do_sort(value: Any, reverse: bool = False, case_sensitive: bool = False, attribute: Any = None) -> List[Any]:
    key = multi_attrgetter(attribute, None if case_sensitive else _lower_if_str)
    return sorted(value, key=key, reverse=reverse)


def do_unique(value: Any, case_sensitive: bool = False, attribute: Any = None) -> Iterator[Any]:
    key = attrgetter(attribute, None if case_sensitive else _lower_if_str)
    seen = set()
    for item in value:
        k = key(item)
        if k not in seen:
            seen.add(k)
            yield item


def _min_or_max(value: Any, func: Callable, case_sensitive: bool, attribute: Any) -> Any:
    it = iter(value)
    for first in it:
        key = attrgetter(attribute, None if case_sensitive else _lower_if_str)
        return func(chain([first], it), key=key)
    return Undefined("No aggregated item, sequence was empty.")


def do_min(value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    return _min_or_max(value, min, case_sensitive, attribute)


def do_max(value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    return _min_or_max(value, max, case_sensitive, attribute)


def do_indent(s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> str:
    indention = width if isinstance(width, str) else " " * width
    newline = "\n"
    if isinstance(s, Markup):  # jinja2's: the indent and the newlines are not escaped into a Markup
        indention, newline = Markup(indention), Markup(newline)
    s += newline
    if blank:
        rv = (newline + indention).join(s.splitlines())
    else:
        lines = s.splitlines()
        rv = lines.pop(0)
        if lines:
            rv += newline + newline.join(indention + line if line else line for line in lines)
    return indention + rv if first else rv


def do_truncate(s: Any, length: int = 255, killwords: bool = False, end: str = "...",
                leeway: Optional[int] = None) -> str:
    leeway = 5 if leeway is None else leeway
    if length < len(end) or leeway < 0:
        raise TemplateError("truncate: expected length >= len(end) and leeway >= 0", "type")
    if len(s) <= length + leeway:
        return s
    if killwords:
        return s[: length - len(end)] + end
    return s[: length - len(end)].rsplit(" ", 1)[0] + end


def do_wordwrap(s: Any, width: int = 79, break_long_words: bool = True, wrapstring: Optional[str] = None,
                break_on_hyphens: bool = True) -> str:
    sep = "\n" if wrapstring is None else wrapstring
    return sep.join(sep.join(textwrap.wrap(line, width=width, expand_tabs=False, replace_whitespace=False,
                                           break_long_words=break_long_words, break_on_hyphens=break_on_hyphens))
                    for line in s.splitlines())


def do_int(value: Any, default: int = 0, base: int = 10) -> int:
    try:
        return int(value, base) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def do_float(value: Any, default: float = 0.0) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def do_format(value: Any, *args: Any, **kwargs: Any) -> str:
    if args and kwargs:
        raise TemplateError("can't handle positional and keyword arguments at the same time", "type")
    return _text(value) % (kwargs or args)


def do_batch(value: Any, linecount: int, fill_with: Any = None) -> Iterator[List[Any]]:
    tmp: List[Any] = []
    for item in value:
        if len(tmp) == linecount:
            yield tmp
            tmp = []
        tmp.append(item)
    if tmp:
        if fill_with is not None and len(tmp) < linecount:
            tmp += [fill_with] * (linecount - len(tmp))
        yield tmp


def do_slice(value: Any, slices: int, fill_with: Any = None) -> Iterator[List[Any]]:
    seq = list(value)
    per, extra = divmod(len(seq), slices)
    offset = 0
    for n in range(slices):
        start = offset + n * per
        if n < extra:
            offset += 1
        tmp = seq[start:offset + (n + 1) * per]
        if fill_with is not None and n >= extra:
            tmp.append(fill_with)
        yield tmp


def do_round(value: Any, precision: int = 0, method: str = "common") -> float:
    if method not in ("common", "ceil", "floor"):
        raise TemplateError("method must be common, ceil or floor", "type")
    if method == "common":
        return round(value, precision)
    return getattr(math, method)(value * (10 ** precision)) / (10 ** precision)


class _Group(namedtuple("_Group", ["grouper", "list"])):
    """A ``groupby`` group: ``.grouper`` and ``.list``, printed as a plain tuple (as jinja2's)."""

    __slots__ = ()
    __repr__ = tuple.__repr__
    __str__ = tuple.__str__


def do_groupby(value: Any, attribute: Any, default: Any = None, case_sensitive: bool = False) -> List[Any]:
    key = attrgetter(attribute, None if case_sensitive else _lower_if_str, default)
    out = [(k, list(vs)) for k, vs in groupby(sorted(value, key=key), key)]
    if not case_sensitive:
        real = attrgetter(attribute, default=default)
        out = [(real(vs[0]), vs) for _, vs in out]
    return [_Group(k, vs) for k, vs in out]


def do_sum(iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    if attribute is not None:
        iterable = map(attrgetter(attribute), iterable)
    return sum(iterable, start)


def do_reverse(value: Any) -> Any:
    if isinstance(value, str):
        return value[::-1]
    try:
        return reversed(value)
    except TypeError:
        try:
            rv = list(value)
        except TypeError as exc:
            raise TemplateError("argument must be iterable", "type") from exc
        rv.reverse()
        return rv


def do_attr(obj: Any, name: str) -> Any:
    return policy().attr(obj, name)


def _filter_func(name: str) -> Callable:
    func = FILTERS.get(name)
    if func is None:
        raise TemplateError(f"No filter named {name!r}.", "type")
    return func


def _test_func(name: str) -> Callable:
    func = TESTS.get(name)
    if func is None:
        raise TemplateError(f"No test named {name!r}.", "type")
    return func


def do_map(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    if not value:
        return
    if not args and "attribute" in kwargs:
        attribute = kwargs.pop("attribute")
        default = kwargs.pop("default", None)
        if kwargs:
            raise TemplateError(f"Unexpected keyword argument {next(iter(kwargs))!r}", "type")
        func = attrgetter(attribute, default=default)
    else:
        if not args:
            raise TemplateError("map requires a filter argument", "type")
        name, rest = args[0], args[1:]
        func = lambda item: _filter_func(name)(item, *rest, **kwargs)  # noqa: E731
    for item in value:
        yield func(item)


def _select(value: Any, args: Any, kwargs: Any, keep: bool, lookup_attr: bool) -> Iterator[Any]:
    if not value:
        return
    if lookup_attr:
        if not args:
            raise TemplateError("Missing parameter for attribute name", "type")
        transform = attrgetter(args[0])
        args = args[1:]
    else:
        transform = _identity
    if args:
        name, rest = args[0], args[1:]
        check = lambda item: _test_func(name)(item, *rest, **kwargs)  # noqa: E731
    else:
        check = bool
    for item in value:
        if bool(check(transform(item))) == keep:
            yield item


def _identity(x: Any) -> Any:
    return x


def do_select(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    return _select(value, args, kwargs, True, False)


def do_reject(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    return _select(value, args, kwargs, False, False)


def do_selectattr(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    return _select(value, args, kwargs, True, True)


def do_rejectattr(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    return _select(value, args, kwargs, False, True)


def do_center(value: Any, width: int = 80) -> str:
    return _text(value).center(width)


def do_forceescape(value: Any) -> Markup:
    """``escape`` even of a Markup (its text is escaped again)."""
    return escape(str(value.__html__() if hasattr(value, "__html__") else value))


FILTERS: Dict[str, Callable] = {
    "abs": abs, "attr": do_attr, "batch": do_batch, "capitalize": lambda s: _text(s).capitalize(),
    "center": do_center, "count": len, "d": do_default,
    "default": do_default, "dictsort": do_dictsort, "e": escape, "escape": escape, "first": do_first,
    "float": do_float, "forceescape": do_forceescape, "format": do_format, "groupby": do_groupby, "indent": do_indent,
    "int": do_int, "items": do_items, "join": do_join, "last": do_last, "length": len, "list": list,
    "lower": lambda s: _text(s).lower(), "map": do_map, "max": do_max, "min": do_min,
    "pprint": lambda value: pprint.pformat(value), "reject": do_reject, "rejectattr": do_rejectattr,
    "replace": do_replace, "reverse": do_reverse, "round": do_round, "safe": Markup, "select": do_select,
    "selectattr": do_selectattr, "slice": do_slice, "sort": do_sort, "string": _text,
    "striptags": lambda value: Markup(_text(value)).striptags(), "sum": do_sum,
    "title": do_title, "tojson": tojson, "trim": do_trim, "truncate": do_truncate, "unique": do_unique,
    "upper": lambda s: _text(s).upper(), "wordcount": lambda s: len(_WORD.findall(_text(s))),
    "wordwrap": do_wordwrap,
}

FILTERS = {name: guard_filter(name, func) for name, func in FILTERS.items()}  # each charged to the render's budget
