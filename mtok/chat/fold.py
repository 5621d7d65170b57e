"""Constant folding as jinja2 does it, for the one place where it changes a result: slices.

jinja2's optimizer evaluates constant sub-expressions at compile time (``as_const``),
and there a subscript goes through the sandbox's ``getitem`` (a failure is an
undefined), while at run time a slice is Python's own subscript (``None[1:]`` is an
error).  So ``{{ none[1:] }}`` prints nothing where ``{% set x = none[1:] %}`` fails.
:func:`const_value` evaluates a node as ``as_const`` would (short-circuiting ``and``/
``or``, refusing names, calls and the filters that need a context), raising
:class:`Impossible` where jinja2 would not fold; the compiler uses it only for
expressions that contain a slice.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict

from . import guards
from .sandbox import policy
from .filters import FILTERS, TESTS
from .symbols import expr_children


class Impossible(Exception):
    """jinja2 would not fold this node."""


_CONTEXT_FILTERS = frozenset(["map", "select", "reject", "selectattr", "rejectattr"])
_BINOPS: Dict[str, Callable[[Any, Any], Any]] = {
    "+": guards.add, "-": operator.sub, "*": guards.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": guards.mod, "**": guards.pow_}  # the guarded ones refuse huge values, which jinja2 would build
_COMPARE: Dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "in": lambda a, b: a in b, "not in": lambda a, b: a not in b}


def has_slice(node: Any) -> bool:
    if node.kind == "getitem" and node.arg.kind == "slice":
        return True
    return any(has_slice(child) for child in expr_children(node))


def has_safe_repr(value: Any) -> bool:
    """Whether jinja2 can write the folded value into its generated code (else it evaluates at run time)."""
    if value is None or type(value) in (bool, int, float, complex, range, str):
        return True
    if type(value) in (tuple, list, set, frozenset):
        return all(has_safe_repr(v) for v in value)
    if type(value) is dict:
        return all(has_safe_repr(k) and has_safe_repr(v) for k, v in value.items())
    return False


def const_value(node: Any) -> Any:
    folder = _FOLDERS.get(node.kind)
    if folder is None:
        raise Impossible()
    return folder(node)


def _guarded(func: Callable[[], Any]) -> Any:
    try:
        return func()
    except Impossible:
        raise
    except Exception as exc:  # what jinja2's as_const turns into Impossible
        raise Impossible() from exc


def _compare(node: Any) -> Any:
    result = value = const_value(node.expr)
    for op, operand in node.ops:
        new = const_value(operand)
        result = _guarded(lambda: _COMPARE[op](value, new))  # noqa: B023 -- called at once
        if not result:
            return False
        value = new
    return result


def _call_table(node: Any, table: Dict[str, Callable]) -> Any:
    func = table.get(node.name)
    if func is None or (table is FILTERS and node.name in _CONTEXT_FILTERS) or node.node is None:
        raise Impossible()
    args = [const_value(node.node)] + [const_value(a) for a in node.args]
    kwargs = {k: const_value(v) for k, v in node.kwargs}
    if node.dyn_args is not None:
        args.extend(_guarded(lambda: list(const_value(node.dyn_args))))
    if node.dyn_kwargs is not None:
        kwargs.update(_guarded(lambda: dict(const_value(node.dyn_kwargs))))
    return _guarded(lambda: func(*args, **kwargs))


def _cond(node: Any) -> Any:
    if const_value(node.test):
        return const_value(node.then)
    if node.other is None:
        raise Impossible()
    return const_value(node.other)


def _slice(node: Any) -> Any:
    parts = [const_value(p) if p is not None else None for p in (node.start, node.stop, node.step)]
    return slice(*parts)


_FOLDERS: Dict[str, Callable[[Any], Any]] = {
    "const": lambda n: n.value,
    "tuple": lambda n: tuple(const_value(i) for i in n.items),
    "list": lambda n: [const_value(i) for i in n.items],
    "dict": lambda n: _guarded(lambda: {const_value(k): const_value(v) for k, v in n.items}),
    "getattr": lambda n: _guarded(lambda: policy().getattr(const_value(n.node), n.attr)),
    "getitem": lambda n: _guarded(lambda: policy().getitem(const_value(n.node), const_value(n.arg))),
    "slice": _slice,
    "concat": lambda n: "".join(str(const_value(i)) for i in n.items),
    "compare": _compare,
    "binop": lambda n: _guarded(lambda: _BINOPS[n.op](const_value(n.left), const_value(n.right))),
    "and": lambda n: const_value(n.left) and const_value(n.right),
    "or": lambda n: const_value(n.left) or const_value(n.right),
    "not": lambda n: not const_value(n.node),
    "unary": lambda n: _guarded(lambda: -const_value(n.node) if n.op == "-" else +const_value(n.node)),
    "cond": _cond,
    "filter": lambda n: _call_table(n, FILTERS),
    "test": lambda n: _call_table(n, TESTS),
}
