"""What an operation of a template would build, known before it runs; both backends' budget checks.

A render's :class:`~mtok.chat.limits.Budget` is charged for every string, list, bytes
or int a template builds.  Charging the result after the fact is not enough where one
C-level operation can build gigabytes (``'x' * 10**10``, ``s.center(10**10)``,
``'%*d' % (10**10, 1)``, ``9**(4096**2)``, ``tojson`` of a list nested 40 levels deep
with every level holding the one below twice), so this module estimates the size of
such operations from their operands and charges it first; what it cannot estimate it
charges after.  The estimates are upper bounds, or close to them.  The same functions
serve the ``python`` backend's sandbox and the ``jinja2`` backend's environment, so
both refuse the same things.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from typing import Any, Callable, Dict, List, Tuple

from .errors import TemplateError
from .limits import MAX_INT_BITS, Budget, current
from .limits import _local  # the thread's budget, read inline where it is read most

_SEQUENCES = (str, bytes, bytearray, list, tuple)
_CONTAINERS = (list, tuple, dict, set, frozenset)
_NO_INT_STR_LIMIT = not hasattr(sys, "get_int_max_str_digits")  # Python 3.9/3.10: int('9' * 10**7) is quadratic
INT_STR_DIGITS = 4300  # Python 3.11's default limit on int <-> str conversions, applied on 3.9/3.10 too
_QUADRATIC_SEARCH = sys.version_info < (3, 10)  # 3.9 searches a long needle in O(len(haystack) * len(needle))
_SEARCHES = frozenset(["count", "find", "index", "rfind", "rindex", "split", "rsplit", "partition", "rpartition",
                       "replace"])


def size_of(value: Any) -> Tuple[int, int]:
    """The items (characters, bytes, elements) of ``value`` and what building it costs the memory budget
    (characters and bytes 1, elements 8, ints their bytes)."""
    kind = type(value)
    if kind is str or kind is bytes or kind is bytearray:
        return len(value), len(value)
    if kind in _CONTAINERS:
        return len(value), 8 * len(value)
    if kind is int:
        return 0, value.bit_length() >> 3
    return 0, 0


def charge(budget: Budget, items: int, width: int = 1) -> None:
    """``items`` characters (width 1) or elements (width 8) about to be built."""
    budget.charge(items, items * width)


def check_int_bits(bits: float, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateError(f"{what} would be an int of about {int(bits)} bits, over the limit of {MAX_INT_BITS}",
                            "limit")


def _width(value: Any) -> int:
    return 8 if isinstance(value, (list, tuple)) else 1


def add(a: Any, b: Any) -> Any:
    """``a + b``: two strings or sequences charged before they are joined."""
    if type(a) is str and type(b) is str:  # the common case, first, and inlined: templates do it most
        n = len(a) + len(b)
        budget = getattr(_local, "budget", None) or current()
        budget.memory += n
        if n > budget.max_value or budget.memory > budget.max_memory:
            budget.charge(n, 0)
    elif isinstance(a, _SEQUENCES) and isinstance(b, _SEQUENCES):
        charge(current(), len(a) + len(b), _width(a))
    return a + b


def mul(a: Any, b: Any) -> Any:
    """``a * b``: a repeated sequence charged, an int product's bits checked, before it is computed."""
    if isinstance(b, _SEQUENCES) and isinstance(a, int):
        a, b = b, a
    if isinstance(a, _SEQUENCES) and isinstance(b, int):
        charge(current(), len(a) * max(b, 0), _width(a))
    elif isinstance(a, int) and isinstance(b, int):
        check_int_bits(a.bit_length() + b.bit_length(), "a product")
    return a * b


def pow_(a: Any, b: Any) -> Any:
    """``a ** b``: an int power's bits estimated (``b * log2(a)``) before it is computed."""
    if type(a) is int and type(b) is int and b > 0 and abs(a) > 1:
        check_int_bits(b * math.log2(abs(a)), f"{a.bit_length()}-bit int ** {b}")
    return a ** b


def mod(a: Any, b: Any) -> Any:
    """``a % b``: a printf-style format's result bounded (widths, ``*`` ones too) before it is built."""
    if isinstance(a, str):
        charge(current(), printf_size(a, b))
    return a % b


BINOPS: Dict[str, Callable[[Any, Any], Any]] = {"+": add, "*": mul, "**": pow_, "%": mod}


def concat(parts: Any) -> str:
    """``a ~ b ~ ...``: every part as a string, joined."""
    budget = current()
    texts = [p if type(p) is str else printed(p) for p in parts]
    charge(budget, sum(map(len, texts)))
    return "".join(texts)


# -- printing ----------------------------------------------------------------------------------
def _holds_values(value: Any) -> bool:
    """A container, or a namespace (which prints its attributes)."""
    return isinstance(value, _CONTAINERS) or _namespace_attrs(value) is not None


def _namespace_attrs(value: Any) -> Any:
    """The attributes of a ``namespace()`` of either backend, else None."""
    if not type(value).__name__.endswith("Namespace"):
        return None
    attrs = getattr(value, "_attrs", None)  # mtok's; jinja2's keeps them name-mangled
    return attrs if isinstance(attrs, dict) else getattr(value, "_Namespace__attrs", None)


def measured(value: Any) -> Any:
    """``value``, about to be printed: a container is measured first (``str`` of a list whose levels
    hold the level below twice is exponential in its depth)."""
    if _holds_values(value):
        charge(current(), printed_size(value))
    return value


def printed(value: Any) -> str:
    """``str(value)``, as ``{{ value }}`` prints it, measured first."""
    return value if type(value) is str else str(measured(value))


def compared(value: Any) -> Any:
    """``value``, about to be compared, sorted or hashed: a container is walked first (comparing two
    lists whose levels hold the level below twice is as exponential as printing them)."""
    if _holds_values(value):
        printed_size(value)
    return value


def plain_comparison(operands: List[Any], is_scalar: Callable[[Any], bool]) -> bool:
    """Whether a comparison needs no walk: two operands, one a constant that is no container (a container
    compared with ``'user'`` or ``none`` is told apart at once)."""
    return len(operands) == 2 and any(is_scalar(o) for o in operands)


def printed_size(value: Any, indent: int = 0) -> int:
    """About how long ``str``/``json.dumps`` (with ``indent``) of ``value`` is.  The walk goes level by
    level, a step per value it visits; it stops with a limit error as soon as the size (or the next
    level's width) passes the per-value limit, so it is bounded however the containers share items."""
    budget = current()
    cap = budget.max_value
    total, depth, level = 0, 0, [value]
    while level:
        below: List[Any] = []
        for item in level:
            kind = type(item)
            if kind is str:
                total += len(item)
            elif kind is dict:
                below.extend(item.keys())
                below.extend(item.values())
            elif kind is list or kind is tuple or kind is set or kind is frozenset:
                below.extend(item)
            elif kind is int:
                total += item.bit_length() // 3
            elif kind is bytes:
                total += len(item)
            else:
                attrs = _namespace_attrs(item)
                if attrs is not None:
                    below.append(attrs)
                total += 24
        total += len(level) * (2 + indent * depth)
        budget.spend(len(level))
        if total > cap or len(below) > cap:
            charge(budget, max(total, len(below)))
        level, depth = below, depth + 1
    return total


_PRINTF = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)")


def printf_size(fmt: str, args: Any) -> int:
    """An upper bound of ``len(fmt % args)``: the format, its widths and precisions (``*`` ones read from
    ``args``), and every argument printed."""
    values = list(args) if isinstance(args, tuple) else [args]
    numbers = list(values)
    total = len(fmt)
    for width, precision, _ in _PRINTF.findall(fmt):
        for n in (width, precision):
            if n == "*":
                star = numbers.pop(0) if numbers else 0
                total += star if type(star) is int and star > 0 else 0
            elif n:
                total += int(n) if len(n) < 19 else 1 << 62
    mapping = values[0] if len(values) == 1 and isinstance(values[0], dict) else None
    for value in (mapping.values() if mapping is not None else values):
        total += printed_size(value) if isinstance(value, _CONTAINERS) else len(value) if isinstance(value, str) \
            else 32
    return total


def format_field(value: Any, spec: str, budget: Budget) -> None:
    """One ``{field:spec}`` of ``str.format``: its width and precision, and the value printed."""
    sizes = [int(n) if len(n) < 19 else 1 << 62 for n in re.findall(r"\d+", spec)]
    charge(budget, sum(sizes) + (printed_size(value) if isinstance(value, _CONTAINERS) else size_of(value)[0]))


# -- calls of builtin methods --------------------------------------------------------------------
def _join(s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Tuple[Any, ...], int]:
    items = list(args[0]) if args else []
    size = sum(len(i) if isinstance(i, (str, bytes)) else 0 for i in items) + len(s) * max(len(items) - 1, 0)
    return (items,) + args[1:], size


def _arg(args: Tuple[Any, ...], kwargs: Dict[str, Any], i: int, name: str, default: Any) -> Any:
    value = args[i] if len(args) > i else kwargs.get(name, default)
    return value if type(value) is int else default


def _replace(s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> int:
    if len(args) < 2 or type(args[0]) is not type(s) or type(args[1]) is not type(s):
        return len(s)
    count = s.count(args[0])
    limit = _arg(args, kwargs, 2, "count", -1)
    if limit >= 0:
        count = min(count, limit)
    return len(s) + count * max(len(args[1]) - len(args[0]), 0)


def _translate(s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> int:
    table = args[0] if args else None
    if isinstance(table, dict):
        longest = max([len(v) for v in table.values() if isinstance(v, str)] or [1])
        return len(s) * max(longest, 1)
    return len(s)


_SIZES: Dict[str, Callable[[Any, Tuple[Any, ...], Dict[str, Any]], int]] = {
    "center": lambda s, a, k: max(len(s), _arg(a, k, 0, "width", 0)),
    "ljust": lambda s, a, k: max(len(s), _arg(a, k, 0, "width", 0)),
    "rjust": lambda s, a, k: max(len(s), _arg(a, k, 0, "width", 0)),
    "zfill": lambda s, a, k: max(len(s), _arg(a, k, 0, "width", 0)),
    "expandtabs": lambda s, a, k: len(s) + s.count("\t" if isinstance(s, str) else b"\t")
    * max(_arg(a, k, 0, "tabsize", 8), 0),
    "replace": _replace, "translate": _translate, "encode": lambda s, a, k: 4 * len(s),
}


def before_call(func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Tuple[Any, ...], bool]:
    """Charges what a call of a builtin method would build where its arguments say so; returns the
    arguments to call with (an iterable to ``join`` becomes a list) and whether it charged."""
    owner = getattr(func, "__self__", None)
    kind = type(owner)
    if kind is int and getattr(func, "__name__", "") == "to_bytes":
        charge(current(), _arg(args, kwargs, 0, "length", 1))
        return args, True
    if kind is not str and kind is not bytes:
        return args, False
    name = func.__name__
    if _QUADRATIC_SEARCH and name in _SEARCHES and args and type(args[0]) is kind:
        current().spend(len(owner) * len(args[0]) >> 10)  # its worst case, a step per 1024 comparisons
    if name == "join":
        args, size = _join(owner, args, kwargs)
        charge(current(), size)
        return args, True
    estimate = _SIZES.get(name)
    if estimate is None:
        return args, False
    charge(current(), estimate(owner, args, kwargs))
    return args, True


def after_call(rv: Any, charged: bool) -> Any:
    """Charges the result of a call whose size was not known before."""
    if not charged:
        items, nbytes = size_of(rv)
        if nbytes:
            current().charge(items, nbytes)
    return rv


def check_int_string(value: Any) -> None:
    """``int('9' * 10**7)`` is quadratic where Python does not limit it (3.9, 3.10): refuse it as 3.11 does."""
    if _NO_INT_STR_LIMIT and isinstance(value, str) and len(value) > INT_STR_DIGITS \
            and len(value.strip().lstrip("+-").replace("_", "")) > INT_STR_DIGITS:
        raise TemplateError(f"an int of more than {INT_STR_DIGITS} digits cannot be read from a string", "limit")


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
    return value if type(value) is str else printed(value)


def _lines(s: str) -> int:
    return s.count("\n") + 1


def _wordwrap(budget: Budget, s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    s = _text_of(s)
    width = _arg(args, kwargs, 0, "width", 79)
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
        size += sum(len(i) if isinstance(i, str) else printed_size(i) if isinstance(i, _CONTAINERS) else 32
                    for i in items)
    charge(budget, size)
    return items


def _round(budget: Budget, value: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    precision = _arg(args, kwargs, 0, "precision", 0)
    method = args[1] if len(args) > 1 else kwargs.get("method", "common")
    if method != "common":
        check_int_bits(abs(precision) * 3.33, f"10 ** {precision}")
    return None


def _sum(budget: Budget, value: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    start = args[1] if len(args) > 1 else kwargs.get("start", 0)
    if isinstance(start, _SEQUENCES) and isinstance(value, (list, tuple)):  # each step copies the sum so far
        total = sum(len(i) for i in value if isinstance(i, _SEQUENCES)) + len(start)
        charge(budget, total, _width(start))
        budget.spend(len(value) * total >> 6)
    return None


_FILTER_CHECKS: Dict[str, Check] = {
    "wordwrap": _wordwrap, "indent": _indent, "join": _join_filter, "round": _round, "sum": _sum,
    "center": lambda b, v, a, k: charge(b, max(len(_text_of(v)), _arg(a, k, 0, "width", 80))),
    "format": lambda b, v, a, k: charge(b, printf_size(_text_of(v), a if a else k)),
    "replace": lambda b, v, a, k: charge(b, _replace(_text_of(v), tuple(str(x) for x in a[:2]) + a[2:], k)),
    "tojson": lambda b, v, a, k: charge(b, printed_size(v, _json_indent(a, k))),
    "pprint": lambda b, v, a, k: charge(b, printed_size(v, 1)),
    "batch": lambda b, v, a, k: charge(b, _arg(a, k, 0, "linecount", 1), 8),
    "slice": lambda b, v, a, k: charge(b, _arg(a, k, 0, "slices", 1), 8),
    "int": lambda b, v, a, k: check_int_string(v),
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
            if strings and isinstance(value, _CONTAINERS):
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
    if kind is str:
        current().charge(len(rv), len(rv))
    elif kind is list or kind is tuple or kind is dict:
        current().charge(len(rv), 8 * len(rv))
    return rv
