"""``POST /v1/score`` and ``/v1/rerank``, in SGLang's shapes.

**Scoring** (SGLang's ``ScoringRequest`` / ``ScoringResponse``): for each item,
how likely each label token is to come right after ``query + item`` (``item +
query`` with ``item_first``).  SGLang computes it as a generate request that
asks for the label ids' logprobs at the next position
(``tokenizer_manager_score_mixin.score_request``: ``token_ids_logprob``), and so
does mtok: one request per item, one new token, the labels' logprobs at it.  So
every engine with the ``token_ids_logprob`` capability scores (the echo engine,
deterministically: see :mod:`mtok.engines.echo`; an upstream SGLang, which is
asked that same generate request), and the others refuse with a 400 naming the
capability.  Scores are probabilities (``exp`` of the logprobs), or with
``apply_softmax`` the softmax over the labels of ``logprob / temperature``.
The usage counts the prompts only, as SGLang's: the one generated token is how
the next position is reached, not an answer.

**Reranking** (``V1RerankReqInput``, answered by a list of ``RerankResponse``):
mtok serves no cross-encoder, so a document's score is the cosine of its
embedding and the query's (the engine's :meth:`~mtok.engines.Engine.embed`;
with the echo engine, texts sharing tokens score higher), best first, the
``top_n`` best if given.  An engine that does not embed refuses (400).

Both read their bodies through the field table (:mod:`mtok.fields`) and are
bounded like the other routes (``--max-prompts-per-request``, the body size,
``--max-logprob-entries``).  What the route itself refuses is answered in
SGLang's flat ``ErrorResponse`` (``object``, ``message``, ``type:
"BadRequestError"``, ``param``, ``code``), which SGLang's clients of these routes
read, with mtok's usual ``error`` object beside it, with SGLang's wording
("Token ID 999999 is out of vocabulary (vocab size: N)").
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .. import fields
from ..managers.limits import check_batch_size
from .routes import Pending, Request, route
from ..validate import APIError, require_object
from ..wire.io_struct import GenerateReqInput, LogprobParams, SamplingParams


class SGLangError(APIError):
    """An error in the flat shape of SGLang's ``ErrorResponse``, mtok's ``error`` object beside it."""

    def body(self) -> Dict[str, Any]:
        flat = {"object": "error", "message": self.message, "type": "BadRequestError" if self.status == 400
                else "error", "param": self.param, "code": self.status}
        return dict(flat, **super().body())


@contextlib.contextmanager
def sglang_errors() -> Iterator[None]:
    try:
        yield
    except SGLangError:
        raise
    except APIError as e:
        raise SGLangError(e.message, e.status, e.param, e.headers) from None


def refuse(message: str, param: Optional[str] = None) -> SGLangError:
    return SGLangError(message, 400, param)


class RefusalsAs:
    """A request handle whose refusals after submission (the engine's, say) come
    in SGLang's shape and say what the route needed: the transports read
    ``drain`` / ``results``; everything else is the handle's."""

    def __init__(self, handle: Any, needs: str):
        self.handle, self.needs = handle, needs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    def __enter__(self) -> "RefusalsAs":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.__exit__(*exc)

    def drain(self) -> bool:
        with self.explained():
            return self.handle.drain()

    def results(self) -> List[Any]:
        with self.explained():
            return self.handle.results()

    @contextlib.contextmanager
    def explained(self) -> Iterator[None]:
        try:
            yield
        except APIError as e:
            message = f"{self.needs}: {e.message}" if e.status == 400 else e.message
            raise SGLangError(message, e.status, e.param, e.headers) from None


# -- /v1/score ------------------------------------------------------------------------
def score_prompts(query: Any, items: Any, item_first: bool) -> Tuple[bool, List[Any]]:
    """(whether they are token ids, the prompts to score): each item joined with the query."""
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, list) or not items:
        raise refuse("items must be a string, a list of strings or a list of token id lists", "items")
    as_ids = all(isinstance(i, list) for i in items)
    if as_ids:
        query = [] if query is None else query
        bad_ids = not isinstance(query, list) or any(type(t) is not int or t < 0 for x in [query, *items] for t in x)
        if bad_ids:
            raise refuse("Invalid combination of query/items types for score_request.", "query")
    else:
        query = "" if query is None else query
        if not isinstance(query, str) or not all(isinstance(i, str) for i in items):
            raise refuse("Invalid combination of query/items types for score_request.", "query")
    return as_ids, [item + query if item_first else query + item for item in items]


def label_lists(labels: Any, n_items: int, vocab: int) -> List[List[int]]:
    """One list of candidate ids per item, checked as SGLang checks them."""
    if labels is None:
        raise refuse("label_token_ids is required for generation (CausalLM) models.", "label_token_ids")
    if not isinstance(labels, list) or not labels:
        raise refuse("label_token_ids must be a nonempty list", "label_token_ids")
    if isinstance(labels[0], list):
        if len(labels) != n_items:
            raise refuse("label_token_ids must have one list per item", "label_token_ids")
    else:
        labels = [labels] * n_items
    for ids in labels:
        if not isinstance(ids, list) or not ids:
            raise refuse("each item must have a nonempty candidate list", "label_token_ids")
        if any(type(t) is not int or t < 0 for t in ids):
            raise refuse("label_token_ids must contain nonnegative integers", "label_token_ids")
        if len(set(ids)) != len(ids):
            raise refuse("label_token_ids must not contain duplicate tokens", "label_token_ids")
        for t in ids:
            if t >= vocab:
                raise refuse(f"Token ID {t} is out of vocabulary (vocab size: {vocab})", "label_token_ids")
    return labels


def label_scores(logprobs: Dict[int, float], labels: Sequence[int], softmax: bool, temperature: float) -> List[float]:
    """The labels' probabilities, or their softmax (centred first, so a small temperature cannot overflow)."""
    lps = [logprobs.get(t, -math.inf) for t in labels]
    if not softmax:
        return [math.exp(x) if x != -math.inf else 0.0 for x in lps]
    top = max(lps)
    if top == -math.inf:
        return [1.0 / len(lps)] * len(lps)
    weights = [math.exp((x - top) / temperature) for x in lps]
    total = sum(weights)
    return [w / total for w in weights]


def next_logprobs(st: Any) -> Dict[int, float]:
    """The logprobs asked for by id at the first generated position of ``st``."""
    rows = (st.logprobs or {}).get("output_token_ids_logprobs") or [[]]
    return {int(t[1]): float(t[0]) for t in rows[0] or ()}


def score_options(got: Dict[str, Any]) -> Tuple[bool, float]:
    softmax = fields.value(got, fields.SCORE, "apply_softmax")
    temperature = fields.value(got, fields.SCORE, "temperature")
    if not temperature > 0:
        raise refuse("temperature must be finite and greater than zero", "temperature")
    if temperature != 1.0 and not softmax:
        raise refuse("temperature requires apply_softmax=True", "temperature")
    return softmax, temperature


# -- /v1/rerank ------------------------------------------------------------------------
def rerank_inputs(got: Dict[str, Any]) -> Tuple[str, List[str]]:
    """The query and documents, checked in SGLang's words (text only: no content parts)."""
    query, docs = got.get("query"), got.get("documents")
    if not query:
        raise refuse("Query cannot be empty", "query")
    if not isinstance(query, str):
        raise refuse("the query must be a string: this server's engines take text only", "query")
    if not query.strip():
        raise refuse("Query cannot be empty or whitespace only", "query")
    if not isinstance(docs, list) or not docs:
        raise refuse("Documents cannot be empty", "documents")
    for doc in docs:
        if not doc or not isinstance(doc, str):
            raise refuse("Each document must be a non-empty string", "documents")
        if not doc.strip():
            raise refuse("Each document cannot be empty or whitespace only", "documents")
    return query, docs


def top_n_of(got: Dict[str, Any]) -> Optional[int]:
    top_n = got.get("top_n")
    if top_n is not None and (type(top_n) is not int or top_n < 1):
        raise refuse("Value error, parameter top_n should be larger than 0.", "top_n")
    return top_n


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b)) / norm if norm else 0.0


class ScoringRoutes:
    """Mixed into :class:`mtok.api.native.Api`, which provides tm and args."""

    @route("POST", "/v1/score", inline=True)
    def score(self, req: Request) -> Any:
        with sglang_errors():
            got = fields.read(require_object(req.json()), fields.SCORE, self.args.strict_fields)
            model = self.tm.model(got.get("model"))
            softmax, temperature = score_options(got)
            items = got.get("items")
            if items is None:
                raise refuse("items must be provided", "items")
            if items == []:
                return self._scored(model.name, [], [], [], softmax, temperature, got)
            as_ids, prompts = score_prompts(got.get("query"), items, fields.value(got, fields.SCORE, "item_first"))
            check_batch_size(len(prompts), self.args.max_prompts_per_request, "items")
            labels = label_lists(got.get("label_token_ids"), len(prompts), model.tokenizer.vocab_size)
            asked = sorted({t for ids in labels for t in ids})
            obj = GenerateReqInput(sampling_params=SamplingParams(max_new_tokens=1), model=model.name, is_batch=True,
                                   logprobs=LogprobParams(token_ids=asked, param="label_token_ids"))
            if as_ids:
                obj.input_ids = prompts
            else:
                obj.text = prompts
            handle = RefusalsAs(self.tm.submit(obj, req.watch), "scoring needs the label ids' logprobs")
        return Pending(handle, lambda states: self._scored(model.name, states, labels, prompts, softmax, temperature,
                                                           got))

    @staticmethod
    def _scored(model: str, states: List[Any], labels: List[List[int]], prompts: List[Any], softmax: bool,
                temperature: float, got: Dict[str, Any]) -> Dict[str, Any]:
        scores, token_logprobs = [], []
        for st, ids in zip(states, labels):
            lps = next_logprobs(st)
            scores.append(label_scores(lps, ids, softmax, temperature))
            token_logprobs.append([lps.get(t, -math.inf) for t in ids])
        prompt = sum(st.prompt_tokens for st in states)
        return {"scores": scores, "pooled_hidden_states": None,
                "token_logprobs": token_logprobs if fields.value(got, fields.SCORE, "return_token_logprobs") else None,
                "model": model, "usage": {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt},
                "object": "scoring"}

    @route("POST", "/v1/rerank", inline=True)
    @route("PUT", "/v1/rerank", inline=True)
    def rerank(self, req: Request) -> Any:
        with sglang_errors():
            got = fields.read(require_object(req.json()), fields.RERANK, self.args.strict_fields)
            query, docs = rerank_inputs(got)
            top_n = top_n_of(got)
            check_batch_size(len(docs) + 1, self.args.max_prompts_per_request, "documents")
            model = self.tm.model(got.get("model"))
            handle = RefusalsAs(self.tm.submit_embedding([query, *docs], model.name, req.watch),
                                "reranking compares embeddings")
        with_docs = fields.value(got, fields.RERANK, "return_documents")
        return Pending(handle, lambda states: ranked(states, docs, with_docs, top_n))


def ranked(states: List[Any], docs: List[str], with_docs: bool, top_n: Optional[int]) -> List[Dict[str, Any]]:
    """SGLang's RerankResponse list, best first: the query's embedding is the first state's."""
    q = states[0].embedding or []
    out = []
    for i, st in enumerate(states[1:]):
        entry: Dict[str, Any] = {"score": cosine(q, st.embedding or []), "index": i,
                                 "meta_info": {"id": st.rid, "prompt_tokens": st.prompt_tokens}}
        if with_docs:
            entry["document"] = docs[i]
        out.append(entry)
    out.sort(key=lambda e: e["score"], reverse=True)
    return out[:top_n] if top_n is not None else out
