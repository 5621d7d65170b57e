"""The routes: SGLang's native API (this module) and OpenAI's (``openai_api``).

Routes take a :class:`~mtok.api.server.Request` and return a JSON value, a
``Response`` or an ``EventStream``; they raise ``APIError`` for anything a
client got wrong.  The same class serves every worker, whatever N is.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any, Dict, Iterator, List, Optional
from urllib.parse import parse_qs

from .. import __version__
from .. import fields
from .chat import ChatRoutes, ReasoningTokens
from .chat_parsing import configured
from ..parsers import make_reasoning_parser
from ..chat_templates import DEFAULT_NAME
from .routes import NOT_YET, EventStream, Job, Pending, Request, Response, route
from ..wire.io_struct import GenerateReqInput, SamplingParams
from .logprobs import OUTPUT_KEYS, sglang_meta
from ..wire.metrics import merge as merge_metrics
from ..wire.metrics import read as read_metrics
from ..wire.metrics import render as render_metrics
from .openai import OpenAIRoutes, embedding_inputs, refuse_embedding_adapter
from ..managers.limits import check_batch_size
from .parser_routes import ParserRoutes
from .responses import ResponsesRoutes
from .scoring import ScoringRoutes
from ..wire.status import DETOKENIZER_SLOT, SCHEDULER_SLOT, ServerState, SlotState, StatusBoard
from ..managers.request_handle import ReqState, RequestHandle
from ..managers.tokenizer_manager import TokenizerManager
from .parse import parse_generate
from ..validate import APIError, bad, check_unknown, get_bool, require_object


def finish_reason(st: ReqState) -> Optional[Dict[str, Any]]:
    """SGLang's ``meta_info["finish_reason"]``: None until the request finishes."""
    return None if st.finished_reason is None else st.finished_reason.to_json()


class Api(OpenAIRoutes, ChatRoutes, ParserRoutes, ScoringRoutes, ResponsesRoutes):
    def __init__(self, tm: TokenizerManager, board: StatusBoard, slot: int):
        self.tm = tm
        self.board = board
        self.slot = slot
        self.args = tm.server_args
        self.metrics = tm.metrics

    # -- shared helpers --------------------------------------------------------------
    @staticmethod
    def start_stream(handle: RequestHandle, events: Iterator[Any]) -> EventStream:
        """A stream of ``events`` (made from ``handle``).  Its writer waits for the
        first update before the head, so that a refusal (503 at capacity, say) is
        still an HTTP status, and owns the handle from here on: it closes it."""
        return EventStream(events, handle=handle)

    def meta_info(self, st: ReqState, thinking: Optional[Dict[int, ReasoningTokens]] = None) -> Dict[str, Any]:
        meta = {
            "id": st.rid,
            "finish_reason": finish_reason(st),
            "prompt_tokens": st.prompt_tokens,
            "completion_tokens": st.completion_tokens,
        }
        if thinking is not None:
            meta["reasoning_tokens"] = thinking[st.index].count(st.text, st.output_ids)
        if st.finished:
            meta["e2e_latency"] = round(time.monotonic() - st.created, 6)
        if st.logprobs is not None:
            meta.update(sglang_meta(st.logprobs))
        return meta

    def healthy(self) -> bool:
        return self.board.state == ServerState.SERVING and self.tm.failure is None

    # -- native ----------------------------------------------------------------------
    def submit_all(self, calls: List[Any]) -> List[Any]:
        """The transports' way to submit a turn's :class:`Job` s: their ``(obj,
        watch)`` calls, at once (:meth:`TokenizerManager.submit_all
        <mtok.managers.tokenizer_manager.TokenizerManager.submit_all>`)."""
        return self.tm.submit_all(calls)

    @route("POST", "/generate", inline=True)
    @route("PUT", "/generate", inline=True)
    def generate(self, req: Request) -> Any:
        obj = parse_generate(req.json(), self.args.strict_fields)
        thinking = self.reasoning_counts(req.json(), obj.model)
        as_list = obj.is_batch or obj.num_outputs > 1  # SGLang answers n > 1 with a list too

        def answer(handle: RequestHandle) -> Any:
            if obj.stream:
                events = self._generate_events(handle, as_list, self.args.incremental_streaming_output, thinking)
                return self.start_stream(handle, events)
            return Pending(handle, lambda states: [self._generate_result(st, thinking) for st in states]
                           if as_list else self._generate_result(states[0], thinking))
        return Job((obj, req.watch), answer)

    def reasoning_counts(self, body: Dict[str, Any], model: Optional[str]) -> Optional[Dict[int, ReasoningTokens]]:
        """SGLang's ``require_reasoning``: each output's ``reasoning_tokens`` in its meta_info,
        counted with the model's ``--reasoning-parser`` as if it opened the block (none: 0)."""
        if not fields.from_body(body, fields.GEN, "require_reasoning"):
            return None
        entry = self.tm.model(model)
        name = configured(self.args)["reasoning"].get(entry.name)
        reasoning = make_reasoning_parser(name) if name else None
        return collections.defaultdict(lambda: ReasoningTokens(reasoning, entry.tokenizer))

    def _generate_result(self, st: ReqState, thinking: Optional[Dict[int, ReasoningTokens]] = None) -> Dict[str, Any]:
        meta = self.meta_info(st, thinking)  # first: the receiver thread adds text and ids, then the finish
        if self.args.skip_tokenizer_init:  # token ids out, no text (SGLang's BatchTokenIDOutput shape)
            return {"output_ids": list(st.output_ids), "meta_info": meta}
        return {"text": st.text, "output_ids": list(st.output_ids), "meta_info": meta}

    def _generate_events(self, states: Iterator[ReqState], as_list: bool, incremental: bool,
                         thinking: Optional[Dict[int, ReasoningTokens]]) -> Iterator[Any]:
        """SGLang's stream: cumulative text and ids in every event, or, with
        --incremental-streaming-output, only what is new (output logprobs too)."""
        sent: Dict[int, Dict[str, int]] = {}
        for st in states:
            if st is NOT_YET:  # the event loop's: resumed when the mailbox fills
                yield st
                continue
            err = st.error() if st.finished_reason is not None else None
            if err is not None:  # the server failed mid-stream
                yield err.body()
                break
            if incremental:
                meta = self.meta_info(st, thinking)
                text, out_ids = st.text, st.output_ids[:]
                marks = sent.setdefault(st.index, {})
                for key in OUTPUT_KEYS:  # each by its own length: they grow apart
                    if key in meta:
                        meta[key] = _since(marks, key, meta[key])
                event = {"text": _since(marks, "text", text), "output_ids": _since(marks, "ids", out_ids),
                         "meta_info": meta}
                if self.args.skip_tokenizer_init:
                    del event["text"]
            else:
                event = self._generate_result(st, thinking)
            if as_list:
                event["index"] = st.index
            yield event
        yield "[DONE]"

    @route("POST", "/encode", inline=True)
    @route("PUT", "/encode", inline=True)
    def encode(self, req: Request) -> Any:
        """SGLang's embedding endpoint: ``text`` or ``input_ids``, single or batch."""
        got = fields.read(require_object(req.json()), fields.ENC, self.args.strict_fields)
        refuse_embedding_adapter(got)
        has_text, has_ids = "text" in got, "input_ids" in got
        if has_text == has_ids:
            raise bad("give exactly one of 'text' and 'input_ids'", "text")
        key = "text" if has_text else "input_ids"
        inputs, is_batch = embedding_inputs(got[key], key)

        def render(states: List[ReqState]) -> Any:
            out = []
            for st in states:
                dims = got.get("dimensions")
                if dims is not None and dims != len(st.embedding or ()):
                    raise bad(f"this model's embeddings have {len(st.embedding or ())} dimensions, not {dims}",
                              "dimensions")
                out.append({"embedding": st.embedding, "meta_info": {"id": st.rid, "prompt_tokens": st.prompt_tokens}})
            return out if is_batch else out[0]
        return Pending(self.tm.submit_embedding(inputs, got.get("model"), req.watch), render)

    @route("POST", "/tokenize", "/v1/tokenize", inline=True,
           offload=lambda body: "messages" in body or isinstance(body.get("prompt"), list))
    def tokenize(self, req: Request) -> Any:
        """A ``prompt`` (or SGLang's list of them, answered with lists), or ``messages`` rendered
        as a chat completion would render them; vLLM's ``token_strs`` (the vocabulary's
        strings) are null unless ``return_token_strs``."""
        body = require_object(req.json())
        got = fields.read(body, fields.TOK, self.args.strict_fields)  # unknown fields as on every route
        if ("prompt" in got) == ("messages" in got):
            raise bad("give exactly one of 'prompt' and 'messages'", "prompt")
        model = self.tm.model(got.get("model"))
        add = got.get("add_special_tokens", "prompt" in got)  # a template writes its own
        if "prompt" in got:
            texts, batch = prompt_texts(got["prompt"], self.args.max_prompts_per_request)
            seqs = model.tokenizer.encode_batch(texts, add)
        else:
            seqs, batch = [self.message_tokens(model, body, add)], False
        strs = None
        if fields.value(got, fields.TOK, "return_token_strs"):
            strs = [[model.tokenizer.id_to_token(t) for t in ids] for ids in seqs]
        pick = (lambda xs: xs) if batch else (lambda xs: xs[0])
        return {"tokens": pick(seqs), "count": pick([len(ids) for ids in seqs]), "max_model_len": model.context_length,
                "token_strs": None if strs is None else pick(strs)}

    @route("POST", "/detokenize", "/v1/detokenize", inline=True)
    def detokenize(self, req: Request) -> Any:
        """The text of ``tokens``, under ``--detokenize-key``: SGLang's ``text``,
        vLLM's ``prompt``, or both (the default, so a client of either reads it)."""
        got = fields.read(require_object(req.json()), fields.DETOK, self.args.strict_fields)
        model = self.tm.model(got.get("model"))
        if "tokens" not in got:
            raise bad("'tokens' is required", "tokens")
        tokens = got["tokens"]
        model.check_ids([tokens], "tokens")
        text = model.tokenizer.decode(tokens, fields.value(got, fields.DETOK, "skip_special_tokens"))
        key = self.args.detokenize_key
        return {"text": text, "prompt": text} if key == "both" else {key: text}

    @route("GET", "/tokenizer_info")
    def tokenizer_info(self, req: Request) -> Any:
        """vLLM's ``/tokenizer_info`` of the default model, or of ``?model=NAME``.  vLLM
        serves it only under ``--enable-tokenizer-info-endpoint``; mtok always does,
        behind ``--api-key`` like every route: it holds nothing but what the model's
        own tokenizer files say and the chat template its chat requests render."""
        names = parse_qs(req.query).get("model")
        return tokenizer_config(self.tm.model(names[0] if names else None))

    @route("GET", "/health", inline=True)
    def health(self, req: Request) -> Any:
        if not self.healthy():
            state = self.board.state.name.lower()
            return Response({"status": state, "message": self.tm.failure or f"server is {state}"}, 503)
        problem = (read_metrics(self.board.extra(SCHEDULER_SLOT)) or {}).get("engine_problem")
        if problem:  # an upstream engine is unreachable: the balancer should look elsewhere
            return Response({"status": "engine_unavailable", "message": problem}, 503)
        return {"status": "ok"}

    @route("GET", "/health_generate")
    def health_generate(self, req: Request) -> Any:
        obj = GenerateReqInput(input_ids=[0], sampling_params=SamplingParams(max_new_tokens=1, ignore_eos=True))
        try:
            with self.tm.submit(obj, req.watch) as handle:
                handle.results()
        except APIError as e:
            return Response({"status": "unhealthy", "message": e.message}, 503)
        return {"status": "ok"}

    @route("GET", "/get_model_info", "/model_info")
    def get_model_info(self, req: Request) -> Any:
        """The default model, or the one named by ``?model=NAME``."""
        names = parse_qs(req.query).get("model")
        model = self.tm.model(names[0] if names else None)
        tok = model.tokenizer
        return {
            "model_path": tok.path,
            "tokenizer_path": tok.path,
            "served_model_name": model.name,
            "models": list(self.tm.models),
            "is_generation": True,
            "tokenizer_backend": tok.backend,
            "vocab_size": tok.vocab_size,
            "context_length": model.context_length,
            "eos_token_ids": sorted(tok.eos_token_ids),
        }

    @route("GET", "/get_server_info", "/server_info")
    def get_server_info(self, req: Request) -> Any:
        args = dict(vars(self.args))
        args["api_key"] = "***" if args.get("api_key") else None
        workers = [
            {"pid": s.pid, "state": s.state.name.lower(), "served": s.served,
             "heartbeat_age": round(s.heartbeat_age, 3), "ipc_name": s.name or None}
            for s in self.board.worker_slots()
        ]
        try:
            scheduler = self.tm.rpc("get_state")
        except APIError as e:
            scheduler = {"error": e.message}
        if not self.args.api_key:  # request ids are for the key's holder only
            scheduler.pop("running_rids", None)
            scheduler.pop("waiting_rids", None)
        main_pid = os.getppid() if self.args.tokenizer_worker_num > 1 else os.getpid()
        return {
            "version": __version__,
            "pid": main_pid,
            "state": self.board.state.name.lower(),
            "processes": {"main": main_pid,
                          "scheduler": self.board.slot(SCHEDULER_SLOT).pid,
                          # inline, the scheduler's process decodes
                          "detokenizer": self.board.slot(DETOKENIZER_SLOT if self.args.detokenizer == "process"
                                                         else SCHEDULER_SLOT).pid},
            "tokenizer_worker_num": self.args.tokenizer_worker_num,
            "workers": workers,
            "worker_restarts": self.board.restarts,
            "this_worker_pid": self.board.slot(self.slot).pid,
            "scheduler": scheduler,
            "server_args": args,
        }

    @route("GET", "/metrics")
    def metrics_route(self, req: Request) -> Any:
        """Prometheus metrics of the whole server: every process's published
        counters, this worker's own live ones."""
        snaps = [self.metrics.snapshot() if i == self.slot else read_metrics(self.board.extra(i))
                 for i in range(self.board.nslots)]
        workers = self.board.worker_slots()
        extra = [
            ("worker_restarts_total", "Workers replaced after dying or hanging.", self.board.restarts),
            ("workers", "HTTP/tokenizer worker processes configured.", len(workers)),
            ("workers_ready", "Workers up and serving.", sum(w.state == SlotState.READY for w in workers)),
        ]
        return Response(render_metrics(merge_metrics(snaps), extra),
                        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    @route("POST", "/abort_request")
    def abort_request(self, req: Request) -> Any:
        """SGLang's: ``rid`` (a string or a list), or ``abort_all``.  A completion's
        ``id`` is its rid, so it aborts every choice of that completion."""
        body = require_object(req.json())
        check_unknown(body, ("rid", "abort_all", "finished_reason", "abort_message"))
        if get_bool(body, "abort_all", False):
            return {"aborted": self.tm.rpc("abort", abort_all=True)}
        rid = body.get("rid")
        rids = rid if isinstance(rid, list) else [rid]
        if not rids or not all(isinstance(r, str) and r for r in rids):
            raise bad("'rid' is required: a request id or a list of them (or give 'abort_all')", "rid")
        # a chat completion's id is "chatcmpl-<rid>"
        aborted = sum(self.tm.rpc("abort", rid=r[len("chatcmpl-"):] if r.startswith("chatcmpl-") else r)
                      for r in rids)
        return {"rid": rid, "aborted": aborted > 0}

    @route("POST", "/flush_cache")
    @route("GET", "/flush_cache")
    def flush_cache(self, req: Request) -> Any:
        """SGLang's cache flush, forwarded to every engine (which must declare 'flush_cache')."""
        try:
            self.tm.rpc("flush_cache")
        except APIError as e:
            raise APIError(f"cannot flush the cache: {e.message}", 400) from None
        return Response("Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                        "waiting requests, the operation will not be performed.)\n")

    @route("GET", "/ready")
    def ready(self, req: Request) -> Any:
        if not self.healthy():
            return Response({"status": "not ready", "message": self.tm.failure or self.board.state.name.lower()}, 503)
        return {"status": "ready"}

    @route("GET", "/ping")
    @route("POST", "/ping")
    def ping(self, req: Request) -> Any:
        return Response({"status": "ok"} if self.healthy() else {"status": "unhealthy"}, 200 if self.healthy() else 503)

    @route("GET", "/")
    def root(self, req: Request) -> Any:
        return {"name": "mtok", "version": __version__, "models": list(self.tm.models)}


def prompt_texts(prompt: Any, limit: int) -> "tuple[List[str], bool]":
    """``/tokenize``'s ``prompt``: a string, or SGLang's list of them (``--max-prompts-per-request`` at most)."""
    if isinstance(prompt, str):
        return [prompt], False
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        check_batch_size(len(prompt), limit, "prompt")
        return prompt, True
    raise bad("'prompt' must be a string or a non-empty array of strings", "prompt")


def tokenizer_config(model: Any) -> Dict[str, Any]:
    """vLLM's TokenizerInfoResponse: the tokenizer's config (``tokenizer_config.json`` over
    ``special_tokens_map.json``) less its file paths, ``tokenizer_class``, and the default
    chat template this server renders with (its ``--chat-template`` or the model's own)."""
    info = {k: v for k, v in model.tokenizer.files.config.items() if k not in ("vocab_file", "merges_file")}
    info.setdefault("tokenizer_class", "PreTrainedTokenizerFast")  # what transformers loads a bare tokenizer.json as
    default = model.chat.templates.get(DEFAULT_NAME)
    if default is not None:
        info["chat_template"] = default.template.source
    return info


def _since(marks: Dict[str, int], key: str, value: Any) -> Any:
    """The part of ``value`` (a str or list that only grows) not sent yet."""
    start, marks[key] = marks.get(key, 0), len(value)
    return value[start:]
