"""OpenAI-compatible routes: ``/v1/completions`` and ``/v1/models``.

The request is translated into the same :class:`GenerateReqInput` that
``/generate`` uses, so both APIs share one pipeline and one set of checks.

The answers take the shapes SGLang's OpenAI server gives, which its and
vLLM's clients read: usage counts each prompt once however many choices it
has (``n``) and every choice's completion tokens, as OpenAI bills and SGLang's
``UsageProcessor`` counts; ``stream_options.continuous_usage_stats`` puts each
choice's usage so far on every chunk carrying its output (:class:`StreamUsage`); a model card
carries SGLang's ``ModelCard`` fields, and an id no model has is a 404
``model_not_found``, in SGLang's words.
"""

from __future__ import annotations

import base64
import struct
import time
from dataclasses import dataclass
from urllib.parse import unquote
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from .. import fields
from .routes import NOT_YET, Job, Pending, Request, Response, route
from ..wire.io_struct import GenerateReqInput, LogprobParams, SamplingParams
from .logprobs import CompletionLogprobs, merge
from .parse import parse_rid, response_format, sampling_params
from ..validate import _json_type, bad, get_bool, require_object, token_list

if TYPE_CHECKING:
    from ..managers.request_handle import ReqState

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


def openai_sampling(got: Dict[str, Any], api: str, echo: bool = False) -> SamplingParams:
    """Sampling parameters of an OpenAI body (``api``: completions or chat), from :func:`fields.read`'s result."""
    if got.get("max_new_tokens") == 0 and not echo:
        raise bad("'max_tokens' must be at least 1 (0 is only meaningful with 'echo')", "max_tokens")
    n = fields.value(got, api, "n")
    best_of = got.get("best_of")
    if best_of is not None and best_of != n:
        raise bad(f"'best_of' ({best_of}) must equal 'n' ({n}): returning the best of more samples than are "
                  "returned is not supported", "best_of")
    sp = sampling_params(got, api)
    if "response_format" in got:
        response_format(got["response_format"], sp)
    return sp


def parse_openai_sampling(got: Dict[str, Any]) -> "tuple[SamplingParams, StreamUsage]":
    """The sampling fields of a chat body, from :func:`fields.read`'s result, and
    its ``stream_options``; without ``max_tokens`` the caller sets the budget."""
    return openai_sampling(got, fields.CHAT), stream_usage(got)


def token_usage(prompt: int, completion: int, reasoning: Optional[int] = None) -> Dict[str, Any]:
    """OpenAI's usage; chat's (``reasoning`` given) also has SGLang's ``reasoning_tokens``,
    0 without reasoning, and OpenAI's ``completion_tokens_details`` when there are some."""
    out: Dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    if reasoning is not None:
        out["reasoning_tokens"] = reasoning
        if reasoning:
            out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


@dataclass(frozen=True)
class StreamUsage:
    """What ``stream_options`` asks of a stream: a last chunk with the totals
    (``final``: ``include_usage``), and each choice's usage so far on every chunk
    carrying its output (``continuous``: ``continuous_usage_stats``, SGLang's and vLLM's
    extension; SGLang honours it without ``include_usage`` too)."""

    final: bool = False
    continuous: bool = False

    def mark(self, chunk: Dict[str, Any], so_far: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """``chunk`` with its ``usage``: ``so_far``, its choice's usage up to it (None on the
        chunks SGLang sends without: chat's role and finish chunks), or null while a final one is coming."""
        if self.continuous and so_far is not None:
            chunk["usage"] = so_far
        elif self.final:
            chunk["usage"] = None
        return chunk


def stream_usage(got: Dict[str, Any]) -> StreamUsage:
    """``stream_options`` of an OpenAI body."""
    opts = got.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    opts = opts or {}
    return StreamUsage(get_bool(opts, "include_usage", False, "stream_options.include_usage"),
                       get_bool(opts, "continuous_usage_stats", False, "stream_options.continuous_usage_stats"))


def parse_completion(body: Any, strict: bool = False) -> "tuple[GenerateReqInput, Dict[str, Any]]":
    """A /v1/completions body: the request, and the response options (usage, echo, logprobs)."""
    body = require_object(body)
    got = fields.read(body, fields.CMPL, strict)
    if "prompt" not in got:
        raise bad("'prompt' is required", "prompt")
    logprobs = got.get("logprobs")
    echo = fields.value(got, fields.CMPL, "echo")
    opts = {"usage": stream_usage(got), "echo": echo, "logprobs": logprobs,
            "token_ids": fields.value(got, fields.CMPL, "return_token_ids")}
    sp = openai_sampling(got, fields.CMPL, echo)
    obj = GenerateReqInput(sampling_params=sp, stream=fields.value(got, fields.CMPL, "stream"),
                           model=got.get("model"), lora_path=got.get("lora_path"), rid=got.get("rid"))
    if logprobs is not None:
        obj.logprobs = LogprobParams(start_len=0 if echo else -1, top_n=logprobs, with_text=True, param="logprobs")
    parse_prompt(got["prompt"], obj)
    obj.rid = parse_rid(obj.rid, obj.is_batch, obj.batch_size)
    return obj, opts


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


def refuse_embedding_adapter(got: Dict[str, Any]) -> None:
    """Embeddings have no capability check in the scheduler: an adapter is refused here."""
    for key in ("lora_path", "lora_id"):
        if got.get(key) is not None:
            raise bad(f"'{key}': LoRA adapters are not supported for embeddings", key)


def openai_finish(st: "ReqState") -> "tuple[Optional[str], Any]":
    reason = st.finished_reason
    if reason is None:
        return None, None
    return reason.openai()


class OpenAIRoutes:
    """Mixed into :class:`mtok.api.native.Api`, which provides tm, args, start_stream."""

    @route("GET", "/v1/models")
    def list_models(self, req: Request) -> Any:
        return {"object": "list", "data": [self.model_card(m) for m in self.tm.models.values()]}

    @route("GET", "/v1/models/{model:path}")
    def retrieve_model(self, req: Request) -> Any:
        """One model's card, by its exact name (which may hold slashes, escaped or
        not); unlike a request's ``model``, an unknown name is a 404, as in SGLang."""
        name = unquote(req.path[len("/v1/models/"):])
        model = self.tm.models.get(name)
        if model is None:
            return Response({"error": {"message": f"The model '{name}' does not exist", "type": "invalid_request_error",
                                       "param": "model", "code": "model_not_found"}}, 404)
        return self.model_card(model)

    def model_card(self, model: Any) -> Dict[str, Any]:
        """SGLang's ModelCard: ``created`` is the answer's time and ``root`` the served name, as
        SGLang gives them (a worker's own start time would differ from worker to worker)."""
        return {"id": model.name, "object": "model", "created": int(time.time()), "owned_by": "mtok",
                "root": model.name, "parent": None, "max_model_len": model.context_length}

    @route("POST", "/v1/completions", inline=True)
    def completions(self, req: Request) -> Any:
        obj, opts = parse_completion(req.json(), self.args.strict_fields)
        model = self.tm.model(obj.model)
        rid = self.tm.assign_rids(obj)  # the completion's id: /abort_request takes it
        head = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model.name}
        choices = CompletionChoices(obj, opts, model.tokenizer)

        def answer(handle: Any) -> Any:
            if obj.stream:
                return self.start_stream(handle, self._completion_chunks(handle, head, choices, opts["usage"]))
            return Pending(handle, lambda results: dict(head, choices=[choices.whole(st) for st in results],
                                                        usage=self.usage(results, choices.per_prompt)))
        return Job((obj, req.watch), answer)

    @route("POST", "/v1/embeddings", inline=True)
    def embeddings(self, req: Request) -> Any:
        body = require_object(req.json())
        got = fields.read(body, fields.EMB, self.args.strict_fields)  # unknown, ignored and refused fields
        refuse_embedding_adapter(got)
        if "input" not in body:
            raise bad("'input' is required", "input")
        fmt = fields.value(got, fields.EMB, "encoding_format")
        inputs, _ = embedding_inputs(body["input"], "input")
        model = self.tm.model(got.get("model"))
        dims = got.get("dimensions")
        return Pending(self.tm.submit_embedding(inputs, model.name, req.watch),
                       lambda states: self._embedding_list(states, model.name, dims, fmt))

    @staticmethod
    def _embedding_list(states: List[Any], model: str, dims: Optional[int], fmt: str) -> Dict[str, Any]:
        data = []
        for st in states:
            vec = st.embedding or []
            if dims is not None and dims != len(vec):
                raise bad(f"this model's embeddings have {len(vec)} dimensions, not {dims}", "dimensions")
            data.append({"object": "embedding", "index": st.index,
                         "embedding": vec if fmt == "float" else base64_floats(vec)})
        prompt = sum(st.prompt_tokens for st in states)
        return {"object": "list", "data": data, "model": model,
                "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}

    @staticmethod
    def usage(states: List["ReqState"], per_prompt: int = 1, reasoning: Optional[int] = None) -> Dict[str, Any]:
        """The choices' usage: each prompt once (the choices of prompt i are
        indices i * ``per_prompt`` ...), every choice's completion (and ``reasoning``) tokens."""
        prompt = sum(st.prompt_tokens for st in states if st.index % per_prompt == 0)
        return token_usage(prompt, sum(st.completion_tokens for st in states), reasoning)

    def _completion_chunks(self, states: Iterator["ReqState"], head: Dict[str, Any], choices: "CompletionChoices",
                           usage: StreamUsage) -> Iterator[Any]:
        final: Dict[int, "ReqState"] = {}
        for st in states:
            if st is NOT_YET:  # the event loop's: resumed when the mailbox fills
                yield st
                continue
            err = st.error()
            if err is not None:
                yield err.body()
                break
            choice = choices.delta(st)
            if choice["finish_reason"] is not None:
                final[st.index] = st
            elif not choice["text"] and not choice["logprobs"] and not choice.get("token_ids"):
                continue
            yield usage.mark(dict(head, choices=[choice]), token_usage(st.prompt_tokens, st.completion_tokens))
        if usage.final and len(final) == choices.total:
            yield dict(head, choices=[], usage=self.usage(list(final.values()), choices.per_prompt))
        yield "[DONE]"


class CompletionChoices:
    """The choices of one /v1/completions call: text (with the prompt first
    under ``echo``), logprobs, finish reasons; whole, or as stream deltas."""

    def __init__(self, obj: GenerateReqInput, opts: Dict[str, Any], tokenizer: Any):
        self.obj, self.echo, self.k = obj, opts["echo"], opts["logprobs"]
        self.token_ids = opts.get("token_ids", False)
        self.tokenizer = tokenizer
        self.total = obj.num_outputs
        self.per_prompt = obj.params_at(0).n
        self.sent: Dict[int, int] = {}
        self.ids_sent: Dict[int, int] = {}
        self.lps: Dict[int, CompletionLogprobs] = {}

    def prompt_text(self, index: int) -> str:
        i = index // self.per_prompt
        if self.obj.text is not None:
            return self.obj.text[i] if self.obj.is_batch else self.obj.text  # type: ignore[return-value]
        ids = self.obj.input_ids[i] if self.obj.is_batch else self.obj.input_ids  # type: ignore[index]
        return self.tokenizer.decode(ids)

    def whole(self, st: "ReqState") -> Dict[str, Any]:
        finish, matched = openai_finish(st)  # st is finished: nothing changes any more
        text = self.prompt_text(st.index) + st.text if self.echo else st.text
        lps = None
        if self.k is not None and st.logprobs is not None:
            lp = CompletionLogprobs()
            lps = lp.take(st.logprobs, "input") if self.echo else None
            out = lp.take(st.logprobs, "output")
            lps = merge(lps, out) if lps is not None else out
        choice = {"index": st.index, "text": text, "logprobs": lps, "finish_reason": finish,
                  "stop_reason": matched, "matched_stop": matched}
        if self.token_ids:
            choice.update(prompt_token_ids=list(st.prompt_ids), token_ids=list(st.output_ids))
        return choice

    def delta_ids(self, st: "ReqState", choice: Dict[str, Any]) -> Dict[str, Any]:
        """vLLM's ``return_token_ids`` in a stream: each chunk's new ids, and the prompt's
        on the choice's first chunk that says anything (an empty one is not sent)."""
        start = self.ids_sent.get(st.index)
        ids = st.output_ids[start or 0:]
        if start is None and not (ids or choice["text"] or choice["logprobs"] or choice["finish_reason"]):
            return choice
        self.ids_sent[st.index] = (start or 0) + len(ids)
        choice["prompt_token_ids"] = list(st.prompt_ids) if start is None else None
        choice["token_ids"] = ids
        return choice

    def delta(self, st: "ReqState") -> Dict[str, Any]:
        finish, matched = openai_finish(st)  # before the text: the receiver adds text, then the finish
        whole = st.text
        first = st.index not in self.sent
        start = self.sent.get(st.index, 0)
        self.sent[st.index] = len(whole)
        text = whole[start:]
        lps = None
        if self.k is not None and st.logprobs is not None:
            lp = self.lps.setdefault(st.index, CompletionLogprobs())
            if first and self.echo:
                text = self.prompt_text(st.index) + text
                lps = merge(lp.take(st.logprobs, "input"), lp.take(st.logprobs, "output"))
            else:
                lps = lp.take(st.logprobs, "output")
            if not lps["tokens"]:
                lps = None if not first else lps
        elif first and self.echo:
            text = self.prompt_text(st.index) + text
        choice = {"index": st.index, "text": text, "logprobs": lps, "finish_reason": finish,
                  "stop_reason": matched, "matched_stop": matched}
        return self.delta_ids(st, choice) if self.token_ids else choice
