"""What an upstream engine learns of its upstream besides the streams: whether
it is healthy, and how long a context it takes.

One probe thread per upstream engine (:class:`Probe`) asks the upstream's
``/health`` every second.  Its finding is what the engine's ``health()`` says
(mtok's own ``/health`` is 503 while it is a problem), and the scheduler's
step reads it to fail streams that fall silent meanwhile (``health_grace``,
:mod:`mtok.engines.upstream_limits`): nothing watches a stream but that one
thread.  A probe whose answer never completes (a head sent a byte at a time,
which only a per-read timeout bounds) counts as a failure once it is overdue.

Once healthy -- at start, and again after each outage, since the upstream may
come back with another ``--max-model-len`` -- the probe reads the upstream's
context limit from its ``/v1/models`` card: ``max_model_len``, which vLLM's and
SGLang's cards both carry (SGLang's ``/get_model_info`` and ``/server_info``
hold no served limit of the model).  mtok's limit is then the smaller of that
and the tokenizer's (:meth:`mtok.engines.Engine.context_length`), so a prompt
the upstream would refuse gets mtok's own 400, in its usual words.

:func:`call` is one short call on a connection of its own, bounded in time and
size: the probes, and control calls such as ``/flush_cache``.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
from typing import Any, Optional, Tuple

from .upstream_limits import Malformed, error_message, read_capped

logger = logging.getLogger(__name__)

PROBE_INTERVAL = 1.0
PROBE_TIMEOUT = 5.0  # the most a /health probe may take
CONTROL_TIMEOUT = 30.0  # the most a control call (/flush_cache) may take
MODELS_PATH = "/v1/models"  # vLLM's and SGLang's model cards, with max_model_len


def call(pool: Any, cap: int, method: str, path: str, body: Optional[str], within: float) -> Tuple[int, bytes]:
    """One call on a connection of its own from ``pool`` (an
    :class:`mtok.engines.upstream.Pool`): (status, body), the body at most ``cap``
    bytes and the whole call done ``within`` s (else socket.timeout)."""
    within = min(within, pool.timeout)
    deadline = time.monotonic() + within
    conn = pool.new(timeout=within)
    try:
        conn.request(method, pool.prefix + path, body=body, headers={"Content-Type": "application/json"})
        sock = conn.sock  # getresponse lets go of it when the answer says Connection: close
        resp = conn.getresponse()
        return resp.status, read_capped(resp, cap, deadline, sock)
    finally:
        conn.close()


class Probe:
    """The upstream's health (``problem``: None when healthy) and context limit
    (``max_model_len``: None until read), kept current by one thread."""

    def __init__(self, pool: Any, cap: int, url: str, health_path: str):
        self.pool, self.cap, self.url, self.health_path = pool, cap, url, health_path
        self.problem: Optional[str] = None
        self.probed = time.monotonic()  # when the last probe ended
        self.max_model_len: Optional[int] = None

    def start(self) -> "Probe":
        threading.Thread(target=self._run, name="upstream-probe", daemon=True).start()
        return self

    def health(self) -> Optional[str]:
        """The last probe's finding, or that the probe under way is stuck."""
        quiet = time.monotonic() - self.probed
        if quiet > PROBE_TIMEOUT + 2 * PROBE_INTERVAL:
            return f"{self.url}{self.health_path} has given no whole answer for {quiet:.0f} s"
        return self.problem

    def _run(self) -> None:
        learned = False  # since the upstream last became healthy
        while True:
            self.problem = self.check()
            if self.problem is None and not learned:
                self.max_model_len = self.read_context_length() or self.max_model_len
                learned = True
            elif self.problem is not None:
                learned = False
            self.probed = time.monotonic()
            time.sleep(PROBE_INTERVAL)

    def check(self) -> Optional[str]:
        try:
            status, raw = call(self.pool, self.cap, "GET", self.health_path, None, PROBE_TIMEOUT)
        except Malformed as e:
            return f"{self.url}{self.health_path} sent {e}"
        except (OSError, http.client.HTTPException) as e:
            return f"cannot reach {self.url}: {type(e).__name__}: {e}"
        return None if status == 200 else f"{self.url} says {status} {error_message(raw)}"

    def read_context_length(self) -> Optional[int]:
        """The first ``max_model_len`` of the upstream's model cards; None if it gives none."""
        try:
            status, raw = call(self.pool, self.cap, "GET", MODELS_PATH, None, PROBE_TIMEOUT)
            cards = json.loads(raw).get("data") if status == 200 else None
        except (OSError, http.client.HTTPException, Malformed, ValueError, RecursionError, AttributeError):
            return None
        for card in cards if isinstance(cards, list) else ():
            n = card.get("max_model_len") if isinstance(card, dict) else None
            if type(n) is int and n > 0:
                if n != self.max_model_len:
                    logger.info("upstream %s: max_model_len %d", self.url, n)
                return n
        return None
