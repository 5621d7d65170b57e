"""Checking request bodies: every field's type, range and company.

Everything here raises :class:`APIError`, which the HTTP layer turns into a
4xx with a JSON body ``{"error": {"message", "type", "code", "param"}}``.
Booleans are not integers here, NaN is not a number, a huge integer is not a
finite number, and a string holding a lone surrogate is not text.  Which
fields exist, and what mtok does with each, is :mod:`mtok.fields`' business.
This module sits at the bottom of the package, beside the settings table: the
HTTP transport, the managers and the routes all refuse with an ``APIError``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, List, Optional, Sequence


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    411: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    499: "request_aborted",
    500: "server_error",
    501: "invalid_request_error",
    503: "service_unavailable_error",
}


class APIError(Exception):
    def __init__(self, message: str, status: int = 400, param: Optional[str] = None, headers=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.headers: Dict[str, str] = dict(headers or {})

    def body(self) -> Dict[str, Any]:
        err: Dict[str, Any] = {"message": self.message, "type": ERROR_TYPES.get(self.status, "error"), "code": self.status}
        if self.param is not None:
            err["param"] = self.param
        return {"error": err}


def bad(message: str, param: Optional[str] = None) -> APIError:
    return APIError(message, 400, param)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # NaN and Infinity are not JSON


def parse_json(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad(f"request body is not valid UTF-8 (byte {e.start})") from None
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise bad("request body is nested too deeply") from None
    except ValueError as e:
        raise bad(f"request body is not valid JSON: {e}") from None
    if _SURROGATE_ESCAPE.search(text):  # rare: only then walk the value (~1 us per 2 KB otherwise)
        check_text(value)
    return value


# A \uD800-\uDFFF escape; JSON decodes a lone one into a str that cannot be encoded.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def check_text(value: Any, where: str = "") -> None:
    """Refuse strings that are not valid Unicode text (a lone surrogate), anywhere in ``value``."""
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as e:
                where = f"'{path}' " if path else "a string "
                raise bad(f"{where}holds a lone surrogate (U+{ord(item[e.start]):04X}); "
                          "strings must be valid Unicode text", path or None) from None
        elif isinstance(item, dict):
            for k, x in item.items():
                stack.append((k, path))
                stack.append((x, f"{path}.{k}" if path else str(k)))
        elif isinstance(item, list):
            stack.extend((x, path) for x in item)


def show(value: Any, limit: int = 40) -> str:
    """A value for an error message, cut short: a client's huge value is not echoed back."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def require_object(body: Any) -> Dict[str, Any]:
    if not isinstance(body, dict):
        raise bad(f"request body must be a JSON object, not {_json_type(body)}")
    return body


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def check_unknown(body: Dict[str, Any], known: Sequence[str], where: str = "") -> None:
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise bad(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}{where}", unknown[0])


def as_bool(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise bad(f"'{name}' must be a boolean, not {_json_type(v)}", name)
    return v


def as_int(v: Any, name: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(f"'{name}' must be an integer, not {_json_type(v)}", name)
    if lo is not None and v < lo:
        raise bad(f"'{name}' must be at least {lo}, got {show(v)}", name)
    if hi is not None and v > hi:
        raise bad(f"'{name}' must be at most {hi}, got {show(v)}", name)
    return v


def as_float(v: Any, name: str, lo: Optional[float] = None, hi: Optional[float] = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad(f"'{name}' must be a finite number, not {_json_type(v)}", name)
    try:
        f = float(v)  # a huge integer overflows here
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise bad(f"'{name}' must be a finite number, got {show(v)}", name)
    if (lo is not None and f < lo) or (hi is not None and f > hi):
        raise bad(f"'{name}' must be between {lo} and {hi}, got {show(v)}", name)
    return f


def as_object(v: Any, name: str) -> Dict[str, Any]:
    if not isinstance(v, dict):
        raise bad(f"'{name}' must be an object, not {_json_type(v)}", name)
    return v


def as_str(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise bad(f"'{name}' must be a string, not {_json_type(v)}", name)
    return v


def one_of(v: Any, name: str, choices: Sequence[str]) -> str:
    if as_str(v, name) not in choices:
        raise bad(f"'{name}' must be {' or '.join(map(repr, choices))}", name)
    return v


# get_*: a field of a body, its default when absent or null.
def get_bool(body: Dict[str, Any], key: str, default: bool, param: Optional[str] = None) -> bool:
    v = body.get(key)
    return default if v is None else as_bool(v, param or key)


def get_int(body: Dict[str, Any], key: str, default: Optional[int], lo: Optional[int] = None,
            hi: Optional[int] = None, param: Optional[str] = None) -> Optional[int]:
    v = body.get(key)
    return default if v is None else as_int(v, param or key, lo, hi)


def get_str(body: Dict[str, Any], key: str, default: Optional[str] = None, param: Optional[str] = None) -> Optional[str]:
    v = body.get(key)
    return default if v is None else as_str(v, param or key)


def token_list(v: Any, name: str) -> List[int]:
    if not isinstance(v, list):
        raise bad(f"'{name}' must be an array of token ids, not {_json_type(v)}", name)
    for t in v:
        if isinstance(t, bool) or not isinstance(t, int):
            raise bad(f"'{name}' must hold integer token ids, found {_json_type(t)}", name)
    return v


def stop_list(v: Any, name: str) -> List[str]:
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad(f"'{name}' must be a string or an array of strings", name)
    if any(s == "" for s in v):
        raise bad(f"'{name}' must not contain an empty string", name)
    return v
