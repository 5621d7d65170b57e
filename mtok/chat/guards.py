"""What an operation of a template would build, known before it runs; both backends' budget checks.

A render's :class:`~mtok.chat.limits.Budget` is charged for every string, list, bytes
or int a template builds.  Charging the result after the fact is not enough where one
C-level operation can build gigabytes (``'x' * 10**10``, ``s.center(10**10)``,
``'%*d' % (10**10, 1)``, ``9**(4096**2)``, ``tojson`` of a list nested 40 levels deep
with every level holding the one below twice), so this module estimates the size of
such operations from their operands and charges it first; what it cannot estimate it
charges after.  The estimates are upper bounds, or close to them.  The same functions
serve the ``python`` backend's sandbox and the ``jinja2`` backend's environment, so
both refuse the same things; the filters' own checks are in :mod:`mtok.chat.filter_guards`.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, Callable, Dict, List, Tuple

from .errors import TemplateError
from .limits import MAX_INT_BITS, Budget, current
from .limits import _local  # the thread's budget, read inline where it is read most
from .markup import escaped_size

SEQUENCES = (str, bytes, bytearray, list, tuple)
CONTAINERS = (list, tuple, dict, set, frozenset)
_QUADRATIC_SEARCH = sys.version_info < (3, 10)  # 3.9 searches a long needle in O(len(haystack) * len(needle))
_SEARCHES = frozenset(["count", "find", "index", "rfind", "rindex", "split", "rsplit", "partition", "rpartition",
                       "replace"])


def size_of(value: Any) -> Tuple[int, int]:
    """The items (characters, bytes, elements) of ``value`` and what building it costs the memory budget
    (characters and bytes 1, elements 8, ints their bytes)."""
    kind = type(value)
    if kind is str or kind is bytes or kind is bytearray:
        return len(value), len(value)
    if kind in CONTAINERS:
        return len(value), 8 * len(value)
    if kind is int:
        return 0, value.bit_length() >> 3
    if isinstance(value, str):  # a Markup (either backend's)
        return len(value), len(value)
    return 0, 0


def _html(value: Any) -> bool:
    return hasattr(type(value), "__html__")


def joined_size(a: Any, b: Any) -> int:
    """``len(a + b)`` of two strings, either maybe a Markup: the other side is escaped into it."""
    if _html(a) != _html(b):
        return len(a) + escaped_size(b) if _html(a) else escaped_size(a) + len(b)
    return len(a) + len(b)


def charge(budget: Budget, items: int, width: int = 1) -> None:
    """``items`` characters (width 1) or elements (width 8) about to be built."""
    budget.charge(items, items * width)


def check_int_bits(bits: float, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateError(f"{what} would be an int of about {int(bits)} bits, over the limit of {MAX_INT_BITS}",
                            "limit")


def width_of(value: Any) -> int:
    return 8 if isinstance(value, (list, tuple)) else 1


def add(a: Any, b: Any) -> Any:
    """``a + b``: two strings or sequences charged before they are joined."""
    if type(a) is str and type(b) is str:  # the common case, first, and inlined: templates do it most
        n = len(a) + len(b)
        budget = getattr(_local, "budget", None) or current()
        budget.memory += n
        if n > budget.max_value or budget.memory > budget.max_memory:
            budget.charge(n, 0)
    elif isinstance(a, str) and isinstance(b, str):
        charge(current(), joined_size(a, b))
    elif isinstance(a, SEQUENCES) and isinstance(b, SEQUENCES):
        charge(current(), len(a) + len(b), width_of(a))
    return a + b


def mul(a: Any, b: Any) -> Any:
    """``a * b``: a repeated sequence charged, an int product's bits checked, before it is computed."""
    if isinstance(b, SEQUENCES) and isinstance(a, int):
        a, b = b, a
    if isinstance(a, SEQUENCES) and isinstance(b, int):
        charge(current(), len(a) * max(b, 0), width_of(a))
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
    return isinstance(value, CONTAINERS) or _namespace_attrs(value) is not None


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
            elif kind is bytes or isinstance(item, str):  # a Markup counts as its text
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
    ``args``), and every argument printed (escaped, where ``fmt`` is a Markup)."""
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
    grows = 5 if _html(fmt) else 1
    for value in (mapping.values() if mapping is not None else values):
        if isinstance(value, str):
            total += escaped_size(value) if grows > 1 and not _html(value) else len(value)
        else:
            total += grows * (printed_size(value) if isinstance(value, CONTAINERS) else 32)
    return total


def format_field(value: Any, spec: str, budget: Budget) -> None:
    """One ``{field:spec}`` of ``str.format``: its width and precision, and the value printed."""
    sizes = [int(n) if len(n) < 19 else 1 << 62 for n in re.findall(r"\d+", spec)]
    charge(budget, sum(sizes) + (printed_size(value) if isinstance(value, CONTAINERS) else size_of(value)[0]))


# -- calls of builtin methods --------------------------------------------------------------------
def _join(s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Tuple[Any, ...], int]:
    items = list(args[0]) if args else []
    size = len(s) * max(len(items) - 1, 0)
    if _html(s):  # Markup.join escapes each item, whatever it is
        size += sum(escaped_size(i) if isinstance(i, str) and not _html(i) else len(i) if isinstance(i, str)
                    else printed_size(i) * 5 for i in items)
    else:
        size += sum(len(i) if isinstance(i, (str, bytes)) else 0 for i in items)
    return (items,) + args[1:], size


def arg_of(args: Tuple[Any, ...], kwargs: Dict[str, Any], i: int, name: str, default: Any) -> Any:
    value = args[i] if len(args) > i else kwargs.get(name, default)
    return value if type(value) is int else default


def replace_size(s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> int:
    kind = str if isinstance(s, str) else type(s)
    if len(args) < 2 or not isinstance(args[0], kind) or not isinstance(args[1], kind):
        return len(s)
    new = escaped_size(args[1]) if _html(s) and not _html(args[1]) else len(args[1])  # Markup escapes it
    count = s.count(args[0])
    limit = arg_of(args, kwargs, 2, "count", -1)
    if limit >= 0:
        count = min(count, limit)
    return len(s) + count * max(new - len(args[0]), 0)


def _translate(s: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> int:
    table = args[0] if args else None
    if isinstance(table, dict):
        longest = max([len(v) for v in table.values() if isinstance(v, str)] or [1])
        return len(s) * max(longest, 1)
    return len(s)


_SIZES: Dict[str, Callable[[Any, Tuple[Any, ...], Dict[str, Any]], int]] = {
    "center": lambda s, a, k: max(len(s), arg_of(a, k, 0, "width", 0)),
    "ljust": lambda s, a, k: max(len(s), arg_of(a, k, 0, "width", 0)),
    "rjust": lambda s, a, k: max(len(s), arg_of(a, k, 0, "width", 0)),
    "zfill": lambda s, a, k: max(len(s), arg_of(a, k, 0, "width", 0)),
    "expandtabs": lambda s, a, k: len(s) + s.count("\t" if isinstance(s, str) else b"\t")
    * max(arg_of(a, k, 0, "tabsize", 8), 0),
    "replace": replace_size, "translate": _translate, "encode": lambda s, a, k: 4 * len(s),
}


def before_call(func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Tuple[Any, ...], bool]:
    """Charges what a call of a builtin method would build where its arguments say so; returns the
    arguments to call with (an iterable to ``join`` becomes a list) and whether it charged."""
    owner = getattr(func, "__self__", None)
    kind = type(owner)
    if kind is int and getattr(func, "__name__", "") == "to_bytes":
        charge(current(), arg_of(args, kwargs, 0, "length", 1))
        return args, True
    if kind is not str and kind is not bytes:
        if not isinstance(owner, str):
            return args, False
        kind = str  # a Markup's method: str's, its result a Markup (sized as str's, escaping counted)
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
