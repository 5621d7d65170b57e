"""Checking request bodies: every field's type, range and company.

Everything here raises :class:`APIError`, which the HTTP layer turns into a
4xx with a JSON body ``{"error": {"message", "type", "code", "param"}}``.
Booleans are not integers here, NaN is not a number, and an unknown field is
an error rather than a silent no-op.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Dict, List, Optional, Sequence

from .io_struct import GenerateReqInput, SamplingParams

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
        return _DECODER.decode(text)
    except RecursionError:
        raise bad("request body is nested too deeply") from None
    except ValueError as e:
        raise bad(f"request body is not valid JSON: {e}") from None


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
        raise bad(f"'{name}' must be at least {lo}, got {v}", name)
    if hi is not None and v > hi:
        raise bad(f"'{name}' must be at most {hi}, got {v}", name)
    return v


def as_float(v: Any, name: str, lo: Optional[float] = None, hi: Optional[float] = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise bad(f"'{name}' must be a finite number, not {_json_type(v)}", name)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise bad(f"'{name}' must be between {lo} and {hi}, got {v}", name)
    return float(v)


def as_str(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise bad(f"'{name}' must be a string, not {_json_type(v)}", name)
    return v


# get_*: a field of a body, its default when absent or null.
def get_bool(body: Dict[str, Any], key: str, default: bool, param: Optional[str] = None) -> bool:
    v = body.get(key)
    return default if v is None else as_bool(v, param or key)


def get_int(body: Dict[str, Any], key: str, default: Optional[int], lo: Optional[int] = None,
            hi: Optional[int] = None, param: Optional[str] = None) -> Optional[int]:
    v = body.get(key)
    return default if v is None else as_int(v, param or key, lo, hi)


def get_float(body: Dict[str, Any], key: str, default: float, lo: Optional[float] = None,
              hi: Optional[float] = None, param: Optional[str] = None) -> float:
    v = body.get(key)
    return default if v is None else as_float(v, param or key, lo, hi)


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


# How each sampling parameter is checked; only the fields a request sends are
# looked at, the rest keep SamplingParams' defaults.
SAMPLING_RULES: Dict[str, Callable[[Any, str], Any]] = {
    "max_new_tokens": lambda v, n: as_int(v, n, 1),
    "min_new_tokens": lambda v, n: as_int(v, n, 0),
    "stop": lambda v, n: stop_list(v, n),
    "stop_token_ids": lambda v, n: token_list(v, n),
    "ignore_eos": as_bool,
    "skip_special_tokens": as_bool,
    "spaces_between_special_tokens": as_bool,
    "no_stop_trim": as_bool,
    "temperature": lambda v, n: as_float(v, n, 0.0, 100.0),
    "top_p": lambda v, n: as_float(v, n, 0.0, 1.0),
    "top_k": lambda v, n: as_int(v, n, -1),
    "min_p": lambda v, n: as_float(v, n, 0.0, 1.0),
    "frequency_penalty": lambda v, n: as_float(v, n, -2.0, 2.0),
    "presence_penalty": lambda v, n: as_float(v, n, -2.0, 2.0),
    "repetition_penalty": lambda v, n: as_float(v, n, 0.0, 2.0),
    "seed": as_int,
}
# SGLang accepts these too; mtok takes them and has nothing to do with them.
_IGNORED_SAMPLING = ("n", "regex", "json_schema", "ebnf", "structural_tag", "logit_bias", "custom_params",
                     "stream_interval", "sampling_seed")


def parse_sampling_params(d: Any, prefix: str = "sampling_params.") -> SamplingParams:
    sp = SamplingParams()
    if d is None:
        return sp
    if not isinstance(d, dict):
        raise bad(f"'{prefix.rstrip('.')}' must be an object, not {_json_type(d)}", prefix.rstrip("."))
    for key, value in d.items():
        rule = SAMPLING_RULES.get(key)
        if rule is None:
            if key not in _IGNORED_SAMPLING:
                check_unknown(d, list(SAMPLING_RULES) + list(_IGNORED_SAMPLING), f" in {prefix.rstrip('.')}")
            elif key == "n" and value not in (1, None):
                raise bad("only n = 1 is supported", prefix + "n")
        elif value is not None:
            setattr(sp, key, rule(value, prefix + key))
    return sp


GENERATE_FIELDS = ("text", "input_ids", "sampling_params", "stream", "rid", "model", "return_logprob",
                   "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")


def parse_generate(body: Any) -> GenerateReqInput:
    """A ``/generate`` body (SGLang's native shape) as a GenerateReqInput."""
    body = require_object(body)
    check_unknown(body, GENERATE_FIELDS)
    if get_bool(body, "return_logprob", False):
        raise bad("'return_logprob' is not supported", "return_logprob")
    has_text, has_ids = body.get("text") is not None, body.get("input_ids") is not None
    if has_text == has_ids:
        raise bad("give exactly one of 'text' and 'input_ids'", "text")
    obj = GenerateReqInput(stream=get_bool(body, "stream", False), model=get_str(body, "model"))
    if has_text:
        text = body["text"]
        if isinstance(text, list):
            if not text or not all(isinstance(t, str) for t in text):
                raise bad("'text' must be a string or a non-empty array of strings", "text")
            obj.is_batch = True
        elif not isinstance(text, str):
            raise bad(f"'text' must be a string or an array of strings, not {_json_type(text)}", "text")
        obj.text = text
    else:
        ids = body["input_ids"]
        if isinstance(ids, list) and ids and isinstance(ids[0], list):
            obj.input_ids = [token_list(x, "input_ids") for x in ids]
            obj.is_batch = True
        else:
            obj.input_ids = token_list(ids, "input_ids")
    n = obj.batch_size
    sp = body.get("sampling_params")
    if isinstance(sp, list):
        if not obj.is_batch or len(sp) != n:
            raise bad(f"'sampling_params' has {len(sp)} entries for {n} prompt(s)", "sampling_params")
        obj.sampling_params = [parse_sampling_params(x, f"sampling_params[{i}].") for i, x in enumerate(sp)]
    else:
        obj.sampling_params = parse_sampling_params(sp)
    rid = body.get("rid")
    if rid is not None:
        rids = rid if isinstance(rid, list) else [rid]
        if not all(isinstance(r, str) and 0 < len(r) <= 256 for r in rids):
            raise bad("'rid' must be a non-empty string (at most 256 characters) or an array of them", "rid")
        if obj.is_batch != isinstance(rid, list) or len(rids) != n or len(set(rids)) != n:
            raise bad(f"'rid' must give {n} distinct id(s), one per prompt", "rid")
        obj.rid = rid
    return obj
