"""OpenAI-compatible routes: ``/v1/completions`` and ``/v1/models``.

The request is translated into the same :class:`GenerateReqInput` that
``/generate`` uses, so both APIs share one pipeline and one set of checks.
"""

from __future__ import annotations

import base64
import struct
import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from .http_server import EventStream, Request, route
from .io_struct import GenerateReqInput, SamplingParams
from .validate import (
    _json_type,
    bad,
    get_bool,
    get_float,
    get_int,
    get_str,
    require_object,
    stop_list,
    token_list,
)

if TYPE_CHECKING:
    from .tokenizer_manager import ReqState

# The fields parse_openai_sampling reads, shared by both routes.
SAMPLING_FIELDS = {
    "model", "temperature", "top_p", "n", "stream", "stream_options", "stop", "presence_penalty",
    "frequency_penalty", "best_of", "logit_bias", "user", "seed", "min_tokens", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "stop_token_ids", "top_k", "min_p", "repetition_penalty",
    "include_stop_str_in_output",
}
COMPLETION_FIELDS = SAMPLING_FIELDS | {"prompt", "max_tokens", "logprobs", "echo", "suffix"}


def parse_prompt(prompt: Any, obj: GenerateReqInput) -> None:
    """OpenAI's four prompt shapes: a string, strings, a token list, token lists."""
    if isinstance(prompt, str):
        obj.text = prompt
    elif isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            obj.text, obj.is_batch = prompt, True
        elif all(isinstance(p, list) for p in prompt):
            obj.input_ids, obj.is_batch = [token_list(p, "prompt") for p in prompt], True
        else:
            obj.input_ids = token_list(prompt, "prompt")
    else:
        raise bad(f"'prompt' must be a string, an array of strings or of token ids; got {_json_type(prompt)}"
                  if not isinstance(prompt, list) else "'prompt' must not be empty", "prompt")


def parse_completion(body: Any) -> "tuple[GenerateReqInput, bool]":
    body = require_object(body)
    unknown = set(body) - COMPLETION_FIELDS
    if unknown:
        raise bad(f"unknown field(s) {', '.join(sorted(map(repr, unknown)))}", sorted(unknown)[0])
    if "prompt" not in body:
        raise bad("'prompt' is required", "prompt")
    if body.get("logprobs") is not None:
        raise bad("'logprobs' is not supported", "logprobs")
    if get_bool(body, "echo", False):
        raise bad("'echo' is not supported", "echo")
    if body.get("suffix") is not None:
        raise bad("'suffix' is not supported", "suffix")
    sp, include_usage = parse_openai_sampling(body, get_int(body, "max_tokens", 16, 1))  # type: ignore[arg-type]
    obj = GenerateReqInput(sampling_params=sp, stream=get_bool(body, "stream", False), model=get_str(body, "model"))
    parse_prompt(body["prompt"], obj)
    return obj, include_usage


def parse_openai_sampling(body: Dict[str, Any], max_tokens: int) -> "tuple[SamplingParams, bool]":
    """The sampling fields /v1/completions and /v1/chat/completions share (OpenAI's,
    SGLang's and vLLM's extras), and ``stream_options.include_usage``.  The caller
    says how many tokens at most: the two routes name and default that differently."""
    if get_int(body, "n", 1, 1, 1) != 1 or get_int(body, "best_of", 1, 1, 1) != 1:
        raise bad("only n = 1 is supported", "n")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    include_usage = get_bool(opts or {}, "include_usage", False, "stream_options.include_usage")
    sp = SamplingParams(
        max_new_tokens=max_tokens,
        min_new_tokens=get_int(body, "min_tokens", 0, 0),  # type: ignore[arg-type]
        stop=stop_list(body.get("stop"), "stop"),
        stop_token_ids=token_list(body.get("stop_token_ids") or [], "stop_token_ids"),
        ignore_eos=get_bool(body, "ignore_eos", False),
        skip_special_tokens=get_bool(body, "skip_special_tokens", True),
        spaces_between_special_tokens=get_bool(body, "spaces_between_special_tokens", True),
        no_stop_trim=get_bool(body, "include_stop_str_in_output", False),
        temperature=get_float(body, "temperature", 1.0, 0.0, 2.0),
        top_p=get_float(body, "top_p", 1.0, 0.0, 1.0),
        top_k=get_int(body, "top_k", -1, -1),  # type: ignore[arg-type]
        min_p=get_float(body, "min_p", 0.0, 0.0, 1.0),
        frequency_penalty=get_float(body, "frequency_penalty", 0.0, -2.0, 2.0),
        presence_penalty=get_float(body, "presence_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=get_float(body, "repetition_penalty", 1.0, 0.0, 2.0),
        seed=get_int(body, "seed", None),
    )
    if body.get("logit_bias") is not None and not isinstance(body["logit_bias"], dict):
        raise bad("'logit_bias' must be an object", "logit_bias")
    get_str(body, "user")
    return sp, include_usage


def base64_floats(vec: List[float]) -> str:
    """OpenAI's base64 form: the vector as little-endian float32."""
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()


def embedding_inputs(value: Any, name: str) -> "tuple[List[Any], bool]":
    """Texts or token lists to embed, and whether the caller sent a batch."""
    if isinstance(value, str):
        return [value], False
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return value, True
        if all(isinstance(v, list) for v in value):
            return [token_list(v, name) for v in value], True
        return [token_list(value, name)], False
    raise bad(f"'{name}' must be a string, an array of strings or of token ids"
              + ("; it must not be empty" if isinstance(value, list) else f", not {_json_type(value)}"), name)


def openai_finish(st: "ReqState") -> "tuple[Optional[str], Any]":
    reason = st.finished_reason
    if reason is None:
        return None, None
    return reason.get("type"), reason.get("matched")


class OpenAIRoutes:
    """Mixed into :class:`mtok.api.Api`, which provides tm, created, collect, first_then_rest."""

    @route("GET", "/v1/models")
    def list_models(self, req: Request) -> Any:
        return {"object": "list", "data": [self.model_card(m) for m in self.tm.models.values()]}

    def model_card(self, model: Any) -> Dict[str, Any]:
        return {"id": model.name, "object": "model", "created": self.created, "owned_by": "mtok",
                "max_model_len": model.context_length}

    @route("POST", "/v1/completions")
    def completions(self, req: Request) -> Any:
        obj, include_usage = parse_completion(req.json())
        model = self.tm.model(obj.model)
        states = self.tm.generate_request(obj, req.watch)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": model.name}
        if obj.stream:
            return EventStream(self._completion_chunks(self.first_then_rest(states), head, obj.batch_size,
                                                       include_usage))
        results = self.collect(states, obj.batch_size)
        choices = []
        for st in results:
            finish, matched = openai_finish(st)
            choices.append({"index": st.index, "text": st.text, "logprobs": None, "finish_reason": finish,
                            "stop_reason": matched})
        return dict(head, choices=choices, usage=self.usage(results))

    @route("POST", "/v1/embeddings")
    def embeddings(self, req: Request) -> Any:
        body = require_object(req.json())
        unknown = set(body) - {"input", "model", "encoding_format", "dimensions", "user"}
        if unknown:
            raise bad(f"unknown field(s) {', '.join(sorted(map(repr, unknown)))}", sorted(unknown)[0])
        if "input" not in body:
            raise bad("'input' is required", "input")
        fmt = get_str(body, "encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise bad("'encoding_format' must be 'float' or 'base64'", "encoding_format")
        get_str(body, "user")
        inputs, _ = embedding_inputs(body["input"], "input")
        model = self.tm.model(get_str(body, "model"))
        states = self.tm.embed_request(inputs, model.name, req.watch)
        dims = get_int(body, "dimensions", None, 1)
        data = []
        for st in states:
            err = st.error()
            if err is not None:
                raise err
            vec = st.embedding or []
            if dims is not None and dims != len(vec):
                raise bad(f"this model's embeddings have {len(vec)} dimensions, not {dims}", "dimensions")
            data.append({"object": "embedding", "index": st.index,
                         "embedding": vec if fmt == "float" else base64_floats(vec)})
        prompt = sum(st.prompt_tokens for st in states)
        return {"object": "list", "data": data, "model": model.name,
                "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}

    @staticmethod
    def usage(states: List["ReqState"]) -> Dict[str, int]:
        prompt = sum(st.prompt_tokens for st in states)
        completion = sum(st.completion_tokens for st in states)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _completion_chunks(self, states: Iterator["ReqState"], head: Dict[str, Any], n: int,
                           include_usage: bool) -> Iterator[Any]:
        sent = [0] * n
        final: Dict[int, "ReqState"] = {}
        for st in states:
            err = st.error()
            if err is not None:
                yield err.body()
                break
            delta = st.text[sent[st.index]:]
            sent[st.index] = len(st.text)
            finish, matched = openai_finish(st)
            if finish is not None:
                final[st.index] = st
            elif not delta:
                continue
            choice = {"index": st.index, "text": delta, "logprobs": None, "finish_reason": finish,
                      "stop_reason": matched}
            chunk = dict(head, choices=[choice])
            if include_usage:
                chunk["usage"] = None
            yield chunk
        if include_usage and len(final) == n:
            yield dict(head, choices=[], usage=self.usage(list(final.values())))
        yield "[DONE]"
