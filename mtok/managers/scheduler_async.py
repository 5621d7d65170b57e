"""The scheduler's side of asynchronous engines (:mod:`mtok.engines`): an
engine whose step may return several tokens, none, or a finish of its own, with
logprob rows that arrive with the tokens, and a health of its own.

Kept apart from :mod:`mtok.managers.scheduler` so the synchronous path there stays as
it was; :class:`mtok.managers.scheduler.Scheduler` mixes this in.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..engines import Engine, EngineOutput


class AsyncEngineSupport:
    """Methods of the Scheduler for asynchronous engines (uses its ``models``)."""

    models: Any

    def engine_problem(self) -> Optional[str]:
        """Why some model's engine cannot serve now (its ``health()``), or None."""
        for name, rt in self.models.items():
            problem = rt.engine.health() if has_health(rt.engine) else None
            if problem:
                return f"{name}: {problem}"
        return None

    def engine_context_lengths(self) -> Tuple[Tuple[str, int], ...]:
        """(model, the context limit its engine has learned) for each engine that knows one."""
        out = []
        for name, rt in self.models.items():
            learned = getattr(rt.engine, "context_length", None)
            n = learned() if callable(learned) else None
            if isinstance(n, int) and n > 0:
                out.append((name, n))
        return tuple(out)

    def engine_logprobs(self, req: Any, out: EngineOutput) -> None:
        """Queue the rows an asynchronous engine sent: the prompt's (once) and the new tokens'."""
        def row(r: Any, token: int) -> tuple:
            if r is None:
                return (None, token), None, None
            own, top, ids = r
            return ((None if own is None else float(own)), token), _pairs(top), \
                (_pairs(ids) or [] if req.logprobs.token_ids is not None else None)
        if out.input_logprobs is not None:
            start = max(req.logprobs.start_len, 0)
            self._add_logprobs(req, "input", [row(r, req.input_ids[start + i]) for i, r in enumerate(out.input_logprobs)])
        rows = list(out.logprobs or ())
        self._add_logprobs(req, "output", [row(rows[i] if i < len(rows) else None, t) for i, t in enumerate(req.new_ids)])

    def stop_strings_one_by_one(self, req: Any) -> None:
        """Several new tokens at once (an asynchronous engine): search for stop
        strings after each, so the request ends at the token that completed one."""
        decoder, new_ids, length_end = self.models[req.model].decoder, req.new_ids, req.finished_reason
        for k, tok in enumerate(new_ids):
            last = k == len(new_ids) - 1
            req.decode.ids.append(tok)
            new = decoder.step([req.decode], [last and length_end is not None])[0]
            self.check_stop_strings(req, new)
            if req.finished_reason is not None and req.finished_reason is not length_end:
                self._cut(req, k + 1)
                return

    @staticmethod
    def _cut(req: Any, keep: int) -> None:
        """Drop the new tokens after the first ``keep`` (they came past the request's end)."""
        drop = len(req.new_ids) - keep
        if drop > 0:
            del req.output_ids[-drop:]
            req.new_ids = req.new_ids[:keep]
            new = req.new_logprobs or {}
            if "output_token_logprobs" in new:  # the rows of the dropped tokens go too
                for key in [k for k in new if k.startswith("output_")]:
                    del new[key][-drop:]


def has_health(engine: Any) -> bool:
    """Whether ``engine`` has a health check of its own (the base class's always says fine)."""
    hook = getattr(type(engine), "health", None)
    return hook is not None and hook is not Engine.health


def _pairs(rows: Any) -> Optional[List[Tuple[float, int]]]:
    return None if rows is None else [(float(x), int(t)) for x, t in rows]
