"""``python -m mtok.serve``: start the processes and supervise them.

The :class:`Arbiter` (the name is gunicorn's) owns every child.  Its main
thread runs one loop: take the signals queued since the last turn, reap
children that exited, kill workers whose heartbeat went stale (silence counted
on the loop's own passes, so time it did not run itself is no worker's fault:
:class:`~mtok.wire.status.SilenceWatch`), start their replacements, and sleep
on the children's sentinels until something happens.

Signals: SIGTERM stops gracefully (requests in flight may finish within
``--graceful-timeout``); SIGINT and SIGQUIT stop at once.  Either way every
child exits, the socket directory and shared memory are removed, and the exit
status is 0.  A scheduler or detokenizer that dies fails every request in
flight with a 503 and stops the server with status 1; a worker that fails to
boot halts it with status 3.
"""

from __future__ import annotations

import argparse
import glob
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from multiprocessing.connection import wait
from typing import Any, List, Optional

from .wire.args import (
    PortArgs,
    ServerArgs,
    args_json,
    args_shm_name,
    remove_stale_segments,
    shared_memory_usable,
    unlink_shm,
    write_args,
)
from .api.listen import claim_reuseport, make_listen_socket, reuseport_available
from .wire.io_struct import ServerFailure
from .wire.ipc import ipc_name
from .procutil import BootError, Child, configure_logging, describe_exit, reap, signal_process
from .managers.runners import RouterRunner, run_detokenizer_process, run_scheduler_process
from .wire.status import (
    DETOKENIZER_SLOT,
    FIRST_WORKER_SLOT,
    SCHEDULER_SLOT,
    ServerState,
    SlotState,
    SilenceWatch,
    StatusBoard,
    status_shm_name,
)
from .worker import HttpFrontend, run_tokenizer_worker_process

logger = logging.getLogger("mtok.serve")

STOP_TIMEOUT = 3.0
FAIL_LINGER = 1.0  # after a core process dies, keep answering 503 this long before exiting
EXIT_FAILED, EXIT_BOOT_ERROR = 1, 3


class BootInterrupted(BootError):
    """A stop signal arrived while starting: stop, and that is not a failure."""


class Arbiter:
    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
    use_shared_memory = True  # segments are named by pid: one Arbiter per process may use them

    def __init__(self, args: ServerArgs):
        self.args = args
        self.ctx = multiprocessing.get_context("spawn")
        self.authkey = os.urandom(32)  # travels to children over the spawn pipe only
        self.pid = os.getpid()
        self.signals: List[int] = []
        self.core: List[Child] = []
        self.workers: List[Child] = []
        self.sock_dir: Optional[str] = None
        self.args_shm: Any = None
        self.board: Optional[StatusBoard] = None
        self.silence: Optional[SilenceWatch] = None  # which workers missed their heartbeat
        self.listen_sock: Any = None
        self.router: Any = None
        self.frontend: Optional[HttpFrontend] = None
        self.port_args: Optional[PortArgs] = None
        self.args_ref = ""  # what children read their arguments from: a segment name, or the JSON itself
        self.shared_sock = False
        self._sig_r: Any = None
        self._sig_w: Any = None
        self.frontend_failure: Optional[str] = None  # N = 1: why this process's HTTP loop stopped

    # -- set-up ----------------------------------------------------------------------
    def run(self) -> int:
        self._install_signals()
        try:
            self.setup()
            self.boot()
        except BootError as e:
            say_fatal(str(e))
            self.stop(graceful=False)
            self.teardown()
            return 0 if isinstance(e, BootInterrupted) else EXIT_BOOT_ERROR
        except BaseException:
            self.stop(graceful=False)
            self.teardown()
            raise
        try:
            return self.loop()
        finally:
            self.teardown()

    def setup(self) -> None:
        args = self.args
        for seg in remove_stale_segments():
            logger.info("removed shared memory %s left by a dead server", seg)
        self._remove_stale_dirs()
        self.sock_dir = tempfile.mkdtemp(prefix=f"mtok-{self.pid}-")  # mode 0700
        os.chmod(self.sock_dir, 0o700)
        n = args.tokenizer_worker_num
        # One listening socket shared by every worker is the default: when a
        # worker dies its SO_REUSEPORT socket would take the connections still
        # queued on it down with it, while a shared one loses none; and an idle
        # worker is the first to accept, which balances load by itself.
        self.shared_sock = n == 1 or args.listen_mode != "reuseport"
        self.open_listener()
        self.share_state()

    def open_listener(self) -> None:
        args, n = self.args, self.args.tokenizer_worker_num
        if not self.shared_sock and not reuseport_available():
            raise BootError("--listen-mode reuseport: this platform has no SO_REUSEPORT")
        try:
            if self.shared_sock:
                self.listen_sock = make_listen_socket(args.host, args.port, reuseport=False)
            else:
                self.listen_sock = claim_reuseport(args.host, args.port)
        except OSError as e:
            raise BootError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
        if self.shared_sock and n > 1:
            # Every worker wakes for each connection and one wins the accept; the
            # others must get EAGAIN rather than block in accept().
            self.listen_sock.setblocking(False)
        args.port = self.listen_sock.getsockname()[1]

    def share_state(self) -> None:
        """The arguments and the status board, in shared memory where the host
        has it; else the arguments ride the process-start pipe and the board is
        a file mapped in the private socket directory."""
        shm = self.use_shared_memory and shared_memory_usable()
        if not shm:
            logger.info("no usable shared memory: the status board is a file in %s", self.sock_dir)
        self.port_args = PortArgs.in_dir(self.sock_dir, status_shm_name(self.pid) if shm else "")
        if shm:
            self.args_ref = args_shm_name(self.pid)
            self.args_shm = write_args(self.args_ref, self.args, self.port_args)
        else:
            self.args_ref = args_json(self.args, self.port_args)
        self.board = StatusBoard.create(self.port_args.status_name, self.args.tokenizer_worker_num)
        self.silence = SilenceWatch(self.board, self.args.worker_timeout)

    def _remove_stale_dirs(self) -> None:
        from .procutil import pid_alive

        for path in glob.glob(os.path.join(tempfile.gettempdir(), "mtok-*-*")):
            try:
                pid = int(os.path.basename(path).split("-")[1])
            except (IndexError, ValueError):
                continue
            if pid != self.pid and not pid_alive(pid) and os.stat(path).st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)

    def boot(self) -> None:
        self.spawn_core()
        if self.args.tokenizer_worker_num == 1:
            self._boot_single()
        else:
            self.router = RouterRunner(self.port_args, self.authkey)
            self.router.start()
            for i in range(self.args.tokenizer_worker_num):
                self.workers.append(self._spawn_worker(FIRST_WORKER_SLOT + i))
        self._wait_for_boot(self.core + self.workers)
        if self.frontend is not None:
            self.frontend.start(on_death=self._frontend_died)
        self.board.state = ServerState.SERVING
        host = f"[{self.args.host}]" if ":" in self.args.host else self.args.host
        print(
            f"mtok ready on http://{host}:{self.args.port} (workers={self.args.tokenizer_worker_num}, "
            f"engine={self.args.engine}, tokenizer={self.args.tokenizer_path or 'built-in'})",
            flush=True,
        )

    def spawn_core(self) -> None:
        """The scheduler, and the detokenizer's process unless it runs in the scheduler's (``--detokenizer``)."""
        roles = [("scheduler", SCHEDULER_SLOT, run_scheduler_process)]
        if self.args.detokenizer == "process":
            roles.append(("detokenizer", DETOKENIZER_SLOT, run_detokenizer_process))
        for role, slot, target in roles:
            self.core.append(self._spawn(role, slot, target, (self.args_ref, self.authkey, self.pid)))

    def _boot_single(self) -> None:
        from .managers.tokenizer_manager import TokenizerManager

        self.board.claim(FIRST_WORKER_SLOT, self.pid)
        try:
            tm = TokenizerManager(self.args, self.port_args, self.authkey).start(receive_thread=False)
        except Exception as e:
            raise BootError(f"the tokenizer manager failed to start: {type(e).__name__}: {e}") from None
        self.frontend = HttpFrontend(tm, self.board, FIRST_WORKER_SLOT, self.listen_sock, self.args)
        self.board.set_state(FIRST_WORKER_SLOT, SlotState.READY)

    def _spawn(self, role: str, slot: int, target: Any, args: tuple, ipc: Optional[str] = None) -> Child:
        """Start a child; it reports boot success or failure on a pipe passed last."""
        ready_r, ready_w = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=target, args=args + (ready_w,), name=f"mtok-{role}", daemon=True)
        proc.start()
        ready_w.close()
        self.board.claim(slot, proc.pid, ipc or "")
        return Child(role, slot, proc, ready_r, ipc)

    def _spawn_worker(self, slot: int) -> Child:
        name = ipc_name(self.sock_dir, f"worker-{slot - FIRST_WORKER_SLOT}-{os.urandom(4).hex()}")
        shared = self.listen_sock if self.shared_sock else None
        args = (self.args_ref, self.port_args.status_name, self.authkey, self.pid, slot, name, shared)
        return self._spawn("worker", slot, run_tokenizer_worker_process, args, name)

    def _wait_for_boot(self, children: List[Child]) -> None:
        while not all(c.poll_boot() for c in children):
            if self.signals:
                raise BootInterrupted("interrupted while starting")
            pending = [c for c in children if not c.booted]
            wait([c.ready for c in pending] + [c.process.sentinel for c in pending] + [self._sig_r], 0.5)
            self._drain_signal_pipe()
        for c in children:
            self.board.set_state(c.slot, SlotState.READY)

    # -- signals ---------------------------------------------------------------------
    def _install_signals(self) -> None:
        self._sig_r, self._sig_w = os.pipe()
        os.set_blocking(self._sig_r, False)
        os.set_blocking(self._sig_w, False)
        signal.set_wakeup_fd(self._sig_w)
        for s in self.SIGNALS:
            signal.signal(s, lambda signum, frame: self.signals.append(signum))

    def _drain_signal_pipe(self) -> None:
        try:
            os.read(self._sig_r, 4096)
        except (BlockingIOError, OSError):
            pass

    # -- the loop --------------------------------------------------------------------
    def loop(self) -> int:
        while True:
            while self.signals:
                sig = self.signals.pop(0)
                logger.info("received %s", signal.Signals(sig).name)
                self.stop(graceful=sig == signal.SIGTERM)
                return 0
            failure = self.reap_core() or self.frontend_failure
            if failure:
                return self.fail(failure)
            try:
                self.manage_workers()
            except BootError as e:
                say_fatal(str(e), "; halting")
                self.stop(graceful=False)
                return EXIT_BOOT_ERROR
            sentinels = [c.process.sentinel for c in self.core + self.workers]
            sentinels += [c.ready for c in self.workers if not c.booted]
            wait(sentinels + [self._sig_r], 0.25)
            self._drain_signal_pipe()

    def _frontend_died(self, why: str) -> None:
        """N = 1: nothing serves HTTP any more; the loop fails the server (called from the HTTP thread)."""
        self.frontend_failure = f"the HTTP serving loop stopped ({why})"
        try:
            os.write(self._sig_w, b"\0")  # wake the loop
        except OSError:  # full: it wakes anyway
            pass

    def reap_core(self) -> Optional[str]:
        for c in self.core:
            if not c.process.is_alive():
                self.board.set_state(c.slot, SlotState.DEAD)
                return f"the {c.name} died ({describe_exit(c.process.exitcode)})"
        return None

    def manage_workers(self) -> None:
        self.silence.next_pass()
        for i, w in enumerate(self.workers):
            if not w.booted:
                if w.poll_boot():
                    self.board.set_state(w.slot, SlotState.READY)
                    logger.info("worker %d is back as pid %d", w.slot - FIRST_WORKER_SLOT, w.process.pid)
                continue
            if not w.process.is_alive():
                logger.warning("%s died (%s); replacing it", w.name, describe_exit(w.process.exitcode))
                self.board.set_state(w.slot, SlotState.DEAD)
                self.router.worker_gone(w.ipc)
                self.board.count_restart()
                self.workers[i] = self._spawn_worker(w.slot)
                continue
            silent = self.silence.overdue(w.slot)  # once per process, however long it takes to die
            if silent is not None:
                logger.error("%s missed its heartbeat for %.1f s; killing it", w.name, silent)
                w.process.kill()
        ready = all(w.booted for w in self.workers)
        if self.board.state in (ServerState.SERVING, ServerState.DEGRADED):
            self.board.state = ServerState.SERVING if ready else ServerState.DEGRADED

    def fail(self, message: str) -> int:
        say_fatal(message, "; failing requests in flight and stopping")
        self.board.state = ServerState.FAILED
        if self.frontend is not None:
            self.frontend.tm.fail_all(message)
        elif self.router is not None:
            self.router.broadcast(ServerFailure(message=message), [w.ipc for w in self.workers if w.booted])
        # Requests in flight get their 503 now; meanwhile /health says 503 to
        # whoever watches, rather than the port going dark at once.
        wait([self._sig_r], FAIL_LINGER)
        self.stop(graceful=True, timeout=1.0)
        return EXIT_FAILED

    # -- stopping --------------------------------------------------------------------
    def stop(self, graceful: bool, timeout: Optional[float] = None) -> None:
        if self.board is not None and self.board.state != ServerState.FAILED:
            self.board.state = ServerState.STOPPING
        timeout = self.args.graceful_timeout if timeout is None else timeout
        # New connections are refused from now on: the workers close their
        # copies of the listening socket as they stop, and this is the last.
        if self.listen_sock is not None:
            self.listen_sock.close()
        if self.frontend is not None:
            self.frontend.stop_accepting()
            if graceful:
                self.frontend.drain(timeout, self._interrupted)
        live = [w.process for w in self.workers if w.process.is_alive()]
        graceful = graceful and not self._interrupted()
        for p in live:
            signal_process(p, signal.SIGTERM if graceful else signal.SIGQUIT)
        if graceful:
            self._await_workers(live, timeout + STOP_TIMEOUT)
        else:
            reap(live, STOP_TIMEOUT)
        core = [c.process for c in self.core]
        for p in core:
            signal_process(p, signal.SIGTERM)
        reap(core, STOP_TIMEOUT)

    def _interrupted(self) -> bool:
        """A SIGINT or SIGQUIT during a graceful stop: stop at once after all."""
        return any(s != signal.SIGTERM for s in self.signals)

    def _await_workers(self, procs: List[Any], timeout: float) -> None:
        """Wait for draining workers; a SIGINT or SIGQUIT meanwhile stops them at once."""
        deadline = time.monotonic() + timeout
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            if self._interrupted():
                for p in procs:
                    signal_process(p, signal.SIGQUIT)
                break
            wait([p.sentinel for p in procs if p.is_alive()] + [self._sig_r], 0.25)
            self._drain_signal_pipe()
        reap(procs, STOP_TIMEOUT)

    def teardown(self) -> None:
        if self.router is not None:
            self.router.close()
        if self.listen_sock is not None:
            self.listen_sock.close()
        if self.board is not None:
            shm = self.board.shm
            self.board.close()
            unlink_shm(shm)
        unlink_shm(self.args_shm)
        if self.sock_dir:
            shutil.rmtree(self.sock_dir, ignore_errors=True)
        if self._sig_w is not None:
            signal.set_wakeup_fd(-1)


def say_fatal(message: str, then: str = "") -> None:
    """Why the server stops, said once on stderr: a log line where logging shows
    errors (it goes to stderr too), else a bare ``mtok:`` line."""
    if logger.isEnabledFor(logging.ERROR):
        logger.error("%s%s", message, then)
    else:
        print(f"mtok: {message}", file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.serve", description="Serve an LLM frontend.")
    ServerArgs.add_cli_args(parser)
    try:
        args = ServerArgs.from_cli_args(parser.parse_args(argv))
        args.check()
    except ValueError as e:
        parser.error(str(e))
    configure_logging(args.log_level, "main")
    return Arbiter(args).run()


if __name__ == "__main__":
    sys.exit(main())
