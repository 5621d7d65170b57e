"""``mtok.launch(**settings)``: the whole server, started from Python.

The server runs exactly as ``python -m mtok.serve`` does — its supervisor
(the ``Arbiter``) in a process of its own, which owns every other process —
so signals, worker replacement and clean-up behave the same.  That process
is started with ``subprocess`` rather than ``multiprocessing``: it imports
only mtok, never the caller's ``__main__``, so launching works the same from
a script, from pytest and from a Jupyter kernel, and a script needs no
``if __name__ == "__main__":`` guard unless it hands over an engine class
defined in itself.

The caller and the supervisor share a socket pair: settings go one way as
JSON, and the boot report ("ready" with the port and process ids, or the
reason a boot failed) comes back.  When the caller's end closes (it exited or
was killed) the supervisor stops the server at once, so no process outlives
its owner.  The server has a session of its own, so a Ctrl-C in the caller's
terminal reaches the caller only, which stops the server through its handle
(or at exit).  :class:`ServerHandle` is what the caller holds.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Dict, List, Optional, Set

from .serve import BOOT_TIMEOUT, Arbiter, BootError

__all__ = ["launch", "ServerHandle", "BootError"]


class ServerHandle:
    """A running server: ``url``, ``port``, ``pid`` (its supervisor), ``pids``
    (every process at boot), ``wait()``, ``stop()``; a context manager."""

    def __init__(self, proc: subprocess.Popen, conn: Connection, report: Dict[str, Any], graceful_timeout: float):
        self._proc, self._conn = proc, conn
        self.host: str = report["host"]
        self.port: int = report["port"]
        self.pids: Dict[str, Any] = report["pids"]
        self.pid: int = proc.pid
        self._graceful_timeout = graceful_timeout
        _LIVE.add(self)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def wait(self, timeout: Optional[float] = None) -> int:
        """Block until the server exits (by a signal, or a core process dying); its exit status."""
        code = self._proc.wait(timeout)
        self._close()
        return code

    def stop(self, graceful: bool = True, timeout: Optional[float] = None) -> int:
        """Stop the server: gracefully (requests in flight finish, up to
        ``graceful_timeout``) or at once.  Returns its exit status (0 for a clean stop)."""
        if self.running:
            self._proc.send_signal(signal.SIGTERM if graceful else signal.SIGINT)
        limit = timeout if timeout is not None else (self._graceful_timeout if graceful else 0) + 10
        try:
            return self.wait(limit)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            return self.wait()

    def _close(self) -> None:
        _LIVE.discard(self)
        try:
            self._conn.close()
        except OSError:
            pass

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<mtok server {self.url} pid={self.pid} {'running' if self.running else 'stopped'}>"


_LIVE: "Set[ServerHandle]" = set()  # every server this process started and has not stopped


@atexit.register
def _stop_all() -> None:
    for handle in list(_LIVE):
        handle.stop(graceful=False)


def launch(**settings: Any) -> ServerHandle:
    """Start a server with the command line's settings (as keywords) and return
    once it serves.  A server that cannot start raises :class:`BootError` with
    the reason the command line prints."""
    from .settings import server_args_from

    args = server_args_from("launch", settings)
    parent, child = socket.socketpair()
    env = dict(os.environ)
    # the child must import mtok, and an engine module, from where the caller does
    env["PYTHONPATH"] = os.pathsep.join([p or os.getcwd() for p in sys.path])
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mtok.launcher", str(child.fileno())], env=env,
                                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        child.close()
    conn = Connection(parent.detach())
    conn.send_bytes(json.dumps(vars(args)).encode())
    report = _await_report(proc, conn)
    return ServerHandle(proc, conn, report, args.graceful_timeout)


def _await_report(proc: subprocess.Popen, conn: Connection) -> Dict[str, Any]:
    try:
        ready = conn.poll(BOOT_TIMEOUT + 10)
        report = json.loads(conn.recv_bytes()) if ready else None
    except (EOFError, OSError):
        report = None
    if report is not None and report.get("kind") == "ready":
        return report
    if report is None:
        proc.kill()
    code = proc.wait()
    conn.close()
    if report is not None:
        raise BootError(report["detail"])
    raise BootError(f"the server process exited during boot (exit status {code}) without saying why")


# --- the supervisor's side -------------------------------------------------------------
class ReportingArbiter(Arbiter):
    """An Arbiter that tells its launcher how the boot went."""

    def __init__(self, args: Any, conn: Connection):
        super().__init__(args)
        self.conn = conn

    def report(self, kind: str, **info: Any) -> None:
        try:
            self.conn.send_bytes(json.dumps({"kind": kind, **info}).encode())
        except OSError:
            pass

    def setup(self) -> None:
        try:
            super().setup()
        except BootError as e:
            self.report("error", detail=str(e))
            raise

    def boot(self) -> None:
        try:
            super().boot()
        except BootError as e:
            self.report("error", detail=str(e))
            raise
        pids: Dict[str, Any] = {"main": self.pid}
        for c in self.core:
            pids[c.role] = c.process.pid
        pids["workers"] = [w.process.pid for w in self.workers] or [self.pid]
        self.report("ready", host=self.args.host, port=self.args.port, pids=pids)
        threading.Thread(target=self.watch_launcher, name="launcher-watch", daemon=True).start()

    def watch_launcher(self) -> None:
        """The launcher's end closed: it is gone, so stop at once."""
        try:
            while True:
                self.conn.recv_bytes()
        except (EOFError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGINT)


def _child_main(argv: List[str]) -> int:
    from .wire.args import ServerArgs
    from .procutil import configure_logging

    conn = Connection(int(argv[0]))
    args = ServerArgs(**json.loads(conn.recv_bytes()))
    configure_logging(args.log_level, "main")
    return ReportingArbiter(args, conn).run()


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
