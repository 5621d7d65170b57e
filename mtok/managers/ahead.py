"""Tokenize one event-loop turn's prompts together, two threads at once.

A worker's event loop runs its routes one after another in one thread, so a
worker tokenized on one core, and at N = 1 that core was the server's limit.
``tokenizers`` lets go of the GIL while it encodes, so before a turn's routes
run, the prompts they will tokenize are split: half encoded in a helper
thread while the loop's thread encodes the other half.  The ids wait in their
model's ``ahead`` table, where the route's tokenization
(:func:`mtok.managers.prepare.encode_batch`) takes them instead of encoding
again; whatever no route took (a request refused on another field) is dropped
when the turn ends.

Taken ahead: one-text prompts of the routes that name theirs
(``route(prompt=...)``: ``/generate``, ``/v1/completions``), with a backend that
releases the GIL, two or more in a turn.  Everything else is tokenized by its
route as before.  A request's latency in the metrics starts when its route
runs, after this.
"""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List, Optional, Sequence

from ..validate import APIError
from ..models import ModelEntry

logger = logging.getLogger(__name__)


class EncodeAhead:
    """``turn(plans)``, the event loop's ``prepare_turn``: a context for running
    the turn's plans (:class:`mtok.api.intake.Plan`) in."""

    def __init__(self, tm: Any):
        self.tm = tm
        self._helper: Optional[ThreadPoolExecutor] = None  # started on the first turn with prompts

    @contextlib.contextmanager
    def turn(self, plans: Sequence[Any]) -> Iterator[None]:
        prompts: Dict[str, "tuple[ModelEntry, List[str]]"] = {}
        try:
            prompts = self._prompts(plans)
            for model, texts in prompts.values():
                self._encode(model, texts)
        except Exception:  # noqa: BLE001 (a bug here must not stop the loop: the routes tokenize)
            logger.exception("tokenizing a turn's prompts ahead failed")
        try:
            yield
        finally:
            for model, _ in prompts.values():
                model.ahead.clear()

    def _prompts(self, plans: Sequence[Any]) -> Dict[str, "tuple[ModelEntry, List[str]]"]:
        """model name -> (model, texts), for the models with two or more."""
        if self.tm.server_args.skip_tokenizer_init:
            return {}
        found: Dict[str, "tuple[ModelEntry, List[str]]"] = {}
        for plan in plans:
            prompt, body = getattr(plan.handler, "prompt", None), plan.request._json
            named = prompt(body) if prompt is not None and isinstance(body, dict) else None
            if named is None:
                continue
            try:
                model = self.tm.model(named[0])
            except APIError:
                continue  # the route answers that
            if model.tokenizer.releases_gil:
                found.setdefault(model.name, (model, []))[1].append(named[1])
        return {name: entry for name, entry in found.items() if len(entry[1]) > 1}

    def _encode(self, model: ModelEntry, texts: List[str]) -> None:
        if self._helper is None:
            self._helper = ThreadPoolExecutor(1, thread_name_prefix="mtok-encode")
        half = len(texts) // 2
        theirs = self._helper.submit(model.tokenizer.encode_batch, texts[:half])
        try:
            mine = model.tokenizer.encode_batch(texts[half:])
            model.ahead.update(zip(texts, theirs.result() + mine))
        except Exception:  # noqa: BLE001 (a text it refuses: each route tokenizes its own, and says so)
            logger.debug("tokenizing ahead failed; the routes tokenize their prompts", exc_info=True)
