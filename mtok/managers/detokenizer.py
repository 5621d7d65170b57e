"""The detokenizer: token ids in, text deltas out, one message per step.

:class:`DetokenizerManager` is the process's core and does no I/O: each
message from the scheduler goes in through :meth:`DetokenizerManager.handle`
and what comes out (a ``BatchStrOutput`` per step; embeddings and replies
unchanged) goes to the process's runner,
:func:`mtok.managers.runners.run_detokenizer_process`.  The runner owns the sockets and
chooses, once, where outputs go: to the one TokenizerManager, or split by the
worker address stamped on each request, each worker its own piece.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from ..wire.args import ServerArgs
from .decoding import DecodeState, IncrementalDecoder, stop_holdback
from ..wire.finish import FinishReason, FinishStop
from ..wire.io_struct import AbortReq, BatchStrOutput, BatchTokenIDOutput
from ..models import load_tokenizers

logger = logging.getLogger(__name__)


class DecodeStatus(DecodeState):
    __slots__ = ("sent", "unsent", "stops")

    def __init__(self, skip: bool, spaces: bool, stops: Optional[List[str]]):
        super().__init__(skip, spaces)
        self.sent = 0  # characters of committed text already sent
        self.unsent = ""  # committed text held back (it may begin a stop string)
        self.stops = stops  # held back while streaming; None when trimming is off (else a list, maybe empty)


class DetokenizerManager:
    """Token-id batches in (:meth:`handle`), text batches out.  Constructing
    one loads the models' tokenizers (or takes those given: the scheduler's,
    when it runs in the scheduler's process) and touches nothing else."""

    def __init__(self, server_args: ServerArgs, tokenizers: Optional[Dict[str, Any]] = None):
        specs = server_args.model_specs()
        tokenizers = tokenizers or load_tokenizers(specs, server_args.tokenizer_backend)
        self.decoders = {s.name: IncrementalDecoder(tokenizers[s.name]) for s in specs}
        self.default_model = specs[0].name
        self.tokenizer = tokenizers[self.default_model]
        # Keyed by (worker address, rid): workers check rids only among their
        # own requests, so a rid refused as a duplicate on one worker must not
        # touch the state of the same rid running on another.
        self.states: Dict[Tuple[Optional[str], str], DecodeStatus] = {}
        self.token_text_cache: Dict[str, Dict[int, str]] = {}
        # Only running requests have state, so more than this means state that
        # outlived its request; the least recently advanced goes first.
        self.max_states = 2 * server_args.max_running_requests + 64

    def handle(self, recv_obj: Any) -> Any:
        """The message to pass on for one from the scheduler, or None."""
        if isinstance(recv_obj, BatchTokenIDOutput):
            return self.handle_batch_token_id_out(recv_obj)
        if isinstance(recv_obj, AbortReq) and recv_obj.abort_all_of is not None:
            self.forget_worker(recv_obj.abort_all_of)
        return recv_obj  # embeddings and replies pass through unchanged; a departed worker's notice too

    def forget_worker(self, address: str) -> None:
        """A worker has gone: the decode state of its requests goes with it."""
        for key in [k for k in self.states if k[0] == address]:
            del self.states[key]

    def handle_batch_token_id_out(self, recv: BatchTokenIDOutput) -> BatchStrOutput:
        states, finals = self._advance_states(recv)
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
        none = [None] * len(states)
        out.output_strs = _release(states, new_texts, finals, recv.stop_str_offsets or none, recv.stop_holds or none)
        self._bound_states()
        return out

    def _advance_states(self, recv: BatchTokenIDOutput) -> Tuple[List[DecodeStatus], List[bool]]:
        """Each request's decode state with this step's ids added (a finished
        request's is taken out of :attr:`states`), and whether it finished."""
        states: List[DecodeStatus] = []
        finals: List[bool] = []
        workers = recv.worker_addresses or [None] * len(recv.rids)
        for i, rid in enumerate(recv.rids):
            key = (workers[i], rid)
            st = self.states.pop(key, None)
            if st is None:
                trim = not recv.no_stop_trim[i]
                st = DecodeStatus(recv.skip_special_tokens[i], recv.spaces_between_special_tokens[i],
                                  (recv.stop[i] or []) if trim else None)
                if recv.decode_contexts is not None:
                    st.start_after(recv.decode_contexts[i])
            reason = recv.finished_reasons[i]
            ids = recv.decode_ids[i]
            if reason is not None and _trims_stop_token(reason, ids, recv.no_stop_trim[i]):
                ids = ids[:-1]
            st.ids.extend(ids)
            if reason is None:
                self.states[key] = st  # re-inserted: the dict's order is recency
            states.append(st)
            finals.append(reason is not None)
        return states, finals

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


def _release(states: List[DecodeStatus], new_texts: List[str], finals: List[bool],
             stop_offsets: List[Optional[int]], holds: List[Optional[int]]) -> List[str]:
    """Each request's text to send now: its new text after what was held back,
    cut at the stop string (or regex match) when it ended on one, less what may
    begin a stop string, or belong to a regex match under way (from ``hold``),
    while it runs (held back for the next step)."""
    out = []
    for st, new, final, stop_offset, hold in zip(states, new_texts, finals, stop_offsets, holds):
        text = st.unsent + new if st.unsent else new
        if final:
            if stop_offset is not None and st.stops is not None:
                text = text[: max(0, stop_offset - st.sent)]
            end = len(text)
        elif st.stops:
            end = len(text) - stop_holdback(text, st.stops)
        else:
            end = len(text)
        if hold is not None and not final:
            end = min(end, max(0, hold - st.sent))
        out.append(text[:end])
        st.unsent = text[end:]
        st.sent += end
    return out


def _trims_stop_token(reason: FinishReason, ids: List[int], no_stop_trim: bool) -> bool:
    """A matched stop token (or eos) is not part of the text unless no_stop_trim."""
    return not no_stop_trim and bool(ids) and isinstance(reason, FinishStop) and reason.trims_token(ids[-1])
