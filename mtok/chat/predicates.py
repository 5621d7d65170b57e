"""Tests of mtok's Jinja engine (``x is name(args)``), with jinja2's semantics.

``number`` counts booleans (as jinja2's does), ``integer`` does not; ``sequence``
is anything with a length and items; ``defined`` is false only for an Undefined.
"""

from __future__ import annotations

import operator
from collections import abc
from numbers import Number
from typing import Any, Callable, Dict

from .runtime import Undefined


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
TESTS["filter"] = lambda value: value in _filters()
TESTS["test"] = lambda value: value in TESTS


def _filters() -> Dict[str, Any]:
    from .filters import FILTERS

    return FILTERS
