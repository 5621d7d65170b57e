"""The scheduler's half of logprobs: asking the engine, queueing the rows.

A request with logprobs gets its prompt's logprobs (from ``logprob_start_len``
on) when it joins the batch, and each new token's right after the step that
made it (see :meth:`mtok.engines.Engine.logprobs`), unless it asked for its
prompt's only (``LogprobParams.output``).  The (logprob, id) rows
wait in ``req.new_logprobs`` under SGLang's meta_info keys until the step's
output message takes them to the detokenizer, which adds the token texts.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

from ..wire.finish import FinishAbort
from ..wire.io_struct import side_top_n

logger = logging.getLogger(__name__)


def engine_error(e: Exception) -> FinishAbort:
    """The finish of a request whose engine call raised: a 500 naming the exception."""
    return FinishAbort(f"engine error: {type(e).__name__}: {e}", 500)


class LogprobSteps:
    """Mixed into :class:`mtok.managers.scheduler.Scheduler`, which provides ``models`` and ``abort``."""

    models: Any
    abort: Any

    def _logprob_rows(self, req: Any, position: int) -> Tuple[tuple, list, Optional[list]]:
        lp = req.logprobs
        engine = self.models[req.model].engine
        n_in = len(req.input_ids)
        token = req.input_ids[position] if position < n_in else req.output_ids[position - n_in]
        own, top, ids = engine.logprobs(req, position, side_top_n(lp, position < n_in), lp.token_ids)
        return (float(own), token), [(float(x), int(t)) for x, t in top], \
            [(float(x), int(t)) for x, t in ids] if lp.token_ids is not None else None

    def _add_logprobs(self, req: Any, side: str, rows: List[tuple]) -> None:
        """Queue (own, top, ids) rows of ``side`` (input/output) for the next output message."""
        lp = req.logprobs
        new = req.new_logprobs = req.new_logprobs or {}
        new.setdefault(f"{side}_token_logprobs", []).extend(r[0] for r in rows)
        if side_top_n(lp, side == "input") > 0:
            new.setdefault(f"{side}_top_logprobs", []).extend(r[1] for r in rows)
        if lp.token_ids is not None:
            new.setdefault(f"{side}_token_ids_logprobs", []).extend(r[2] for r in rows)

    def prompt_logprobs(self, req: Any) -> None:
        """The prompt's logprobs from ``start_len`` on; the first token has none (no context)."""
        start = req.logprobs.start_len
        if start < 0 or start >= len(req.input_ids):
            self._add_logprobs(req, "input", [])
            return
        rows: List[tuple] = []
        if start == 0:
            rows.append(((None, req.input_ids[0]), None, None))
            start = 1
        try:
            rows += [self._logprob_rows(req, p) for p in range(start, len(req.input_ids))]
        except Exception as e:  # an engine's bug fails its request, not the scheduler
            logger.exception("prompt logprobs of %s failed", req.rid)
            self.abort(req, engine_error(e))
            return
        self._add_logprobs(req, "input", rows)

    def output_logprobs(self, req: Any) -> None:
        if not req.logprobs.output:
            return
        try:
            row = self._logprob_rows(req, len(req.input_ids) + len(req.output_ids) - 1)
        except Exception as e:
            logger.exception("output logprobs of %s failed", req.rid)
            req.finished_reason = engine_error(e)
            return
        self._add_logprobs(req, "output", [row])
