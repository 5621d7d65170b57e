"""The text prompts of several calls, tokenized together: how
:meth:`TokenizerManager.submit_all <mtok.managers.tokenizer_manager.TokenizerManager.submit_all>`
tokenizes the jobs one event-loop turn submits.

Why.  A worker's event loop runs its routes one after another in one thread,
so a worker tokenized on one core, and at N = 1 that core was the server's
limit.  ``tokenizers`` lets go of the GIL while it encodes, so the texts of a
turn's calls, for one model, are encoded as one list, split in two: half in a
helper thread while the calling thread encodes the other half.  A backend
that holds the GIL (mtok's own runtime) encodes them in one call, which still
saves a call per text.

Only while the workers are fewer than the cores (``split``, which the
:class:`~mtok.managers.tokenizer_manager.TokenizerManager` decides from
``--tokenizer-worker-num`` and the cores it may run on).  With a worker per
core, each worker's helper only takes a core from another worker, and every
turn still pays the hand-off between the two threads: at N = 2 on 2 cores,
2 KB ``/generate`` of natural text did ~12% more requests per second without
it (four alternating rounds of ``python -m mtok.bench load``, 2026-12-06),
while at N = 1 the helper was worth ~25% (one round of each).

Each call keeps its own outcome: a text the tokenizer refuses (a lone
surrogate, say) fails only its call, which is then encoded alone to find it;
a call with many prompts (more than :data:`~mtok.managers.prepare.ENCODE_SLICE`)
is encoded alone, in slices, watching its client between them.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Hashable, List, Optional, Tuple

from .prepare import ENCODE_SLICE, encode_batch
from ..models import ModelEntry

Texts = Tuple[ModelEntry, List[str], Optional[Any]]  # a call's model, its prompts' texts, its watch


class BatchEncoder:
    """Encode many calls' texts at once (see the module's docstring)."""

    def __init__(self, split: bool = True) -> None:
        self.split = split  # half of a batch to a helper thread, where the backend lets go of the GIL
        self._helper: Optional[ThreadPoolExecutor] = None  # started when two threads first help
        self._lock = threading.Lock()  # callers on several threads (the pools, handler threads)

    def encode(self, calls: Dict[Hashable, Texts]) -> Dict[Hashable, Any]:
        """key -> each call's prompts' ids, or the exception its texts raised."""
        out: Dict[Hashable, Any] = {}
        shared: Dict[str, List[Hashable]] = {}  # model name -> the keys encoded together
        for key, (model, texts, watch) in calls.items():
            if len(texts) > ENCODE_SLICE:
                out[key] = self._alone(model, texts, watch)
            else:
                shared.setdefault(model.name, []).append(key)
        for keys in shared.values():
            out.update(self._together(keys, calls))
        return out

    def _together(self, keys: List[Hashable], calls: Dict[Hashable, Texts]) -> Dict[Hashable, Any]:
        model = calls[keys[0]][0]
        texts = [t for key in keys for t in calls[key][1]]
        try:
            ids = self._encode(model, texts)
        except Exception:  # noqa: BLE001 (a text it refuses: each call alone, so only its own fails)
            return {key: self._alone(*calls[key]) for key in keys}
        out, at = {}, 0
        for key in keys:
            n = len(calls[key][1])
            out[key], at = ids[at:at + n], at + n
        return out

    @staticmethod
    def _alone(model: ModelEntry, texts: List[str], watch: Optional[Any]) -> Any:
        try:
            return encode_batch(model, texts, watch)
        except Exception as e:  # noqa: BLE001 (the call's refusal, raised when it is submitted)
            return e

    def _encode(self, model: ModelEntry, texts: List[str]) -> List[List[int]]:
        if not self.split or len(texts) < 2 or not model.tokenizer.releases_gil:
            return model.tokenizer.encode_batch(texts)
        with self._lock:
            if self._helper is None:
                self._helper = ThreadPoolExecutor(1, thread_name_prefix="mtok-encode")
        half = len(texts) // 2
        theirs = self._helper.submit(model.tokenizer.encode_batch, texts[:half])
        mine = model.tokenizer.encode_batch(texts[half:])
        return theirs.result() + mine


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
