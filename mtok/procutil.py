"""What every child process does first: die with its parent, name itself,
leave SIGINT to the supervisor, and report boot success or failure."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1

_libc: Any = None


def _prctl(option: int, arg: Any) -> bool:
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if isinstance(arg, int):
            arg = ctypes.c_ulong(arg)
        return _libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_process_title(title: str) -> None:
    """Name the process in ps/top (the kernel keeps 15 bytes)."""
    _prctl(PR_SET_NAME, ctypes.create_string_buffer(title.encode()[:15]))


def die_with_parent(parent_pid: int, poll: float = 0.25) -> None:
    """Exit when the parent does, even if it was SIGKILLed.

    PR_SET_PDEATHSIG does it in the kernel on Linux; a thread that watches
    getppid() covers other platforms and the race where the parent died
    before the prctl call.
    """
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll)
        os._exit(1)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def configure_logging(level: str, role: str) -> None:
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s [{role} %(process)d] %(name)s: %(message)s",
        stream=sys.stderr,
    )


class ChildBoot:
    """The child side of the start-up handshake with the supervisor.

    Use as a context manager around construction: leaving it normally reports
    ``ready``; an exception is reported as a boot failure, with the message the
    supervisor prints before it halts the server.
    """

    def __init__(self, role: str, parent_pid: int, ready_conn, log_level: str = "info"):
        self.role = role
        self.ready_conn = ready_conn
        die_with_parent(parent_pid)
        set_process_title(f"mtok:{role}")
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides how to stop
        configure_logging(log_level, role)
        self.info: dict = {}

    def __enter__(self) -> "ChildBoot":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.ready_conn.send(("ready", self.info))
            self.ready_conn.close()
            return False
        detail = "".join(traceback.format_exception_only(exc_type, exc)).strip()
        logging.getLogger("mtok").debug("boot failed", exc_info=(exc_type, exc, tb))
        try:
            self.ready_conn.send(("error", f"{self.role} failed to start: {detail}"))
        except OSError:
            pass
        os._exit(3)


def on_signal(signum: int, handler: Callable[[], Any]) -> None:
    signal.signal(signum, lambda *_: handler())


def exit_now(code: int = 0) -> None:
    """Leave without running atexit handlers or waiting on threads."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


_HAVE_PROC = os.path.isdir("/proc/self")


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped) does not.  Linux
    says so in /proc; elsewhere ``kill(pid, 0)`` is the best answer there is."""
    if not _HAVE_PROC:
        return _signalable(pid)
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return _signalable(pid)
    return stat[stat.rindex(")") + 2] != "Z"


def _signalable(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
