"""The engine protocol: what the scheduler asks of a model.

An engine is a class constructed with an :class:`EngineContext`.  The
scheduler calls :meth:`Engine.step` once per iteration with every running
request and expects one new token id for each, in order.  Requests join and
leave the batch between steps (continuous batching); ``add_request`` and
``finish_request`` let an engine keep per-request state such as a KV cache.

A request, as an engine sees it, has ``rid``, ``input_ids``, ``output_ids`` (the
tokens generated so far) and ``sampling_params`` (:class:`mtok.wire.io_struct.SamplingParams`).

``--engine module:attr`` loads a user engine; ``examples/custom_engine.py`` is one.

**Capabilities.** An engine declares what it can do beyond plain generation
in ``capabilities`` (a set of names in :data:`CAPABILITIES`).  The scheduler
refuses, with a 400 naming the field, a request that asks for one its engine
lacks -- a constraint is never dropped silently.  An engine with
``logprobs`` implements :meth:`Engine.logprobs`; with ``flush_cache``,
:meth:`Engine.flush_cache`; with ``prefill_only`` it accepts
``max_new_tokens: 0`` (the prompt is scored, nothing is generated); with
``n`` it serves parallel samples (the frontend expands ``n`` into that many
requests); with ``lora`` it reads ``req.lora_path``; with ``regex`` /
``json_schema`` / ``ebnf`` / ``structural_tag`` / ``logit_bias`` it reads
those fields of ``req.sampling_params``.

**Scoring.** ``/v1/score`` asks for the label ids' logprobs at the position
after each prompt (one new token, ``token_ids_logprob``: what SGLang's own
scoring asks its scheduler), so an engine with ``token_ids_logprob`` scores
and one without refuses; ``/v1/rerank`` compares :meth:`Engine.embed` vectors,
so an engine that embeds reranks (:mod:`mtok.api.scoring`).

**Asynchronous engines.** An engine that batches on its own -- an upstream
server streaming tokens when it has them (:mod:`mtok.engines.upstream`) --
sets ``asynchronous = True``.  Its :meth:`Engine.step` then answers, per
request, an :class:`EngineOutput` (or a plain int, as a synchronous engine
does): zero, one or several new token ids, the upstream's own finish reason
(a :class:`mtok.wire.finish.FinishReason`: ``FinishStop``, ``FinishLength`` or
``FinishAbort`` with its HTTP status; the older dict form is still accepted), and the logprob rows of those ids and,
once, of the prompt, since they arrive with the tokens rather than on demand
(:meth:`Engine.logprobs` is not called).  Its step should wait briefly (a few
milliseconds) for tokens rather than return at once, so the scheduler does not
spin.  The scheduler still enforces stop tokens, eos, stop strings and
``max_new_tokens`` on what arrives, and calls :meth:`Engine.finish_request`
when it ends a request first: that is the cancel hook (an upstream adapter
closes the request's connection there).  :meth:`Engine.health` says whether
the engine can serve (None) or why not; ``/health`` answers 503 with it.
:meth:`Engine.context_length` is the engine's own context limit, when it has
one (an upstream's ``max_model_len``): the frontend's limit is then the smaller
of it and the tokenizer's (or ``--context-length``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

CAPABILITIES = frozenset((
    "logprobs", "top_logprobs", "token_ids_logprob", "prefill_only", "n", "flush_cache", "lora",
    "regex", "json_schema", "ebnf", "structural_tag", "logit_bias",
))
# the capabilities that constrain what the engine may generate (the sampling fields of the same names)
CONSTRAINTS = ("regex", "json_schema", "ebnf", "structural_tag")

# (logprob, token id) pairs: the token's own, then the top-n, then those asked for by id
PositionLogprobs = Tuple[float, List[Tuple[float, int]], List[Tuple[float, int]]]


@dataclass
class EngineContext:
    model_name: str
    tokenizer: Any  # mtok.tokenizer.Tokenizer
    step_delay: float = 0.0
    options: Optional[dict] = None


@dataclass
class EngineOutput:
    """What an asynchronous engine has for one request in one step."""

    ids: List[int] = field(default_factory=list)
    finish: Optional[Dict[str, Any]] = None  # the engine's own finish reason, if it ended the request
    logprobs: Optional[List[PositionLogprobs]] = None  # one row per id, when the request asked
    input_logprobs: Optional[List[Optional[PositionLogprobs]]] = None  # the prompt's, from start_len; once


class Engine:
    """Base class with no-op hooks; subclasses implement :meth:`step`."""

    capabilities: FrozenSet[str] = frozenset()
    asynchronous: bool = False

    def __init__(self, ctx: EngineContext):
        self.ctx = ctx

    def add_request(self, req: Any) -> None:
        """A request joins the running batch."""

    def finish_request(self, req: Any) -> None:
        """A request left the batch (finished or aborted)."""

    def step(self, batch: Sequence[Any]) -> List[int]:
        raise NotImplementedError

    def embed(self, batch: Sequence[Any]) -> List[List[float]]:
        raise NotImplementedError(f"{type(self).__name__} does not produce embeddings")

    def logprobs(self, req: Any, position: int, top_n: int, token_ids: Optional[List[int]]) -> PositionLogprobs:
        """With ``logprobs``: the log-probability of the token at ``position`` of
        ``req.input_ids + req.output_ids`` given the tokens before it, the
        ``top_n`` most likely tokens there, and those of ``token_ids``.  Called
        for prompt positions when a request joins, and for each new token right
        after the step that made it."""
        raise NotImplementedError

    def flush_cache(self) -> None:
        """With ``flush_cache``: drop whatever is cached (prefixes, KV blocks)."""
        raise NotImplementedError

    def health(self) -> Optional[str]:
        """None when the engine can serve; otherwise why not (``/health`` says 503)."""
        return None

    def context_length(self) -> Optional[int]:
        """The most prompt + new tokens the engine itself takes, when it knows (None: no limit of its own)."""
        return None


def capability_refusal(engine: Any, req: Any) -> Optional[Tuple[str, str]]:
    """(message, field) when ``engine`` cannot serve what ``req`` asks; None when it can."""
    missing = missing_capability(engine, req)
    if missing is None:
        return None
    cap, param = missing
    if cap in CONSTRAINTS:
        param = req.sampling_params.constraint_from or param
        return (f"'{param}' needs an engine that can constrain its output; {type(engine).__name__}, the engine "
                f"of model {req.model!r}, cannot (it does not declare the '{cap}' capability)", param)
    return (f"'{param}' is not supported by the engine of model {req.model!r} ({type(engine).__name__} "
            f"does not declare the '{cap}' capability)", param)


def missing_capability(engine: Any, req: Any) -> Optional[Tuple[str, str]]:
    """(capability, the field that asks for it) for the first thing ``req`` asks
    of ``engine`` that the engine does not declare; None if it can serve it."""
    have = getattr(engine, "capabilities", frozenset())
    sp, lp = req.sampling_params, req.logprobs
    wants = [
        ("logprobs", "return_logprob", lp is not None),
        ("top_logprobs", "top_logprobs_num", lp is not None and max(lp.top_n, lp.prompt_top_n or 0) > 0),
        ("token_ids_logprob", "token_ids_logprob", lp is not None and lp.token_ids is not None),
        ("prefill_only", "max_new_tokens", sp.max_new_tokens == 0),
        ("n", "n", sp.n > 1),
        ("lora", "lora_path", req.lora_path is not None),
        ("logit_bias", "logit_bias", bool(sp.logit_bias)),
    ] + [(c, c, getattr(sp, c) is not None) for c in CONSTRAINTS]
    for cap, param, wanted in wants:
        if wanted and cap not in have:
            return cap, param
    return None


BUILTIN = {
    "echo": "mtok.engines.echo:EchoEngine",
}
# ``sglang:http://HOST:PORT`` and ``vllm:http://HOST:PORT``: an upstream server
UPSTREAMS = {
    "sglang": "mtok.engines.sglang_http:SGLangEngine",
    "vllm": "mtok.engines.vllm_http:VLLMEngine",
}


def _import(module: str) -> Any:
    if not module.endswith(".py"):
        return importlib.import_module(module)
    name = "mtok_user_engine_" + os.path.splitext(os.path.basename(module))[0]
    spec = importlib.util.spec_from_file_location(name, module)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {module!r}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _upstream_url(spec: str) -> Optional[str]:
    """The URL of ``sglang:URL`` / ``vllm:URL``; None for any other spec.  A URL
    without its scheme would read as ``module:attr``: say how to write it."""
    kind, colon, url = spec.partition(":")
    if not colon or kind not in UPSTREAMS:
        return None
    if not url.startswith(("http://", "https://")):
        hint = "" if "://" in url else f", as in {kind + ':http://' + url.lstrip('/')!r}"
        raise ValueError(f"engine {spec!r}: an upstream's URL starts with http:// or https://{hint}")
    return url


def load_engine(spec: str, ctx: EngineContext) -> Engine:
    """``echo``, ``sglang:URL``, ``vllm:URL``, ``package.module:attr`` or
    ``path/to/file.py:attr``, where attr is an Engine class or a factory taking
    an EngineContext (an upstream's URL reaches it as ``ctx.options["url"]``)."""
    url = _upstream_url(spec)
    if url is not None:
        spec, ctx = UPSTREAMS[spec.partition(":")[0]], EngineContext(ctx.model_name, ctx.tokenizer, ctx.step_delay,
                                                                     dict(ctx.options or {}, url=url))
    target = BUILTIN.get(spec, spec)
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--engine must be 'echo', 'sglang:URL', 'vllm:URL', 'module:attr' or 'file.py:attr', "
                         f"not {spec!r}")
    obj: Any = _import(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    engine = obj(ctx)
    if not callable(getattr(engine, "step", None)):
        raise TypeError(f"engine {spec!r} has no step() method")
    return engine
