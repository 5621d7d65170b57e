"""Request bodies into :class:`~mtok.wire.io_struct.GenerateReqInput`, through the field table.

:func:`mtok.fields.read` decides which fields count and checks each one's type;
this module turns what it returns into the request objects, and checks what
spans fields (``min_new_tokens`` against ``max_new_tokens``, one of ``text``
and ``input_ids``, one ``rid`` per prompt).  The OpenAI routes build their
sampling parameters with :func:`sampling_params` too, so both APIs share one
set of checks.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Dict, List, Optional

from .. import fields
from ..wire.io_struct import GenerateReqInput, LogprobParams, SamplingParams
from ..validate import _json_type, bad, require_object, token_list

_SP_ATTRS = frozenset(f.name for f in SamplingParams.__dataclass_fields__.values())
# Per surface, the defaults that are not SGLang's (OpenAI's completions: max_tokens 16); the table says which.
_SURFACE_DEFAULTS = {api: fields.surface_defaults(api, _SP_ATTRS) for api in (fields.SP, fields.CMPL, fields.CHAT)}


def sampling_params(got: Dict[str, Any], api: str = fields.SP, prefix: str = "") -> SamplingParams:
    """SamplingParams from the checked fields of :func:`fields.read`, over the defaults of surface ``api``."""
    sp = SamplingParams(**_SURFACE_DEFAULTS[api])
    for key, value in got.items():
        if key in _SP_ATTRS:
            setattr(sp, key, value)
    budget_given = fields.value(got, api, "max_new_tokens") is not None  # chat without one: the context's rest
    if budget_given and sp.min_new_tokens > sp.max_new_tokens:
        raise bad(f"'{prefix}min_new_tokens' ({sp.min_new_tokens}) must not exceed "
                  f"'{prefix}max_new_tokens' ({sp.max_new_tokens})", prefix + "min_new_tokens")
    return sp


def response_format(value: Any, sp: SamplingParams) -> None:
    """OpenAI's ``response_format`` as SGLang's constraints: a JSON schema, any
    JSON object, SGLang's structural tag (the whole object, as SGLang forwards
    it), or plain text (no constraint)."""
    kind = value.get("type")
    if kind == "text":
        return
    if kind == "json_object":
        sp.json_schema = '{"type": "object"}'
    elif kind == "json_schema":
        inner = value.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, dict) else None
        if not isinstance(schema, dict):
            raise bad("'response_format.json_schema.schema' must be an object", "response_format")
        sp.json_schema = json.dumps(schema)
    elif kind == "structural_tag":
        sp.structural_tag = json.dumps(value)
    else:
        raise bad("'response_format.type' must be 'text', 'json_object', 'json_schema' or 'structural_tag'",
                  "response_format")
    sp.constraint_from = "response_format"  # an engine that cannot constrain is refused naming it


def parse_sampling_params(d: Any, strict: bool = False, prefix: str = "sampling_params.") -> SamplingParams:
    if d is None:
        return SamplingParams()
    if not isinstance(d, dict):
        raise bad(f"'{prefix.rstrip('.')}' must be an object, not {_json_type(d)}", prefix.rstrip("."))
    return sampling_params(fields.read(d, fields.SP, strict, prefix), fields.SP, prefix)


def parse_generate(body: Any, strict: bool = False) -> GenerateReqInput:
    """A ``/generate`` body (SGLang's native shape) as a GenerateReqInput."""
    body = require_object(body)
    got = fields.read(body, fields.GEN, strict)
    has_text, has_ids = "text" in got, "input_ids" in got
    if has_text == has_ids:
        raise bad("give exactly one of 'text' and 'input_ids'", "text")
    obj = GenerateReqInput(stream=fields.value(got, fields.GEN, "stream"), model=got.get("model"),
                           lora_path=got.get("lora_path"))
    if has_text:
        text = got["text"]
        if isinstance(text, list):
            if not text or not all(isinstance(t, str) for t in text):
                raise bad("'text' must be a string or a non-empty array of strings", "text")
            obj.is_batch = True
        elif not isinstance(text, str):
            raise bad(f"'text' must be a string or an array of strings, not {_json_type(text)}", "text")
        obj.text = text
    else:
        ids = got["input_ids"]
        if isinstance(ids, list) and ids and isinstance(ids[0], list):
            obj.input_ids = [token_list(x, "input_ids") for x in ids]
            obj.is_batch = True
        else:
            obj.input_ids = token_list(ids, "input_ids")
    n = obj.batch_size
    sp = got.get("sampling_params")
    if isinstance(sp, list):
        if not obj.is_batch or len(sp) != n:
            raise bad(f"'sampling_params' has {len(sp)} entries for {n} prompt(s)", "sampling_params")
        obj.sampling_params = [parse_sampling_params(x, strict, f"sampling_params[{i}].") for i, x in enumerate(sp)]
    else:
        obj.sampling_params = parse_sampling_params(sp, strict)
    obj.rid = parse_rid(got.get("rid"), obj.is_batch, n)
    obj.logprobs = logprob_params(got)
    return obj


def logprob_params(got: Dict[str, Any]) -> Optional[LogprobParams]:
    if not got.get("return_logprob"):
        return None
    value = functools.partial(fields.value, got, fields.GEN)
    return LogprobParams(start_len=value("logprob_start_len"), top_n=value("top_logprobs_num"),
                         token_ids=value("token_ids_logprob"), with_text=value("return_text_in_logprobs"))


def parse_rid(rid: Any, is_batch: bool, n: int) -> Optional[Any]:
    if rid is None:
        return None
    rids: List[Any] = rid if isinstance(rid, list) else [rid]
    if not all(isinstance(r, str) and 0 < len(r) <= 256 for r in rids):
        raise bad("'rid' must be a non-empty string (at most 256 characters) or an array of them", "rid")
    if is_batch != isinstance(rid, list) or len(rids) != n or len(set(rids)) != n:
        raise bad(f"'rid' must give {n} distinct id(s), one per prompt", "rid")
    return rid
