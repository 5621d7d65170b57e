"""The HTTP process's half of the pipeline: tokenize, send, wait for text.

:class:`TokenizerManager` runs inside the HTTP server process.  Handler
threads call :meth:`generate_request`, which tokenizes, sends to the
scheduler and then yields each request's :class:`ReqState` as the
detokenizer's pieces arrive on a receiver thread (``handle_loop``).

:class:`TokenizerWorker` is the multi-worker variant.  It overrides only where
requests go and where results come back: its own IPC name, and a
:class:`~mtok.wire.ipc.SenderWrapper` that stamps that name on everything sent.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from ..wire.args import PortArgs, ServerArgs
from ..api.chat_templates import ModelChat, load_chats
from ..wire.finish import FinishAbort, FinishReason
from ..wire.io_struct import (
    AbortReq,
    BatchEmbeddingOutput,
    BatchStrOutput,
    GenerateReqInput,
    RpcOutput,
    RpcReq,
    ServerFailure,
    TokenizedEmbeddingReqInput,
    TokenizedGenerateReqInput,
)
from ..wire.ipc import Receiver, Sender, SenderWrapper
from ..api.limits import check_batch_size, check_client_rids, check_stops, new_rid
from ..wire.metrics import Metrics
from .models import load_tokenizers
from ..tokenizer import Tokenizer
from ..api.validate import APIError, bad, show

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 65536
WATCH_AFTER = 0.05  # seconds a request waits before its connection is watched for hang-ups
ENCODE_SLICE = 256  # prompts tokenized between two looks at the client's connection


class ClientDisconnected(Exception):
    """The HTTP client went away while its request was in flight."""


_DISCONNECTED = object()


class ReqState:
    """What the HTTP side knows of one request; written by the receiver thread."""

    __slots__ = (
        "rid", "index", "mailbox", "stream", "text", "output_ids", "finished_reason",
        "prompt_tokens", "completion_tokens", "created", "first_token_at", "embedding", "queued", "logprobs",
    )

    def __init__(self, rid: str, index: int, mailbox: "queue.SimpleQueue[Any]", stream: bool, prompt_tokens: int,
                 created: Optional[float] = None):
        self.rid = rid
        self.index = index
        self.mailbox = mailbox
        self.stream = stream
        self.text = ""
        self.output_ids: List[int] = []
        self.finished_reason: Optional[FinishReason] = None
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.created = time.monotonic() if created is None else created
        self.first_token_at: Optional[float] = None
        self.embedding: Optional[List[float]] = None
        self.queued = False  # in its mailbox already: a reader that lags sees only the latest state
        self.logprobs: Optional[Dict[str, list]] = None  # SGLang's meta_info keys, when asked for

    def notify(self) -> None:
        if not self.queued:
            self.queued = True
            self.mailbox.put(self)

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    def error(self) -> Optional[APIError]:
        """The HTTP error a finish stands for (refused, failed), if any."""
        reason = self.finished_reason
        status = reason.http_status() if reason is not None else None
        if status is None:
            return None
        assert isinstance(reason, FinishAbort)
        headers = {"Retry-After": "1"} if status == 503 else None
        return APIError(reason.message, status, reason.param, headers)


class TokenizerManager:
    def __init__(self, server_args: ServerArgs, port_args: PortArgs, authkey: bytes):
        self.server_args = server_args
        self.port_args = port_args
        self.authkey = authkey
        specs = server_args.model_specs()
        tokenizers = load_tokenizers(specs, server_args.tokenizer_backend)
        self.models: Dict[str, ModelEntry] = {
            s.name: ModelEntry(s.name, tokenizers[s.name],
                               server_args.context_length or tokenizers[s.name].max_model_len or DEFAULT_CONTEXT_LENGTH)
            for s in specs
        }
        for name, chat in load_chats(server_args, tokenizers).items():
            self.models[name].chat = chat
        self.default_model = self.models[specs[0].name]
        self.rid_to_state: Dict[str, ReqState] = {}
        self.rpc_waiters: Dict[str, "queue.SimpleQueue[RpcOutput]"] = {}
        self.failure: Optional[str] = None
        self.metrics = Metrics()  # this process's counters; the HTTP server counts into them too
        self.recv_from_detokenizer = Receiver(self.inbox, authkey)
        self.send_to_scheduler = self.make_sender()
        self._dispatch = {
            BatchStrOutput: self.handle_batch_output,
            BatchEmbeddingOutput: self.handle_embedding_output,
            RpcOutput: self.handle_rpc_output,
            ServerFailure: lambda m: self.fail_all(m.message),
        }
        threading.Thread(target=self.handle_loop, name="tm-recv", daemon=True).start()

    # -- routing hooks (TokenizerWorker overrides these) ---------------------------
    @property
    def inbox(self) -> str:
        return self.port_args.reply_inbox

    def make_sender(self) -> Any:
        return Sender(self.port_args.scheduler_inbox, self.authkey)

    # -- models --------------------------------------------------------------------
    def model(self, name: Optional[str]) -> "ModelEntry":
        """The model a request names; None means the default (the first).  With
        one model any name is served (SGLang does the same: clients send
        "default" or whatever they were configured with)."""
        if name is None or len(self.models) == 1:
            return self.default_model
        entry = self.models.get(name)
        if entry is None:
            raise APIError(f"the model {name!r} does not exist; this server has "
                           f"{', '.join(map(repr, self.models))}", 404, param="model")
        return entry

    def new_rid(self) -> str:
        """Unguessable, and never one a client may choose (see :mod:`mtok.api.limits`)."""
        return new_rid()

    @property
    def tokenizer(self) -> Tokenizer:
        return self.default_model.tokenizer

    # -- requests ------------------------------------------------------------------
    def tokenize_request(self, obj: GenerateReqInput, watch: Optional[Any] = None) -> List[TokenizedGenerateReqInput]:
        model = self.model(obj.model)
        self.check_skip_tokenizer_init(obj)
        args = self.server_args
        if not obj.rid_is_ours:
            check_client_rids(obj.rid if isinstance(obj.rid, list) else [obj.rid] if obj.rid else None)
        if obj.text is not None:
            texts = obj.text if obj.is_batch else [obj.text]
            check_batch_size(len(texts), args.max_prompts_per_request, "text")  # type: ignore[arg-type]
            prompts = self.encode_batch(model, texts, watch)  # type: ignore[arg-type]
        else:
            prompts = obj.input_ids if obj.is_batch else [obj.input_ids]  # type: ignore[list-item]
            check_batch_size(len(prompts), args.max_prompts_per_request, "input_ids")  # type: ignore[arg-type]
            model.check_ids(prompts, "input_ids")  # type: ignore[arg-type]
        self.assign_rids(obj)
        rids = obj.rid if isinstance(obj.rid, list) else [obj.rid]
        out = []
        checked = None
        for i, ids in enumerate(prompts):
            sp = obj.params_at(i)
            if sp is not checked:
                check_stops(sp.stop, args.max_stop_strings, args.max_stop_chars)
                checked = sp
            where = f" (prompt {i})" if obj.is_batch else ""
            if not ids:
                raise bad(f"the prompt is empty{where}", "text" if obj.text is not None else "input_ids")
            if len(ids) + sp.max_new_tokens > model.context_length:
                raise bad(
                    f"this model's maximum context length is {model.context_length} tokens; the prompt has "
                    f"{len(ids)} and {show(sp.max_new_tokens)} more were requested{where}",
                    "max_new_tokens",
                )
            model.check_ids([sp.stop_token_ids], "stop_token_ids")
            # n > 1: parallel samples, each its own request "<rid>-<j>" (abort_request takes <rid>)
            samples = [rids[i]] if sp.n == 1 else [f"{rids[i]}-{j}" for j in range(sp.n)]
            for rid in samples:
                out.append(TokenizedGenerateReqInput(rid=rid, input_ids=ids, sampling_params=sp, stream=obj.stream,
                                                     model=model.name, logprobs=obj.logprobs,
                                                     lora_path=obj.lora_path))
        return out

    def check_skip_tokenizer_init(self, obj: GenerateReqInput) -> None:
        """With --skip-tokenizer-init there is no text on either side (as in SGLang,
        tokenizer_manager.py: "cannot accept text prompts"): text and stop strings are 400s."""
        if not self.server_args.skip_tokenizer_init:
            return
        if obj.text is not None:
            raise bad("this server runs with --skip-tokenizer-init: give 'input_ids', not text", "text")
        if any(obj.params_at(i).stop for i in range(obj.batch_size)):
            raise bad("this server runs with --skip-tokenizer-init: it cannot match stop strings; "
                      "use 'stop_token_ids'", "stop")

    def assign_rids(self, obj: GenerateReqInput) -> str:
        """Give ``obj`` one rid per prompt when the client gave none, and return the
        id of the whole request (a completion's id): its rid, or for a batch the
        prefix of the rids made here (``/abort_request`` on it aborts them all),
        or the first of the client's."""
        if obj.rid is None:
            base = self.new_rid()
            obj.rid = [f"{base}-{i}" for i in range(obj.batch_size)] if obj.is_batch else base
            obj.rid_is_ours = True
            return base
        return obj.rid[0] if isinstance(obj.rid, list) else obj.rid

    @staticmethod
    def encode_batch(model: "ModelEntry", texts: List[str], watch: Optional[Any]) -> List[List[int]]:
        """Tokenize in slices, and stop if the client has gone meanwhile."""
        out: List[List[int]] = []
        for start in range(0, len(texts), ENCODE_SLICE):
            if start and watch is not None and watch.gone():
                raise ClientDisconnected()
            out.extend(model.tokenizer.encode_batch(texts[start : start + ENCODE_SLICE]))
        return out

    def generate_request(self, obj: GenerateReqInput, watch: Optional[Any] = None) -> Iterator[ReqState]:
        """Yield each request's state as it changes (every step when streaming,
        else once at the end), until all have finished.  Closing the iterator
        early aborts whatever has not finished."""
        arrived = time.monotonic()  # latency and TTFT count tokenization too
        reqs = self.tokenize_request(obj, watch)
        return self._run(reqs, obj.stream, watch, arrived)

    def _run(self, reqs: List[Any], stream: bool, watch: Optional[Any], arrived: Optional[float] = None
             ) -> Iterator[ReqState]:
        mailbox: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        states = []
        taken = set()
        for i, r in enumerate(reqs):
            if r.rid in self.rid_to_state or r.rid in taken:
                raise bad(f"request id {r.rid!r} is already in use", "rid")
            taken.add(r.rid)
            st = ReqState(r.rid, i, mailbox, stream, len(r.input_ids), arrived)
            if getattr(r, "logprobs", None) is not None:
                st.logprobs = {}
            states.append(st)
        self._check_alive()
        for st in states:
            self.rid_to_state[st.rid] = st
        done = set()
        seen: Dict[str, tuple] = {}
        watching = False
        deadline = time.monotonic() + self.server_args.request_timeout
        try:
            for r in reqs:
                self._send(r)
            while len(done) < len(states):
                st, watching = self._next(mailbox, deadline, watch, watching)
                if st is None:
                    if time.monotonic() >= deadline:
                        self._expire(states, done)
                        deadline = float("inf")
                    continue
                if st is _DISCONNECTED:
                    raise ClientDisconnected()
                st.queued = False
                if st.rid in done:
                    continue
                if st.finished:
                    done.add(st.rid)
                else:
                    mark = (len(st.text), len(st.output_ids))
                    if seen.get(st.rid) == mark:
                        continue  # notified again before it changed (a benign race)
                    seen[st.rid] = mark
                yield st
        finally:
            if watching:
                watch.stop()
            for st in states:
                if self.rid_to_state.pop(st.rid, None) is not None and st.rid not in done:
                    self.abort_request(st.rid)

    @staticmethod
    def _next(mailbox: "queue.SimpleQueue[Any]", deadline: float, watch: Optional[Any], watching: bool
              ) -> "tuple[Any, bool]":
        """The next state to arrive, or None when the wait ends without one.
        Most requests are answered within milliseconds; only those still
        waiting after WATCH_AFTER are worth watching for a client hang-up."""
        wait = deadline - time.monotonic()
        if watch is not None and not watching:
            wait = min(wait, WATCH_AFTER)
        try:
            return mailbox.get(timeout=None if wait == float("inf") else max(0.0, wait)), watching
        except queue.Empty:
            if watch is not None and not watching and time.monotonic() < deadline:
                watch.start(lambda: mailbox.put(_DISCONNECTED))
                watching = True
            return None, watching

    def _expire(self, states: List[ReqState], done: set) -> None:
        """The server-side deadline passed: what is unfinished fails with 504."""
        timeout = self.server_args.request_timeout
        reason = FinishAbort(f"the request did not finish within {timeout:g} s (--request-timeout)", 504)
        for st in states:
            if st.rid not in done and self.rid_to_state.pop(st.rid, None) is not None:
                self.abort_request(st.rid)
                st.finished_reason = reason
                st.notify()

    def _send(self, obj: Any) -> None:
        try:
            self.send_to_scheduler.send(obj)
        except ConnectionError as e:
            raise APIError(f"the scheduler is unreachable: {e}", 503, headers={"Retry-After": "1"}) from None

    def _check_alive(self) -> None:
        if self.failure:
            raise APIError(self.failure, 503)

    def embed_request(self, inputs: List[Any], model_name: Optional[str], watch: Optional[Any] = None
                      ) -> List[ReqState]:
        """Embed texts or token lists; the states come back in input order."""
        model = self.model(model_name)
        check_batch_size(len(inputs), self.server_args.max_prompts_per_request, "input")
        texts = [x for x in inputs if isinstance(x, str)]
        encoded = iter(model.tokenizer.encode_batch(texts) if texts else [])
        prompts = [next(encoded) if isinstance(x, str) else x for x in inputs]
        model.check_ids(prompts, "input")
        reqs = []
        for ids in prompts:
            if not ids:
                raise bad("an input is empty", "input")
            if len(ids) > model.context_length:
                raise bad(f"an input has {len(ids)} tokens; the maximum is {model.context_length}", "input")
            reqs.append(TokenizedEmbeddingReqInput(rid=self.new_rid(), input_ids=ids, model=model.name))
        states: List[Optional[ReqState]] = [None] * len(reqs)
        for st in self._run(reqs, False, watch):
            states[st.index] = st
        return states  # type: ignore[return-value]

    def abort_request(self, rid: str) -> None:
        try:
            self.send_to_scheduler.send(AbortReq(rid=rid))
        except ConnectionError:
            pass  # nothing left to abort in

    def rpc(self, method: str, timeout: float = 5.0, **params: Any) -> Any:
        self._check_alive()
        rid = self.new_rid()
        waiter: "queue.SimpleQueue[RpcOutput]" = queue.SimpleQueue()
        self.rpc_waiters[rid] = waiter
        try:
            self._send(RpcReq(rid=rid, method=method, params=params))
            try:
                out = waiter.get(timeout=timeout)
            except queue.Empty:
                raise APIError(f"the scheduler did not answer {method!r} within {timeout:g} s", 503) from None
        finally:
            self.rpc_waiters.pop(rid, None)
        if out.error:
            raise APIError(out.error, 500)
        return out.result

    # -- results -------------------------------------------------------------------
    def handle_loop(self) -> None:
        while True:
            for msg in self.recv_from_detokenizer.recv_all():
                handler = self._dispatch.get(type(msg))
                if handler is None:
                    logger.error("unexpected message %s", type(msg).__name__)
                    continue
                try:
                    handler(msg)
                except Exception:  # one bad message must not stop every request
                    logger.exception("failed to handle %s", type(msg).__name__)

    def handle_batch_output(self, out: BatchStrOutput) -> None:
        now = time.monotonic()
        for i, rid in enumerate(out.rids):
            st = self.rid_to_state.get(rid)
            if st is None:
                continue  # aborted or disconnected; its late pieces are dropped
            delta = out.output_strs[i]
            if delta:
                st.text += delta
            ids = out.output_ids[i]
            if ids:
                st.output_ids.extend(ids)
                if st.first_token_at is None:
                    st.first_token_at = now
            st.completion_tokens = out.completion_tokens[i]
            if out.logprobs is not None and out.logprobs[i] and st.logprobs is not None:
                for key, rows in out.logprobs[i].items():
                    st.logprobs.setdefault(key, []).extend(rows)
            reason = out.finished_reasons[i]
            if reason is not None:
                st.finished_reason = reason
                self.rid_to_state.pop(rid, None)
                st.notify()
                ttft = st.first_token_at - st.created if st.first_token_at is not None else None
                self.metrics.observe_tokens(st.prompt_tokens, st.completion_tokens, ttft)
            elif st.stream:
                st.notify()

    def handle_embedding_output(self, out: BatchEmbeddingOutput) -> None:
        for i, rid in enumerate(out.rids):
            st = self.rid_to_state.pop(rid, None)
            if st is not None:
                st.embedding = out.embeddings[i]
                st.finished_reason = out.finished_reasons[i]
                st.notify()

    def handle_rpc_output(self, out: RpcOutput) -> None:
        waiter = self.rpc_waiters.get(out.rid)
        if waiter is not None:
            waiter.put(out)

    def fail_all(self, message: str) -> None:
        """A core process died: every request in flight ends with a 503."""
        self.failure = message
        reason = FinishAbort(message, 503)
        for rid in list(self.rid_to_state):
            st = self.rid_to_state.pop(rid, None)
            if st is not None:
                st.finished_reason = reason
                st.notify()
        for rid, waiter in list(self.rpc_waiters.items()):
            waiter.put(RpcOutput(rid=rid, error=message))

    @property
    def num_in_flight(self) -> int:
        return len(self.rid_to_state)


@dataclass
class ModelEntry:
    name: str
    tokenizer: Tokenizer
    context_length: int
    chat: ModelChat = field(default_factory=lambda: ModelChat(None))  # its chat template(s), if any

    def check_ids(self, seqs: List[List[int]], param: str) -> None:
        n = self.tokenizer.vocab_size
        for ids in seqs:
            for t in ids:
                if not 0 <= t < n:
                    raise bad(f"token id {show(t)} is out of range for a vocabulary of {n}", param)


class TokenizerWorker(TokenizerManager):
    """A TokenizerManager in one of N worker processes (multi-worker mode)."""

    def __init__(self, server_args: ServerArgs, port_args: PortArgs, authkey: bytes, worker_address: str):
        self.worker_address = worker_address
        super().__init__(server_args, port_args, authkey)

    @property
    def inbox(self) -> str:
        return self.worker_address

    def make_sender(self) -> Any:
        return SenderWrapper(Sender(self.port_args.router_inbox, self.authkey), self.worker_address)
