"""The scheduler's control calls: what ``/abort_request``, ``/flush_cache`` and
the server-state routes ask it through an ``RpcReq``.

An ``RpcReq`` names a method; :meth:`SchedulerRpc.handle_rpc` calls
``rpc_<method>`` and puts the result (or the error, as text) in an
``RpcOutput`` for the asking worker.  Kept apart from :mod:`mtok.managers.scheduler`,
whose subject is batching; :class:`mtok.managers.scheduler.Scheduler` mixes this in.
"""

from __future__ import annotations

import collections
import os
from typing import Any, Dict, List, Optional

from ..wire.finish import CLIENT_CLOSED, FinishAbort
from ..wire.io_struct import RpcOutput, RpcReq


class SchedulerRpc:
    """Methods of the Scheduler (uses its ``models``, ``reqs``, ``running``,
    ``waiting``, ``abort`` and ``outbox``)."""

    models: Dict[str, Any]
    reqs: Dict[str, Any]
    running: List[Any]
    waiting: Any
    outbox: List[Any]
    abort: Any

    def handle_rpc(self, msg: RpcReq) -> None:
        method = getattr(self, f"rpc_{msg.method}", None)
        out = RpcOutput(rid=msg.rid, worker_address=msg.worker_address)
        if method is None:
            out.error = f"unknown method {msg.method!r}"
        else:
            try:
                out.result = method(**msg.params)
            except Exception as e:  # a bad call must not take the scheduler down
                out.error = f"{type(e).__name__}: {e}"
        self.outbox.append(out)

    def rpc_abort(self, rid: Optional[str] = None, abort_all: bool = False) -> int:
        """Abort on behalf of any worker (``POST /abort_request``): ``rid``, the
        samples of ``rid`` (``rid-1``, ``rid-2``, ... of ``n`` > 1 or a batch), or
        everything.  How many requests were aborted."""
        victims = [r for r in self.reqs.values()
                   if abort_all or r.rid == rid or (rid and r.rid.startswith(rid + "-"))]
        for req in victims:
            self.abort(req, FinishAbort("aborted by /abort_request", CLIENT_CLOSED))
        return len(victims)

    def rpc_flush_cache(self) -> Dict[str, Any]:
        """Every engine that has a cache drops it; one without the capability is an error."""
        lacking = [name for name, rt in self.models.items()
                   if "flush_cache" not in getattr(rt.engine, "capabilities", ())]
        if lacking:
            raise LookupError(f"the engine of {', '.join(map(repr, lacking))} has no 'flush_cache' capability")
        for rt in self.models.values():
            rt.engine.flush_cache()
        return {"flushed": list(self.models)}

    def rpc_get_state(self) -> Dict[str, Any]:
        by_worker: Dict[str, int] = collections.Counter(r.worker_address or "" for r in self.reqs.values())
        return {
            "num_running": len(self.running),
            "num_waiting": len(self.waiting),
            "running_rids": [r.rid for r in self.running],
            "waiting_rids": [r.rid for r in self.waiting],
            "requests_by_worker": dict(by_worker),
            "pid": os.getpid(),
        }
