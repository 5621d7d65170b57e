"""Messages that cross process boundaries, named after SGLang's ``io_struct``.

Single requests derive from :class:`BaseReq` and carry the IPC name of the HTTP
worker that owns them (``worker_address``); batches derive from
:class:`BaseBatchReq` and carry one name per request (``worker_addresses``).
That name is the only routing state in the system: whoever holds a message
knows where its answer goes.
"""

from __future__ import annotations

import copyreg
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from ..fields import sampling_default as _default
from .finish import FinishReason  # noqa: F401  (the type of finished_reasons)


@dataclass
class SamplingParams:
    """What a request asks of generation; the stop fields are enforced by mtok,
    the sampling knobs travel to the engine untouched.  Defaults and bounds are
    the request-field table's (:mod:`mtok.fields`, SGLang's ``sampling_params``)."""

    max_new_tokens: int = _default("max_new_tokens")
    min_new_tokens: int = _default("min_new_tokens")
    stop: List[str] = field(default_factory=list)
    stop_regex: List[str] = field(default_factory=list)  # matched by mtok.managers.stop_regex
    stop_token_ids: List[int] = field(default_factory=list)
    ignore_eos: bool = _default("ignore_eos")
    skip_special_tokens: bool = _default("skip_special_tokens")
    spaces_between_special_tokens: bool = _default("spaces_between_special_tokens")
    no_stop_trim: bool = _default("no_stop_trim")
    temperature: float = _default("temperature")
    top_p: float = _default("top_p")
    top_k: int = _default("top_k")
    min_p: float = _default("min_p")
    frequency_penalty: float = _default("frequency_penalty")
    presence_penalty: float = _default("presence_penalty")
    repetition_penalty: float = _default("repetition_penalty")
    seed: Optional[int] = _default("seed")
    n: int = _default("n")
    # constraints and extras for engines that declare them (mtok.engines)
    regex: Optional[str] = _default("regex")
    json_schema: Optional[str] = _default("json_schema")
    ebnf: Optional[str] = _default("ebnf")
    structural_tag: Optional[str] = _default("structural_tag")
    # not a request field: the one a constraint came from (response_format, tool_choice), named in refusals
    constraint_from: Optional[str] = field(default=None, metadata={"internal": True})
    logit_bias: Optional[Dict[str, float]] = _default("logit_bias")
    custom_params: Optional[Dict[str, Any]] = _default("custom_params")


@dataclass
class LogprobParams:
    """What logprobs a request wants (SGLang's names).  ``start_len`` is where
    prompt logprobs begin (-1: none); ``with_text`` asks for token texts."""

    start_len: int = -1
    top_n: int = 0
    token_ids: Optional[List[int]] = None
    with_text: bool = False
    param: str = "top_logprobs_num"  # the request field that asked for top_n, named in its errors
    output: bool = True  # False: the prompt's only (vLLM's chat prompt_logprobs without logprobs)
    prompt_top_n: Optional[int] = None  # the prompt's top_n where it differs (vLLM's chat prompt_logprobs)


def side_top_n(lp: LogprobParams, prompt: bool) -> int:
    """The top logprobs asked per prompt token (``prompt``) or per new one."""
    return lp.prompt_top_n if prompt and lp.prompt_top_n is not None else lp.top_n


@dataclass
class BaseReq:
    rid: str = ""
    worker_address: Optional[str] = None


@dataclass
class BaseBatchReq:
    rids: List[str] = field(default_factory=list)
    worker_addresses: Optional[List[str]] = None


# --- HTTP side ---------------------------------------------------------------------
@dataclass
class GenerateReqInput:
    """A validated ``/generate`` or ``/v1/completions`` body, before tokenization.

    Exactly one of ``text`` and ``input_ids`` is set; each is a single prompt or a
    batch (``is_batch``).  ``rid`` has one entry per prompt once normalized.
    """

    text: Optional[Union[str, List[str]]] = None
    input_ids: Optional[Union[List[int], List[List[int]]]] = None
    sampling_params: Union[SamplingParams, List[SamplingParams]] = field(default_factory=SamplingParams)
    stream: bool = False
    rid: Optional[Union[str, List[str]]] = None
    model: Optional[str] = None
    is_batch: bool = False
    logprobs: Optional[LogprobParams] = None
    lora_path: Optional[str] = None
    rid_is_ours: bool = False  # made by the server (mtok.managers.limits reserves their prefix)

    @property
    def batch_size(self) -> int:
        prompts = self.text if self.text is not None else self.input_ids
        return len(prompts) if self.is_batch else 1  # type: ignore[arg-type]

    @property
    def num_outputs(self) -> int:
        """Requests this expands to: ``n`` samples of each prompt."""
        return sum(self.params_at(i).n for i in range(self.batch_size))

    def params_at(self, i: int) -> SamplingParams:
        sp = self.sampling_params
        return sp[i] if isinstance(sp, list) else sp


# --- tokenizer -> scheduler -----------------------------------------------------------
@dataclass
class TokenizedGenerateReqInput(BaseReq):
    input_ids: List[int] = field(default_factory=list)
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    stream: bool = False
    model: Optional[str] = None
    created: float = field(default_factory=time.time)
    logprobs: Optional[LogprobParams] = None
    lora_path: Optional[str] = None


@dataclass
class TokenizedEmbeddingReqInput(BaseReq):
    input_ids: List[int] = field(default_factory=list)
    model: Optional[str] = None


@dataclass
class AbortReq(BaseReq):
    """Abort ``rid``; with ``abort_all_of`` set, abort every request owned by that
    worker IPC name (the supervisor sends this when a worker dies).  The
    request's own output stream carries the ``abort`` finish back."""

    abort_all_of: Optional[str] = None


@dataclass
class RpcReq(BaseReq):
    """A control call answered by the scheduler (and, on the way back, the detokenizer)."""

    method: str = ""
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class RpcOutput(BaseReq):
    result: Any = None
    error: Optional[str] = None


@dataclass
class ServerFailure(BaseReq):
    """Sent to every worker when a core process died: fail everything in flight."""

    message: str = ""


# --- scheduler -> detokenizer -> tokenizer --------------------------------------------
@dataclass
class BatchTokenIDOutput(BaseBatchReq):
    """One scheduler step: the new token ids of every request that advanced."""

    finished_reasons: "List[Optional[FinishReason]]" = field(default_factory=list)
    decode_ids: List[List[int]] = field(default_factory=list)
    prompt_tokens: List[int] = field(default_factory=list)
    completion_tokens: List[int] = field(default_factory=list)
    skip_special_tokens: List[bool] = field(default_factory=list)
    spaces_between_special_tokens: List[bool] = field(default_factory=list)
    no_stop_trim: List[bool] = field(default_factory=list)
    stop: List[Optional[List[str]]] = field(default_factory=list)
    # where a matched stop string starts in the decoded text, so the
    # detokenizer trims exactly where the scheduler stopped
    stop_str_offsets: List[Optional[int]] = field(default_factory=list)
    # set when a request has stop regexes: per request, where a match under way
    # began (text from there on is held back from the stream), or None
    stop_holds: Optional[List[Optional[int]]] = None
    models: Optional[List[Optional[str]]] = None
    # per request, on its first output only: the prompt's last ids, which its
    # text is decoded after (mtok.managers.decoding); None when no request has any
    decode_contexts: Optional[List[Optional[List[int]]]] = None
    # per request, None unless it asked for logprobs: {key: rows} where a key is
    # one of LOGPROB_KEYS and a row is (logprob, id) or a list of those (or None)
    logprobs: Optional[List[Optional[Dict[str, list]]]] = None
    logprob_texts: Optional[List[bool]] = None


    def append_sparse(self, column: str, value: Any) -> None:
        """Append one request's entry to a per-request column that stays None
        until some request of the batch has a value (``stop_holds``, ``decode_contexts``)."""
        values = getattr(self, column)
        if values is None and value is not None:
            values = [None] * (len(self.finished_reasons) - 1)
            setattr(self, column, values)
        if values is not None:
            values.append(value)

@dataclass
class BatchStrOutput(BaseBatchReq):
    """The detokenized form of one step: per request, the new text and new ids."""

    finished_reasons: "List[Optional[FinishReason]]" = field(default_factory=list)
    output_strs: List[str] = field(default_factory=list)
    output_ids: List[List[int]] = field(default_factory=list)
    prompt_tokens: List[int] = field(default_factory=list)
    completion_tokens: List[int] = field(default_factory=list)
    # as in BatchTokenIDOutput, with each (logprob, id) now [logprob, id, text-or-None]
    logprobs: Optional[List[Optional[Dict[str, list]]]] = None


# SGLang's meta_info keys; the "_top_" and "_token_ids_" ones hold one list (or
# None) per position, the others one entry per position.
LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs", "input_top_logprobs", "output_top_logprobs",
                "input_token_ids_logprobs", "output_token_ids_logprobs")


@dataclass
class BatchEmbeddingOutput(BaseBatchReq):
    finished_reasons: "List[Optional[FinishReason]]" = field(default_factory=list)
    embeddings: List[List[float]] = field(default_factory=list)
    prompt_tokens: List[int] = field(default_factory=list)


def _take(value: Any, indices: Sequence[int]) -> Any:
    """Select ``indices`` from one field of a batch.

    A list is per request; entries missing from a list shorter than the batch
    become None, and a field with none of the requested entries becomes None, so
    the pieces stay aligned with their ``rids``.  A dict holds per-request lists
    under each key and is split key by key.  Anything else is shared by the
    whole batch and copied.
    """
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: _take(v, indices) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        n = len(value)
        if all(i >= n for i in indices):
            return None
        return [value[i] if i < n else None for i in indices]
    return value


def split_by_index(output: BaseBatchReq, indices: Sequence[int]) -> BaseBatchReq:
    """The sub-batch of ``output`` holding the requests at ``indices``, in that order."""
    values = {f.name: _take(getattr(output, f.name), indices) for f in dataclasses.fields(output)}
    return type(output)(**values)


def group_by_worker(output: BaseBatchReq) -> Dict[str, BaseBatchReq]:
    """One sub-batch per worker IPC name, so each worker gets one message per step."""
    groups: Dict[str, List[int]] = {}
    for i, name in enumerate(output.worker_addresses or ()):
        groups.setdefault(name, []).append(i)
    return {name: split_by_index(output, idx) for name, idx in groups.items()}


def _reduce_positionally(self: Any) -> tuple:
    """A message pickled as its class and its fields' values in order, rebuilt by
    calling the class: no field name crosses the wire.  One request's message
    shrinks from ~710 to ~220 bytes and unpickles in half the time, which is
    paid twice per request on the c = 1 path.  An object that holds more than
    its fields (none of mtok's do) is pickled whole, its ``__dict__`` as state."""
    cls, state = type(self), self.__dict__
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    if len(state) != len(names):
        return copyreg.__newobj__, (cls,), dict(state)
    return cls, tuple(map(state.__getitem__, names))


_FIELD_NAMES: Dict[type, tuple] = {}

# Everything the IPC layer may unpickle.  A peer has to be authenticated first;
# this list is a second wall behind that one.
MESSAGE_TYPES = (
    SamplingParams,
    LogprobParams,
    TokenizedGenerateReqInput,
    TokenizedEmbeddingReqInput,
    AbortReq,
    RpcReq,
    RpcOutput,
    ServerFailure,
    BatchTokenIDOutput,
    BatchStrOutput,
    BatchEmbeddingOutput,
)

for _cls in MESSAGE_TYPES:  # every field takes part in __init__, in declared order (no init=False)
    _cls.__reduce__ = _reduce_positionally  # type: ignore[assignment,method-assign]
