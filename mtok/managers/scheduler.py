"""The scheduler: continuous batching around a pluggable engine.

Between steps new requests join the running batch (up to
``--max-running-requests``; the rest wait, up to ``--max-queued-requests``,
and beyond that are refused with 503).  Every step advances every running
request by one token; stop tokens, eos, stop strings, stop regexes
(:mod:`mtok.managers.stop_regex`) and ``max_new_tokens`` end a request
here, so no engine step is spent past its end.  Each step's new tokens for
the whole batch go to the detokenizer as one ``BatchTokenIDOutput``.

The :class:`Scheduler` is the process's core and does no I/O: messages go in
through :meth:`Scheduler.handle`, :meth:`Scheduler.advance` runs what is due,
and what the detokenizer must get collects in its outbox
(:meth:`Scheduler.take_outputs`).  The sockets, the status board and the loop
belong to the process's runner, :func:`mtok.managers.runners.run_scheduler_process`,
so a test can drive the scheduler step by step with no socket at all.
"""

from __future__ import annotations

import collections
import logging
import operator
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

from ..wire.args import ServerArgs
from .decoding import DecodeState, IncrementalDecoder, find_stop
from .stop_regex import StopRegexes
from ..engines import EngineContext, EngineOutput, capability_refusal, load_engine
from ..wire.finish import FinishAbort, FinishLength, FinishReason, FinishStop, as_finish
from ..wire.io_struct import (
    AbortReq,
    BatchEmbeddingOutput,
    BatchTokenIDOutput,
    RpcReq,
    SamplingParams,
    TokenizedEmbeddingReqInput,
    TokenizedGenerateReqInput,
)
from .scheduler_async import AsyncEngineSupport, has_health
from ..models import load_tokenizers
from .scheduler_logprobs import LogprobSteps, engine_error
from .scheduler_rpc import SchedulerRpc

logger = logging.getLogger(__name__)


def abort_reason(message: str, status_code: int = 400, param: Optional[str] = None) -> FinishAbort:
    return FinishAbort(message, status_code, param)


class Req:
    """A request inside the scheduler; engines see rid, input_ids, output_ids, sampling_params."""

    __slots__ = (
        "rid", "input_ids", "output_ids", "sampling_params", "worker_address", "model",
        "finished_reason", "new_ids", "decode", "checked", "stop_offset", "tail", "max_stop_len", "regexes",
        "logprobs", "lora_path", "new_logprobs", "engine_finish", "engine_rows", "context",
    )

    def __init__(self, msg: TokenizedGenerateReqInput):
        self.rid = msg.rid
        self.input_ids = msg.input_ids
        self.sampling_params: SamplingParams = msg.sampling_params
        self.worker_address = msg.worker_address
        self.model = msg.model
        self.output_ids: List[int] = []
        self.new_ids: List[int] = []
        self.finished_reason: Optional[FinishReason] = None
        sp = self.sampling_params
        stops = sp.stop or sp.stop_regex
        self.decode = DecodeState(sp.skip_special_tokens, sp.spaces_between_special_tokens) if stops else None
        self.checked = 0  # length of decoded text already searched for stop strings
        self.stop_offset: Optional[int] = None
        self.tail = ""  # the last committed characters, as many as the longest stop string
        self.max_stop_len = max(map(len, sp.stop), default=0)
        # checked by the TokenizerManager (mtok.managers.limits), so compiling cannot fail here
        self.regexes = StopRegexes(sp.stop_regex) if sp.stop_regex else None
        self.logprobs = msg.logprobs
        self.lora_path = msg.lora_path
        self.new_logprobs: Optional[Dict[str, list]] = None  # since the last output, when logprobs are on
        self.engine_finish: Optional[Dict[str, Any]] = None  # an asynchronous engine ended it (EngineOutput)
        self.engine_rows: Optional[Any] = None  # this step's EngineOutput, for its logprob rows
        # the prompt's last ids its text decodes after (decoding.CONTEXT_IDS); sent
        # to the detokenizer with the request's first output, then dropped
        self.context: Optional[List[int]] = None



class ModelRuntime:
    """One model's engine, and the tokenizer that stop strings and eos need."""

    def __init__(self, name: str, tokenizer: Any, engine_spec: str, step_delay: float):
        self.name = name
        self.tokenizer = tokenizer
        self.engine = load_engine(engine_spec, EngineContext(name, tokenizer, step_delay))
        self.decoder = IncrementalDecoder(tokenizer)
        self.eos_ids = tokenizer.eos_token_ids
        self.vocab_size = tokenizer.vocab_size


def by_model(reqs: Sequence[Any]) -> Dict[str, List[Any]]:
    groups: Dict[str, List[Any]] = {}
    for r in reqs:
        groups.setdefault(r.model, []).append(r)
    return groups


class Scheduler(LogprobSteps, AsyncEngineSupport, SchedulerRpc):
    """Messages in (:meth:`handle`), steps when due (:meth:`advance`), messages
    out (:meth:`take_outputs`).  Constructing one loads the models' tokenizers
    and engines and touches nothing else: no socket, no thread."""

    def __init__(self, server_args: ServerArgs, tokenizers: Optional[Dict[str, Any]] = None):
        self.server_args = server_args
        specs = server_args.model_specs()
        tokenizers = tokenizers or load_tokenizers(specs, server_args.tokenizer_backend)
        self.models = {s.name: ModelRuntime(s.name, tokenizers[s.name], s.engine, server_args.engine_step_delay)
                       for s in specs}
        self.default_model = specs[0].name
        self.waiting: Deque[Req] = collections.deque()
        self.running: List[Req] = []
        self.reqs: Dict[str, Req] = {}
        self.pending_output: List[Req] = []  # refused or aborted since the last step
        self.embed_queue: List[TokenizedEmbeddingReqInput] = []
        self.outbox: List[Any] = []  # for the detokenizer, in order; the runner sends it
        self.step_delay = server_args.engine_step_delay
        self.next_step = 0.0  # time.monotonic() at which the next engine step is due
        # an engine that can fall ill (an upstream) is asked now and then, even when idle
        self.idle_timeout = 1.0 if any(has_health(rt.engine) for rt in self.models.values()) else None
        # running plus waiting; past this a request is refused (503) at once
        self.capacity = server_args.max_running_requests + server_args.max_queued_requests
        self._dispatch: Dict[type, Callable[[Any], None]] = {
            TokenizedGenerateReqInput: self.handle_generate,
            TokenizedEmbeddingReqInput: self.handle_embed,
            AbortReq: self.handle_abort,
            RpcReq: self.handle_rpc,
        }

    # -- the runner's interface ----------------------------------------------------
    def handle(self, msg: Any) -> None:
        """Take one message from a TokenizerManager (or the router)."""
        handler = self._dispatch.get(type(msg))
        if handler is None:
            logger.error("unexpected message %s", type(msg).__name__)
        else:
            handler(msg)

    def wait_time(self) -> Optional[float]:
        """How long the runner may wait for messages before :meth:`advance` has
        work (None: until one comes)."""
        if self.running or self.waiting:
            return max(0.0, self.next_step - time.monotonic())
        return self.idle_timeout

    def advance(self) -> None:
        """Embed what is queued, run an engine step if one is due, and flush
        refusals and aborts; the results wait in the outbox."""
        if self.embed_queue:
            self.run_embeddings()
        started = time.monotonic()
        if (self.running or self.waiting) and started >= self.next_step:
            self.run_step()
            self.next_step = started + self.step_delay
        elif self.pending_output:
            self.queue_outputs([])

    def take_outputs(self) -> List[Any]:
        """What the detokenizer should get since the last call, in order."""
        out, self.outbox = self.outbox, []
        return out

    def gauges(self) -> tuple:
        """(running, waiting, engine problem or None): what /metrics and /health show."""
        problem = self.engine_problem() if self.idle_timeout is not None else None
        return len(self.running), len(self.waiting), problem

    def drop_all(self) -> None:
        """Forget every request: their results can no longer be delivered."""
        self.waiting.clear()
        self.running = []
        self.reqs.clear()
        self.pending_output = []
        self.outbox = []

    # -- messages ------------------------------------------------------------------
    def handle_generate(self, msg: TokenizedGenerateReqInput) -> None:
        req = Req(msg)
        req.model = req.model or self.default_model
        refusal = capability_refusal(self.models[req.model].engine, req) if req.model in self.models else None
        if req.model not in self.models:
            req.finished_reason = abort_reason(f"unknown model {req.model!r}", 404)
        elif refusal is not None:
            req.finished_reason = abort_reason(refusal[0], 400, refusal[1])
        elif req.logprobs is not None and req.logprobs.start_len > len(req.input_ids):
            req.finished_reason = abort_reason(f"'logprob_start_len' ({req.logprobs.start_len}) exceeds the "
                                               f"prompt's {len(req.input_ids)} tokens", 400, "logprob_start_len")
        elif msg.rid in self.reqs:
            req.finished_reason = abort_reason(f"request id {msg.rid!r} is already in use", 400)
        elif len(self.reqs) >= self.capacity:
            req.finished_reason = abort_reason("the server is at capacity; retry later", 503)
        else:
            self.reqs[req.rid] = req
            self.waiting.append(req)
            sp = req.sampling_params
            req.context = self.models[req.model].decoder.context(req.input_ids, sp.skip_special_tokens,
                                                                 sp.spaces_between_special_tokens) or None
            if req.decode is not None:
                req.decode.start_after(req.context)
            return
        self.pending_output.append(req)

    def handle_embed(self, msg: TokenizedEmbeddingReqInput) -> None:
        self.embed_queue.append(msg)

    def handle_abort(self, msg: AbortReq) -> None:
        if msg.abort_all_of is not None:
            victims = [r for r in self.reqs.values() if r.worker_address == msg.abort_all_of]
            if victims:
                logger.info("aborting %d request(s) of departed worker %s", len(victims), msg.abort_all_of)
        else:  # only the worker that sent a request may abort it by rid
            req = self.reqs.get(msg.rid)  # type: ignore[arg-type]
            victims = [req] if req is not None and req.worker_address == msg.worker_address else []
        for req in victims:
            self.abort(req, abort_reason("aborted", 499))
        if msg.abort_all_of is not None:
            # Flush the aborts first, then let the detokenizer forget the worker.
            self.queue_outputs([])
            self.outbox.append(msg)

    def abort(self, req: Req, reason: Dict[str, Any]) -> None:
        req.finished_reason = reason
        self.reqs.pop(req.rid, None)
        if req in self.running:
            self.running.remove(req)
            self.models[req.model].engine.finish_request(req)
        else:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        self.pending_output.append(req)

    # -- a step --------------------------------------------------------------------
    def run_step(self) -> None:
        limit = self.server_args.max_running_requests
        while self.waiting and len(self.running) < limit:
            req = self.waiting.popleft()
            self.models[req.model].engine.add_request(req)
            if req.logprobs is not None and not self.models[req.model].engine.asynchronous:
                self.prompt_logprobs(req)
                if req.finished_reason is not None:
                    continue
            if req.sampling_params.max_new_tokens == 0:  # prefill only: scored, nothing generated
                req.finished_reason = FinishLength(0)
                self.reqs.pop(req.rid, None)
                self.models[req.model].engine.finish_request(req)
                self.pending_output.append(req)
                continue
            self.running.append(req)
        for name, group in by_model(self.running).items():
            self.step_model(self.models[name], group)
        batch = [r for r in self.running if r.new_ids or r.engine_finish is not None]
        for req in batch:
            if req.engine_rows is not None and req.logprobs is not None:
                self.engine_logprobs(req, req.engine_rows)  # an asynchronous engine sent them with the tokens
            elif req.logprobs is not None:
                self.output_logprobs(req)
        self.check_finished([r for r in batch if r.new_ids])  # not those an engine ended with no new token
        for req in batch:
            if req.finished_reason is None and req.engine_finish is not None:
                req.finished_reason = req.engine_finish
        # an asynchronous engine may have had nothing for some: they stay as they are
        self.running = [r for r in self.running if not (r.new_ids or r.engine_finish is not None)]
        for req in batch:
            if req.finished_reason is None:
                self.running.append(req)
            else:
                self.reqs.pop(req.rid, None)
                self.models[req.model].engine.finish_request(req)
        self.queue_outputs(batch)

    def step_model(self, rt: ModelRuntime, group: List[Req]) -> None:
        """One engine step for one model's requests; a failing engine fails only them."""
        try:
            outs = rt.engine.step(group)
            if len(outs) != len(group):
                raise RuntimeError(f"engine returned {len(outs)} tokens for a batch of {len(group)}")
            outs = [o if isinstance(o, EngineOutput) else EngineOutput([o]) for o in outs]
            for o in outs:
                o.ids = [operator.index(t) for t in o.ids]  # numpy ints welcome, floats refused
            bad = [t for o in outs for t in o.ids if not 0 <= t < rt.vocab_size]
            if bad:  # an engine's bug must not reach the detokenizer as text
                raise RuntimeError(f"engine returned token ids outside the vocabulary: {bad[:5]}")
        except NotImplementedError as e:  # e.g. an embedding model asked to generate
            for req in group:
                self.abort(req, abort_reason(f"{rt.name}: {e}", 400))
            return
        except Exception as e:
            logger.exception("engine step of %s failed; aborting its batch", rt.name)
            for req in group:
                self.abort(req, engine_error(e))
            return
        for req, out in zip(group, outs):
            req.output_ids.extend(out.ids)
            req.new_ids = out.ids
            req.engine_finish = as_finish(out.finish)
            req.engine_rows = out if rt.engine.asynchronous else None

    def check_finished(self, batch: Sequence[Req]) -> None:
        with_stops = []
        for req in batch:
            # this step's tokens: several when an asynchronous engine sent them (new_ids), else the last one
            new_ids = req.new_ids if len(req.new_ids) > 1 else req.output_ids[-1:]
            sp = req.sampling_params
            base = len(req.output_ids) - len(new_ids)
            for k, tok in enumerate(new_ids):
                n = base + k + 1
                if n >= sp.min_new_tokens and (
                        tok in sp.stop_token_ids or (not sp.ignore_eos and tok in self.models[req.model].eos_ids)):
                    req.finished_reason = FinishStop(tok)
                elif n >= sp.max_new_tokens:
                    req.finished_reason = FinishLength(n)
                if req.finished_reason is not None:
                    self._cut(req, k + 1)
                    break
            if req.decode is not None and (req.finished_reason is None or isinstance(req.finished_reason, FinishLength)):
                if len(req.new_ids) > 1:
                    self.stop_strings_one_by_one(req)
                else:
                    req.decode.ids.extend(new_ids)
                    with_stops.append(req)
        for name, group in by_model(with_stops).items():
            final = [r.finished_reason is not None for r in group]
            new_texts = self.models[name].decoder.step([r.decode for r in group], final)
            for req, new in zip(group, new_texts):
                self.check_stop_strings(req, new)

    @staticmethod
    def check_stop_strings(req: Req, new: str) -> None:
        """Search the text that is new since the last check (plus enough before
        it for a stop string to straddle the boundary); only that tail is kept."""
        sp = req.sampling_params
        committed = req.tail + new
        view = committed + req.decode.pending
        base = req.decode.length - len(committed)  # where view[0] sits in the whole text
        start, req.checked = req.checked - base, base + len(view)
        req.tail = committed[-req.max_stop_len:] if req.max_stop_len else ""
        ready = len(req.output_ids) >= sp.min_new_tokens
        # regexes see committed text only, each character once (stop strings also search the pending tail)
        hits = [req.regexes.feed(new, ready)] if req.regexes is not None else []
        if ready and sp.stop:
            hit = find_stop(view, sp.stop, start)
            hits.append(None if hit is None else (base + hit[0], hit[1]))
        first = min((h for h in hits if h is not None), default=None, key=lambda h: h[0])
        if first is not None:
            req.finished_reason = FinishStop(first[1])
            req.stop_offset = first[0]

    def queue_outputs(self, batch: Sequence[Req]) -> None:
        reqs = list(batch) + self.pending_output
        self.pending_output = []
        if not reqs:
            return
        out = BatchTokenIDOutput(rids=[r.rid for r in reqs], worker_addresses=[r.worker_address for r in reqs])
        if len(self.models) > 1:
            out.models = [r.model for r in reqs]
        if any(r.logprobs is not None for r in reqs):
            out.logprobs = [r.new_logprobs for r in reqs]
            out.logprob_texts = [r.logprobs is not None and r.logprobs.with_text for r in reqs]
        for r in reqs:
            sp = r.sampling_params
            out.finished_reasons.append(r.finished_reason)
            out.decode_ids.append(r.new_ids)
            out.prompt_tokens.append(len(r.input_ids))
            out.completion_tokens.append(len(r.output_ids))
            out.skip_special_tokens.append(sp.skip_special_tokens)
            out.spaces_between_special_tokens.append(sp.spaces_between_special_tokens)
            out.no_stop_trim.append(sp.no_stop_trim)
            out.stop.append(sp.stop or None)
            out.stop_str_offsets.append(r.stop_offset)
            out.append_sparse("decode_contexts", r.context)
            r.context = None  # the detokenizer has it from now on
            out.append_sparse("stop_holds", r.regexes.hold_from() if r.regexes is not None and not sp.no_stop_trim
                     else None)
            r.new_ids = []
            r.new_logprobs = None
        self.outbox.append(out)

    def run_embeddings(self) -> None:
        """Embed everything queued, one engine call per model, one message in all."""
        queued, self.embed_queue = self.embed_queue, []
        for r in queued:
            r.model = r.model or self.default_model
        batch: List[TokenizedEmbeddingReqInput] = []
        out = BatchEmbeddingOutput()
        for name, group in by_model(queued).items():
            batch += group
            rt = self.models.get(name)
            try:
                if rt is None:
                    raise LookupError(f"unknown model {name!r}")
                vectors = rt.engine.embed(group)
                if len(vectors) != len(group):
                    raise RuntimeError(f"engine returned {len(vectors)} embeddings for {len(group)} inputs")
                out.embeddings += [list(map(float, v)) for v in vectors]
                out.finished_reasons += [FinishStop() for _ in group]
            except Exception as e:
                logger.warning("embedding with %s failed: %s", name, e)
                status = 404 if rt is None else 400 if isinstance(e, NotImplementedError) else 500
                out.embeddings += [[] for _ in group]
                out.finished_reasons += [abort_reason(str(e), status) for _ in group]
        out.rids = [r.rid for r in batch]
        out.worker_addresses = [r.worker_address for r in batch]
        out.prompt_tokens = [len(r.input_ids) for r in batch]
        self.outbox.append(out)

