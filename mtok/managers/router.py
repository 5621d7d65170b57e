"""The MultiTokenizerRouter: the hub between N workers and the scheduler.

With ``--tokenizer-worker-num`` > 1 the workers send their requests to the
router's inbox, and the router passes them on to the scheduler as bytes (it
never unpickles them).  Batch outputs do not come back this way: the
detokenizer sends each worker its piece directly.  What does come back here
are the non-batch messages (control replies), each delivered to the worker
whose address is on it; and when the supervisor replaces a dead worker, the
router tells the scheduler to abort what that worker had in flight.

This class holds those rules and nothing else; the sockets and the two
threads of the main process that apply them are
:class:`mtok.managers.runners.RouterRunner`'s.
"""

from __future__ import annotations

from typing import Any, Optional

from ..wire.io_struct import AbortReq


class MultiTokenizerRouter:
    """Where each message goes; no I/O."""

    @staticmethod
    def reply_address(msg: Any) -> Optional[str]:
        """The worker a reply from the detokenizer belongs to (None: nobody's; it is dropped)."""
        return getattr(msg, "worker_address", None)

    @staticmethod
    def departure_notice(address: str) -> AbortReq:
        """What the scheduler gets when a worker has died: abort everything it sent."""
        return AbortReq(abort_all_of=address)
