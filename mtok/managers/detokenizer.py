"""The detokenizer: token ids in, text deltas out, one message per step.

Single-worker mode sends each step's whole ``BatchStrOutput`` to the one
TokenizerManager.  In multi-worker mode the
:class:`MultiHttpWorkerDetokenizerMixin` loop splits every batch by the IPC
name stamped on each request and sends each worker its own piece, through a
:class:`~mtok.wire.socket_mapping.SocketMapping`.
"""

from __future__ import annotations

import logging
import signal
from typing import Any, Dict, List, Optional, Tuple

from ..wire.args import PortArgs, ServerArgs, read_args
from .decoding import DecodeState, IncrementalDecoder, stop_holdback
from ..wire.finish import FinishReason, FinishStop
from ..wire.io_struct import AbortReq, BaseBatchReq, BatchStrOutput, BatchTokenIDOutput, group_by_worker
from ..wire.ipc import Receiver, Sender
from ..wire.socket_mapping import SocketMapping
from ..procutil import ChildBoot, exit_now, on_signal
from .models import load_tokenizers

logger = logging.getLogger(__name__)


class DecodeStatus(DecodeState):
    __slots__ = ("sent", "unsent", "stops")

    def __init__(self, skip: bool, spaces: bool, stops: Optional[List[str]]):
        super().__init__(skip, spaces)
        self.sent = 0  # characters of committed text already sent
        self.unsent = ""  # committed text held back (it may begin a stop string)
        self.stops = stops  # held back while streaming; None when trimming is off


class MultiHttpWorkerDetokenizerMixin:
    """The event loop for ``--tokenizer-worker-num`` > 1."""

    def multi_http_worker_event_loop(self: "DetokenizerManager") -> None:
        self.socket_mapping = SocketMapping(self.authkey)
        while True:
            for recv_obj in self.recv_from_scheduler.recv_all():
                output = self._request_dispatcher(recv_obj)
                if output is None:
                    continue
                if isinstance(output, BaseBatchReq):
                    for ipc_name, piece in group_by_worker(output).items():
                        self.socket_mapping.send_output(ipc_name, piece)
                else:
                    self.send_to_tokenizer.send(output)  # the router delivers it by name

    def maybe_drop_worker(self, name: Optional[str]) -> None:
        if name is not None and hasattr(self, "socket_mapping"):
            self.socket_mapping.drop(name)


class DetokenizerManager(MultiHttpWorkerDetokenizerMixin):
    def __init__(self, server_args: ServerArgs, port_args: PortArgs, authkey: bytes):
        self.authkey = authkey
        specs = server_args.model_specs()
        tokenizers = load_tokenizers(specs, server_args.tokenizer_backend)
        self.decoders = {s.name: IncrementalDecoder(tokenizers[s.name]) for s in specs}
        self.default_model = specs[0].name
        self.tokenizer = tokenizers[self.default_model]
        # Keyed by (worker IPC name, rid): workers check rids only among their
        # own requests, so a rid refused as a duplicate on one worker must not
        # touch the state of the same rid running on another.
        self.states: Dict[Tuple[Optional[str], str], DecodeStatus] = {}
        self.token_text_cache: Dict[str, Dict[int, str]] = {}
        # Only running requests have state, so more than this means state that
        # outlived its request; the least recently advanced goes first.
        self.max_states = 2 * server_args.max_running_requests + 64
        self.recv_from_scheduler = Receiver(port_args.detokenizer_inbox, authkey)
        self.send_to_tokenizer = Sender(port_args.reply_inbox, authkey)

    def event_loop(self) -> None:
        while True:
            for recv_obj in self.recv_from_scheduler.recv_all():
                output = self._request_dispatcher(recv_obj)
                if output is not None:
                    self.send_to_tokenizer.send(output)

    def _request_dispatcher(self, recv_obj: Any) -> Any:
        if isinstance(recv_obj, BatchTokenIDOutput):
            return self.handle_batch_token_id_out(recv_obj)
        if isinstance(recv_obj, AbortReq):  # a worker has gone
            self.maybe_drop_worker(recv_obj.abort_all_of)
            return None
        return recv_obj  # embeddings and replies pass through unchanged

    def handle_batch_token_id_out(self, recv: BatchTokenIDOutput) -> BatchStrOutput:
        states: List[DecodeStatus] = []
        finals: List[bool] = []
        workers = recv.worker_addresses or [None] * len(recv.rids)
        for i, rid in enumerate(recv.rids):
            key = (workers[i], rid)
            st = self.states.pop(key, None)
            if st is None:
                trim = not recv.no_stop_trim[i]
                st = DecodeStatus(
                    recv.skip_special_tokens[i],
                    recv.spaces_between_special_tokens[i],
                    recv.stop[i] if trim else None,
                )
            reason = recv.finished_reasons[i]
            ids = recv.decode_ids[i]
            if reason is not None and _trims_stop_token(reason, ids, recv.no_stop_trim[i]):
                ids = ids[:-1]
            st.ids.extend(ids)
            if reason is None:
                self.states[key] = st  # re-inserted: the dict's order is recency
            states.append(st)
            finals.append(reason is not None)
        new_texts = self._decode_step(recv, states, finals)

        out = BatchStrOutput(
            rids=recv.rids,
            worker_addresses=recv.worker_addresses,
            finished_reasons=recv.finished_reasons,
            output_ids=recv.decode_ids,
            prompt_tokens=recv.prompt_tokens,
            completion_tokens=recv.completion_tokens,
        )
        if recv.logprobs is not None:
            out.logprobs = self.logprob_triples(recv)
        offsets = recv.stop_str_offsets or [None] * len(states)
        for i, st in enumerate(states):
            text = st.unsent + new_texts[i] if st.unsent else new_texts[i]
            if finals[i]:
                if offsets[i] is not None and st.stops is not None:
                    text = text[: max(0, offsets[i] - st.sent)]
                end = len(text)
            elif st.stops:
                end = len(text) - stop_holdback(text, st.stops)
            else:
                end = len(text)
            out.output_strs.append(text[:end])
            st.unsent = text[end:]
            st.sent += end
        self._bound_states()
        return out

    def _decode_step(self, recv: BatchTokenIDOutput, states: List[DecodeStatus], finals: List[bool]) -> List[str]:
        """Each request's new text, one decoder call per model."""
        if recv.models is None:
            return self.decoders[self.default_model].step(states, finals)
        new_texts = [""] * len(states)
        groups: Dict[str, List[int]] = {}
        for i, name in enumerate(recv.models):
            groups.setdefault(name or self.default_model, []).append(i)
        for name, idx in groups.items():
            for i, text in zip(idx, self.decoders[name].step([states[i] for i in idx], [finals[i] for i in idx])):
                new_texts[i] = text
        return new_texts

    def logprob_triples(self, recv: BatchTokenIDOutput) -> List[Optional[Dict[str, list]]]:
        """Each (logprob, id) as SGLang's [logprob, id, text-or-None]; the texts of
        the whole step are decoded at once, one batch call per model."""
        wanted: Dict[str, set] = {}
        for i, d in enumerate(recv.logprobs or ()):
            if d and recv.logprob_texts and recv.logprob_texts[i]:
                ids = wanted.setdefault(self._model_of(recv, i), set())
                for rows in d.values():
                    _collect_ids(rows, ids)
        texts = {name: self.token_texts(name, ids) for name, ids in wanted.items()}
        out: List[Optional[Dict[str, list]]] = []
        for i, d in enumerate(recv.logprobs or ()):
            table = texts.get(self._model_of(recv, i)) if recv.logprob_texts and recv.logprob_texts[i] else None
            out.append(None if d is None else {k: _triples(rows, table) for k, rows in d.items()})
        return out

    def _model_of(self, recv: BatchTokenIDOutput, i: int) -> str:
        return (recv.models[i] if recv.models else None) or self.default_model

    def token_texts(self, model: str, ids: set) -> Dict[int, str]:
        """id -> the token's text alone (special tokens kept), cached per model."""
        cache = self.token_text_cache.setdefault(model, {})
        missing = [t for t in ids if t not in cache]
        if missing:
            if len(cache) > 200_000:
                cache.clear()
            tok = self.decoders[model].tokenizer
            for t, text in zip(missing, tok.decode_batch([[t] for t in missing], False)):
                cache[t] = text
        return cache

    def _bound_states(self) -> None:
        excess = len(self.states) - self.max_states
        if excess > 0:
            for key in list(self.states)[:excess]:
                del self.states[key]
            logger.warning("dropped decode state of %d stale request(s)", excess)


def _collect_ids(rows: Any, into: set) -> None:
    """The token ids in logprob rows: (logprob, id) pairs, lists of them, or None."""
    for row in rows:
        if row is None:
            continue
        if isinstance(row, tuple):
            into.add(row[1])
        else:
            into.update(t for _, t in row)


def _triples(rows: list, texts: Optional[Dict[int, str]]) -> list:
    def one(pair: tuple) -> list:
        return [pair[0], pair[1], texts[pair[1]] if texts is not None else None]

    return [None if r is None else one(r) if isinstance(r, tuple) else [one(p) for p in r] for r in rows]


def _trims_stop_token(reason: FinishReason, ids: List[int], no_stop_trim: bool) -> bool:
    """A matched stop token (or eos) is not part of the text unless no_stop_trim."""
    return not no_stop_trim and bool(ids) and isinstance(reason, FinishStop) and reason.trims_token(ids[-1])


def run_detokenizer_process(
    shm_name: str, authkey: bytes, parent_pid: int, ready_conn, manager_class=DetokenizerManager
) -> None:
    server_args, port_args = read_args(shm_name)
    with ChildBoot("detokenizer", parent_pid, ready_conn, server_args.log_level):
        manager = manager_class(server_args, port_args, authkey)
    on_signal(signal.SIGTERM, lambda: exit_now(0))
    if server_args.tokenizer_worker_num == 1:
        manager.event_loop()
    else:
        manager.multi_http_worker_event_loop()
