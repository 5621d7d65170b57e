"""The HTTP process's half of the pipeline: tokenize, send, wait for text.

:class:`TokenizerManager` is a plain object, messages in and messages out:
handler threads call :meth:`~TokenizerManager.submit`, which tokenizes, sends
to the scheduler and returns a :class:`~mtok.managers.request_handle.RequestHandle`
that yields each request's :class:`~mtok.managers.request_handle.ReqState` as the
detokenizer's pieces arrive; :meth:`~TokenizerManager.handle_message` takes
those pieces in.  Its constructor loads tokenizers and opens nothing, so a
test can drive one with no socket directory (give it an ``outbox``).

:meth:`~TokenizerManager.start` and :meth:`~TokenizerManager.close` are the
runner's pair (gunicorn's ``Worker.__init__`` / ``init_process`` split): they
open and close the inbox, the sender and the receiver thread.  The process
that serves HTTP calls them: the main process with one worker (``serve``,
``offline``), :func:`mtok.worker.run_tokenizer_worker_process` with several.

:class:`TokenizerWorker` is the multi-worker variant.  It overrides only where
requests go and where results come back: its own IPC name, and a
:class:`~mtok.wire.ipc.SenderWrapper` that stamps that name on everything sent.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..wire.args import PortArgs, ServerArgs
from ..chat_templates import load_chats
from ..wire.finish import FinishAbort
from ..wire.io_struct import (
    AbortReq,
    BatchEmbeddingOutput,
    BatchStrOutput,
    GenerateReqInput,
    RpcOutput,
    RpcReq,
    ServerFailure,
)
from ..wire.ipc import SharedSender, Receiver, Sender, SenderWrapper
from .limits import new_rid
from ..wire.metrics import Metrics
from ..models import ModelEntry, load_tokenizers
from .batch_encode import BatchEncoder, usable_cores
from .prepare import embedding_reqs, generate_reqs, given_ids, prompt_texts
from .request_handle import ReqState, RequestHandle
from ..tokenizer import Tokenizer
from ..validate import APIError, bad

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 65536
CLOSE_JOIN = 5.0  # seconds close() waits for the receiver thread


def _unreachable(error: ConnectionError) -> str:
    return f"the scheduler is unreachable: {error}"


class TokenizerManager:
    """Tokenize, send, and hand each request's pieces to whoever submitted it.

    ``outbox`` is where requests for the scheduler go (anything with
    ``send(obj)``); ``start()`` opens the real one when none was given.
    """

    def __init__(self, server_args: ServerArgs, port_args: PortArgs, authkey: bytes, outbox: Any = None):
        self.server_args = server_args
        self.port_args = port_args
        self.authkey = authkey
        self.models = self._load_models(server_args)
        self.default_model = next(iter(self.models.values()))
        self.rid_to_state: Dict[str, ReqState] = {}
        # submit_all's: many calls' prompts tokenized together, on two threads while the workers leave a core free
        self.encoder = BatchEncoder(split=server_args.tokenizer_worker_num < usable_cores())
        self.rpc_waiters: Dict[str, "queue.SimpleQueue[RpcOutput]"] = {}
        self.failure: Optional[str] = None
        self.metrics = Metrics()  # this process's counters; the HTTP server counts into them too
        self.send_to_scheduler: Any = outbox
        self.recv_from_detokenizer: Optional[Receiver] = None
        self._receiver_thread: Optional[threading.Thread] = None
        self._dispatch = {
            BatchStrOutput: self.handle_batch_output,
            BatchEmbeddingOutput: self.handle_embedding_output,
            RpcOutput: self.handle_rpc_output,
            ServerFailure: lambda m: self.fail_all(m.message),
        }

    @staticmethod
    def _load_models(args: ServerArgs) -> Dict[str, ModelEntry]:
        specs = args.model_specs()
        tokenizers = load_tokenizers(specs, args.tokenizer_backend)
        models = {
            s.name: ModelEntry(s.name, tokenizers[s.name],
                               args.context_length or tokenizers[s.name].max_model_len or DEFAULT_CONTEXT_LENGTH)
            for s in specs
        }
        for name, chat in load_chats(args, tokenizers).items():
            models[name].chat = chat
        return models

    # -- the runner's pair -----------------------------------------------------------
    def start(self, receive_thread: bool = True) -> "TokenizerManager":
        """Bind the inbox, open the sender (unless an outbox was given) and start
        the receiver thread.  Without it (``receive_thread=False``) the caller
        either attaches ``recv_from_detokenizer`` to its event loop, delivering
        to :meth:`handle_message`, or calls :meth:`start_receiver_thread` (the
        HTTP frontend does one or the other).  Returns self; :meth:`close` undoes it."""
        self.recv_from_detokenizer = Receiver(self.inbox, self.authkey)
        if self.send_to_scheduler is None:
            self.send_to_scheduler = self.make_sender()
        if receive_thread:
            self.start_receiver_thread()
        return self

    def start_receiver_thread(self) -> None:
        self._receiver_thread = threading.Thread(target=self.receive_loop, args=(self.recv_from_detokenizer,),
                                                 name="tm-recv", daemon=True)
        self._receiver_thread.start()

    def close(self) -> None:
        """Close the inbox and the sender and wait for the receiver thread; twice is once."""
        receiver, self.recv_from_detokenizer = self.recv_from_detokenizer, None
        if receiver is None:
            return
        receiver.close()
        if self.send_to_scheduler is not None:
            self.send_to_scheduler.close()
        if self._receiver_thread is not None:
            self._receiver_thread.join(CLOSE_JOIN)

    @property
    def receives_in_thread(self) -> bool:
        return self._receiver_thread is not None

    def receive_loop(self, receiver: Receiver) -> None:
        while self.recv_from_detokenizer is receiver:
            for msg in receiver.recv_all():
                self.handle_message(msg)

    # -- routing hooks (TokenizerWorker overrides these) ---------------------------
    @property
    def inbox(self) -> str:
        return self.port_args.reply_inbox

    def make_sender(self) -> Any:
        return self.shared_sender(self.port_args.scheduler_inbox)

    def shared_sender(self, address: str) -> SharedSender:
        """The handler threads' way out: many messages per write, and no thread waits on another."""
        return SharedSender(Sender(address, self.authkey), self.send_failed)

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

    def learn_context_lengths(self, limits: Optional[Dict[str, int]]) -> None:
        """The engines' own context limits (model -> tokens, as the scheduler
        publishes them): each model's limit is the smaller of its engine's and
        the configured one (``--context-length``, else the tokenizer's)."""
        for name, n in (limits or {}).items():
            model = self.models.get(name)
            if model is not None and isinstance(n, int) and n > 0:
                model.context_length = min(model.configured_length, n)

    def new_rid(self) -> str:
        """Unguessable, and never one a client may choose (see :mod:`mtok.managers.limits`)."""
        return new_rid()

    @property
    def tokenizer(self) -> Tokenizer:
        return self.default_model.tokenizer

    # -- requests ------------------------------------------------------------------
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

    def submit(self, obj: GenerateReqInput, watch: Optional[Any] = None) -> RequestHandle:
        """Tokenize and send at once; the returned handle yields the states as
        they change and must be closed (``with tm.submit(obj) as handle:``):
        closing aborts whatever has not finished."""
        outcome = self.submit_all([(obj, watch)])[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def submit_all(self, calls: Sequence[Tuple[GenerateReqInput, Optional[Any]]]) -> List[Any]:
        """:meth:`submit` several calls ``(obj, watch)`` at once, as one event-loop
        turn submits its jobs: their text prompts tokenized together
        (:mod:`mtok.managers.batch_encode`), then each sent.  Each outcome is the
        call's handle, or the exception that refused it: a refusal costs its call only."""
        arrived = time.monotonic()  # latency and TTFT count tokenization too
        outcomes: List[Any] = [None] * len(calls)
        texts: Dict[int, Any] = {}
        for i, (obj, watch) in enumerate(calls):
            try:
                model = self.model(obj.model)
                got = prompt_texts(obj, model, self.server_args)
                if got is not None:
                    texts[i] = (model, got, watch)
            except Exception as e:  # noqa: BLE001 (the call's refusal)
                outcomes[i] = e
        encoded = self.encoder.encode(texts) if texts else {}
        for i, (obj, watch) in enumerate(calls):
            if outcomes[i] is None:
                outcomes[i] = self._send_call(obj, watch, encoded.get(i), arrived)
        return outcomes

    def _send_call(self, obj: GenerateReqInput, watch: Optional[Any], prompts: Any, arrived: float) -> Any:
        """One call of :meth:`submit_all` sent: its handle, or what refused it."""
        try:
            if isinstance(prompts, BaseException):
                raise prompts
            model = self.model(obj.model)
            self.assign_rids(obj)
            reqs = generate_reqs(obj, given_ids(obj) if prompts is None else prompts, model, self.server_args)
            return self._open(reqs, obj.stream, watch, arrived)
        except Exception as e:  # noqa: BLE001 (the call's refusal)
            return e

    def submit_embedding(self, inputs: List[Any], model_name: Optional[str], watch: Optional[Any] = None
                         ) -> RequestHandle:
        """Embed texts or token lists; a handle as :meth:`submit`'s, whose
        ``results()`` come in input order."""
        reqs = embedding_reqs(inputs, self.model(model_name), self.server_args, self.new_rid)
        return self._open(reqs, False, watch)

    def _open(self, reqs: List[Any], stream: bool, watch: Optional[Any], arrived: Optional[float] = None
              ) -> RequestHandle:
        """Register a state per request, make the handle, send; a failed send
        closes the handle (aborting what went out) before the error is raised."""
        mailbox: "queue.SimpleQueue[Any]" = queue.SimpleQueue() if watch is None else watch.new_mailbox()
        states = []
        taken = set()
        for i, r in enumerate(reqs):
            if r.rid in self.rid_to_state or r.rid in taken:
                raise bad(f"request id {r.rid!r} is already in use", "rid")
            taken.add(r.rid)
            st = ReqState(r.rid, i, mailbox, stream, len(r.input_ids), arrived)
            st.prompt_ids = r.input_ids
            if getattr(r, "logprobs", None) is not None:
                st.logprobs = {}
            states.append(st)
        self._check_alive()
        for st in states:
            self.rid_to_state[st.rid] = st
        handle = RequestHandle(self, states, watch, self.server_args.request_timeout)
        try:
            for r in reqs:
                self._send(r)
        except BaseException:
            handle.close()
            raise
        return handle

    def _send(self, obj: Any) -> None:
        if self.send_to_scheduler is None:
            raise APIError("the tokenizer manager is not started", 503, headers={"Retry-After": "1"})
        try:
            self.send_to_scheduler.send(obj)
        except ConnectionError as e:
            raise APIError(_unreachable(e), 503, headers={"Retry-After": "1"}) from None

    def _check_alive(self) -> None:
        if self.failure:
            raise APIError(self.failure, 503)

    def abort_request(self, rid: str) -> None:
        try:
            self._send(AbortReq(rid=rid))
        except APIError:
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
    def handle_message(self, msg: Any) -> None:
        """Take in one message from the detokenizer (or the router)."""
        handler = self._dispatch.get(type(msg))
        if handler is None:
            logger.error("unexpected message %s", type(msg).__name__)
            return
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
        self._fail(list(self.rid_to_state), list(self.rpc_waiters), message)

    def send_failed(self, messages: List[Any], error: ConnectionError) -> None:
        """A queued write to the scheduler failed: the requests it carried end
        with the 503 a failed send answers (aborts need nothing more)."""
        rids = [m.rid for m in messages if not isinstance(m, (AbortReq, RpcReq))]
        self._fail(rids, [m.rid for m in messages if isinstance(m, RpcReq)], _unreachable(error))

    def _fail(self, rids: List[str], rpc_rids: List[str], message: str) -> None:
        reason = FinishAbort(message, 503)
        for rid in rids:
            st = self.rid_to_state.pop(rid, None)
            if st is not None:
                st.finished_reason = reason
                st.notify()
        for rid in rpc_rids:
            waiter = self.rpc_waiters.get(rid)
            if waiter is not None:
                waiter.put(RpcOutput(rid=rid, error=message))

    @property
    def num_in_flight(self) -> int:
        return len(self.rid_to_state)


class TokenizerWorker(TokenizerManager):
    """A TokenizerManager in one of N worker processes (multi-worker mode)."""

    def __init__(self, server_args: ServerArgs, port_args: PortArgs, authkey: bytes, worker_address: str):
        self.worker_address = worker_address
        super().__init__(server_args, port_args, authkey)

    @property
    def inbox(self) -> str:
        return self.worker_address

    def make_sender(self) -> Any:
        return SenderWrapper(self.shared_sender(self.port_args.router_inbox), self.worker_address)
