"""The budget's checks of filters and of the globals that build: both backends wrap theirs in them.

A filter is checked by name before it runs, where its arguments say what it would
build or walk (``wordwrap``'s breaks, ``indent``'s width times the lines, ``format``'s
widths, ``replace``'s growth, ``tojson``'s printed size with its indent, ``batch``'s
fill, the items ``sort``/``map``/``join``... walk, ``round``'s ``10 ** precision``,
``int`` of a long digit string), and its result is charged after.  ``strftime_now``
and jinja2's ``lipsum`` are charged for what their arguments ask for.  The estimates
come from :mod:`mtok.chat.guards`.
"""

from __future__ import annotations

import datetime
import functools
import sys
from typing import Any, Callable, Dict, Tuple

from .errors import TemplateError
from .guards import (CONTAINERS, SEQUENCES, arg_of, charge, check_int_bits, compared, printed, printed_size,
                     printf_size, replace_size, width_of)
from .limits import Budget, current
from .markup import escaped_size

_NO_INT_STR_LIMIT = not hasattr(sys, "get_int_max_str_digits")  # Python 3.9/3.10: int('9' * 10**7) is quadratic
INT_STR_DIGITS = 4300  # Python 3.11's default limit on int <-> str conversions, applied on 3.9/3.10 too


def check_int_string(value: Any) -> None:
    """``int('9' * 10**7)`` is quadratic where Python does not limit it (3.9, 3.10): refuse it as 3.11 does."""
    if _NO_INT_STR_LIMIT and isinstance(value, str) and len(value) > INT_STR_DIGITS \
            and len(value.strip().lstrip("+-").replace("_", "")) > INT_STR_DIGITS:
        raise TemplateError(f"an int of more than {INT_STR_DIGITS} digits cannot be read from a string", "limit")


# -- globals -------------------------------------------------------------------------------------
def strftime_now(fmt: Any) -> str:
    """transformers' ``strftime_now``: the time now in ``fmt``; a directive prints at most ~40 characters."""
    if isinstance(fmt, str):
        charge(current(), len(fmt) * 20)
    return datetime.datetime.now().strftime(fmt)


def lipsum(jinja2_lipsum: Callable[..., str]) -> Callable[..., str]:
    """jinja2's ``lipsum(n, html, min, max)``, its ``n`` paragraphs of up to ``max`` words charged first."""

    def budgeted(n: Any = 5, html: bool = True, min: Any = 20, max: Any = 100) -> str:
        if type(n) is int and type(max) is int:
            current().spend(n)
            charge(current(), n * max * 12)
        return jinja2_lipsum(n, html, min, max)

    return functools.update_wrapper(budgeted, jinja2_lipsum)


# -- filters -------------------------------------------------------------------------------------
_SIZED = (str, list, tuple, dict, set, frozenset)
_WALKERS = frozenset(["batch", "dictsort", "groupby", "join", "list", "map", "max", "min", "reject", "rejectattr",
                      "reverse", "select", "selectattr", "slice", "sort", "sum", "unique", "items", "tojson",
                      "pprint", "wordcount"])
_SORTERS = frozenset(["sort", "dictsort", "groupby"])
_COMPARERS = _SORTERS | {"unique", "min", "max"}  # their items are compared or hashed
_STRING_FILTERS = frozenset(["capitalize", "center", "e", "escape", "forceescape", "format", "indent", "lower",
                             "replace", "safe", "string", "title", "trim", "truncate", "upper", "wordcount",
                             "wordwrap", "urlencode", "striptags", "urlize", "xmlattr"])
Check = Callable[[Budget, Any, Tuple[Any, ...], Dict[str, Any]], Any]


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else printed(value)  # a Markup stays one: it escapes what it takes


def _escaped(value: Any, again: bool) -> int:
    """The length of ``escape`` (``again``: ``forceescape``) of ``value``: a Markup's own, else escaped."""
    text = _text_of(value)
    return len(text) if hasattr(text, "__html__") and not again else escaped_size(str(text))


def _lines(s: str) -> int:
    return s.count("\n") + 1


def _wordwrap(budget: Budget, s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    s = _text_of(s)
    width = arg_of(args, kwargs, 0, "width", 79)
    sep = args[2] if len(args) > 2 else kwargs.get("wrapstring")
    breaks = len(s) // max(width, 1) + _lines(s)
    budget.spend(len(s) >> 3)
    charge(budget, len(s) + breaks * (len(sep) if isinstance(sep, str) else 1))
    return None


def _indent(budget: Budget, s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    s = _text_of(s)
    width = args[0] if args else kwargs.get("width", 4)
    per_line = len(width) if isinstance(width, str) else width if type(width) is int else 0
    charge(budget, len(s) + (_lines(s) + 1) * max(per_line, 0))
    return None


def _join_filter(budget: Budget, value: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    items = list(value) if not isinstance(value, (str, dict)) else value
    sep = args[0] if args else kwargs.get("d", "")
    size = len(sep) * len(items) if isinstance(sep, str) else 0
    if not args[1:] and "attribute" not in kwargs:
        size += sum(len(i) if isinstance(i, str) else printed_size(i) if isinstance(i, CONTAINERS) else 32
                    for i in items)
    charge(budget, size)
    return items


def _round(budget: Budget, value: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    precision = arg_of(args, kwargs, 0, "precision", 0)
    method = args[1] if len(args) > 1 else kwargs.get("method", "common")
    if method != "common":
        check_int_bits(abs(precision) * 3.33, f"10 ** {precision}")
    return None


def _sum(budget: Budget, value: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    start = args[1] if len(args) > 1 else kwargs.get("start", 0)
    if isinstance(start, SEQUENCES) and isinstance(value, (list, tuple)):  # each step copies the sum so far
        total = sum(len(i) for i in value if isinstance(i, SEQUENCES)) + len(start)
        charge(budget, total, width_of(start))
        budget.spend(len(value) * total >> 6)
    return None


_FILTER_CHECKS: Dict[str, Check] = {
    "wordwrap": _wordwrap, "indent": _indent, "join": _join_filter, "round": _round, "sum": _sum,
    "center": lambda b, v, a, k: charge(b, max(len(_text_of(v)), arg_of(a, k, 0, "width", 80))),
    "format": lambda b, v, a, k: charge(b, printf_size(_text_of(v), a if a else k)),
    "replace": lambda b, v, a, k: charge(b, replace_size(_text_of(v), tuple(str(x) for x in a[:2]) + a[2:], k)),
    "tojson": lambda b, v, a, k: charge(b, printed_size(v, _json_indent(a, k))),
    "pprint": lambda b, v, a, k: charge(b, printed_size(v, 1)),
    "batch": lambda b, v, a, k: charge(b, arg_of(a, k, 0, "linecount", 1), 8),
    "slice": lambda b, v, a, k: charge(b, arg_of(a, k, 0, "slices", 1), 8),
    "int": lambda b, v, a, k: check_int_string(v),
    "e": lambda b, v, a, k: charge(b, _escaped(v, False)),
    "escape": lambda b, v, a, k: charge(b, _escaped(v, False)),
    "forceescape": lambda b, v, a, k: charge(b, _escaped(v, True)),
}


def _json_indent(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> int:
    indent = args[1] if len(args) > 1 else kwargs.get("indent")
    return len(indent) if isinstance(indent, str) else indent if type(indent) is int and indent > 0 else 0


def guard_filter(name: str, func: Callable[..., Any], offset: int = 0) -> Callable[..., Any]:
    """``func`` (a filter, its value at ``args[offset]``) with its size checked before and its result charged
    after; the wrapper keeps the function's attributes (jinja2's ``pass_*`` markers)."""
    walks, strings, check = name in _WALKERS, name in _STRING_FILTERS, _FILTER_CHECKS.get(name)
    if not (walks or strings or check):
        return functools.update_wrapper(lambda *args, **kwargs: _charged(func(*args, **kwargs)), func)
    sorts, compares = name in _SORTERS, name in _COMPARERS

    def guarded(*args: Any, **kwargs: Any) -> Any:
        if len(args) > offset:
            budget, value = current(), args[offset]
            if walks and isinstance(value, _SIZED):
                n = len(value)
                budget.spend(n * max(n.bit_length() >> 2, 1) if sorts else n)
                if compares:
                    compared(value)
            if strings and isinstance(value, CONTAINERS):
                charge(budget, printed_size(value))
            if check is not None:
                new = check(budget, value, args[offset + 1:], kwargs)
                if new is not None and new is not value:  # an iterable materialized to be measured
                    args = args[:offset] + (new,) + args[offset + 1:]
        return _charged(func(*args, **kwargs))

    return functools.update_wrapper(guarded, func)


def _charged(rv: Any) -> Any:
    """A filter's result, charged to the budget."""
    kind = type(rv)
    if kind is str or isinstance(rv, str):  # a Markup too
        current().charge(len(rv), len(rv))
    elif kind is list or kind is tuple or kind is dict:
        current().charge(len(rv), 8 * len(rv))
    return rv
