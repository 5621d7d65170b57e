"""The status board: what workers read without asking anyone."""

from __future__ import annotations

import os
import types

import pytest

from mtok.wire.args import unlink_shm
from mtok.wire.metrics import Metrics
from mtok.wire.status import (DETOKENIZER_SLOT, FIRST_WORKER_SLOT, SCHEDULER_SLOT, ServerState, SilenceWatch,
                              SlotState, StatusBoard)
from mtok.worker import HttpFrontend

pytestmark = [pytest.mark.fast, pytest.mark.unit]


@pytest.fixture
def board():
    b = StatusBoard.create(f"mtok_test_{os.getpid()}", 2)
    yield b
    shm = b.shm
    b.close()
    unlink_shm(shm)


def test_a_worker_fails_its_requests_from_the_board_alone(board):
    """Even when the supervisor's notice never arrives, the next tick sees FAILED."""
    failed = []
    tm = types.SimpleNamespace(failure=None, fail_all=failed.append, learn_context_lengths=lambda lengths: None)
    front = types.SimpleNamespace(board=board, slot=FIRST_WORKER_SLOT, tm=tm,
                                  httpd=types.SimpleNamespace(served=0, metrics=Metrics()))
    board.claim(SCHEDULER_SLOT, 4242)
    board.claim(DETOKENIZER_SLOT, 4343)
    board.state = ServerState.SERVING
    HttpFrontend.tick(front)
    assert failed == []
    board.set_state(DETOKENIZER_SLOT, SlotState.DEAD)
    board.state = ServerState.FAILED
    HttpFrontend.tick(front)
    assert failed == ["the detokenizer (pid 4343) died"]
    assert board.slot(FIRST_WORKER_SLOT).heartbeat_age < 5


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def passes(watch, clock, seconds: float, slot: int = FIRST_WORKER_SLOT, step: float = 0.25):
    """The supervisor's passes over ``seconds``, one every ``step``: what each found overdue."""
    found = []
    for _ in range(round(seconds / step)):
        clock.now += step
        watch.next_pass()
        found.append(watch.overdue(slot))
    return [x for x in found if x is not None]


def test_a_silent_worker_is_overdue_once_per_process(board):
    """The supervisor logged and killed "missed its heartbeat" on each pass until the process was reaped (six times)."""
    clock = Clock()
    watch = SilenceWatch(board, timeout=2.0, clock=clock)
    board.claim(FIRST_WORKER_SLOT, 4242)
    assert passes(watch, clock, 2.0) == []
    found = passes(watch, clock, 10.0)  # it takes long to die: still the same process
    assert len(found) == 1 and 2.0 < found[0] <= 2.5, found
    board.claim(FIRST_WORKER_SLOT, 4343)  # its replacement: counted afresh, and named again when silent
    assert passes(watch, clock, 2.0) == []
    assert len(passes(watch, clock, 1.0)) == 1


def test_a_beat_restarts_the_count(board):
    clock = Clock()
    watch = SilenceWatch(board, timeout=2.0, clock=clock)
    board.claim(FIRST_WORKER_SLOT, 4242)
    for _ in range(10):
        assert passes(watch, clock, 1.5) == []
        board.heartbeat(FIRST_WORKER_SLOT)


def test_time_the_supervisor_did_not_run_is_not_the_workers_silence(board):
    """The whole process group stopped (or the host paused) for 1165 s: on waking, every heartbeat
    is that old, and the supervisor killed a worker that was serving.  Its own absence counts
    one ``stall`` at most; a worker that stays silent after that is overdue a timeout later."""
    clock = Clock()
    watch = SilenceWatch(board, timeout=2.0, clock=clock)
    board.claim(FIRST_WORKER_SLOT, 4242)
    assert passes(watch, clock, 1.0) == []
    clock.now += 1165.8
    assert passes(watch, clock, 0.25) == []
    found = passes(watch, clock, 3.0)
    assert len(found) == 1 and found[0] < 3, found


def test_a_full_metrics_area_leaves_the_next_slot_alone(board):
    """A heartbeat overwritten by a neighbour's metrics would read as a silence as long as the clock's age."""
    from mtok.wire import metrics

    board.claim(FIRST_WORKER_SLOT + 1, 4343)
    before = board.last_beat(FIRST_WORKER_SLOT + 1)
    area = board.extra(FIRST_WORKER_SLOT)
    fits = {"pad": "x" * (len(area) - metrics._HEAD.size - len('{"pad":""}'))}
    assert metrics.publish(area, fits) and not metrics.publish(area, {"pad": fits["pad"] + "x"})
    assert board.last_beat(FIRST_WORKER_SLOT + 1) == before
    assert board.slot(FIRST_WORKER_SLOT + 1).state == SlotState.BOOTING
    assert metrics.read(board.extra(FIRST_WORKER_SLOT)) == fits


def test_a_claimed_slot_is_never_read_with_a_zero_heartbeat(board):
    """A zero heartbeat reads as an age of the host's uptime; claim writes the time with the pid."""
    board.claim(FIRST_WORKER_SLOT, 4242)
    pid, beat = board.last_beat(FIRST_WORKER_SLOT)
    assert pid == 4242 and beat > 0 and board.slot(FIRST_WORKER_SLOT).heartbeat_age < 5


def _beat_and_publish(name: str, slot: int, rounds: int) -> None:
    from mtok.wire import metrics

    board = StatusBoard.attach(name)
    for i in range(rounds):
        board.heartbeat(slot)
        metrics.publish(board.extra(slot), {"i": i, "pad": "x" * (i % 7)})
    board.close()


@pytest.mark.timeout(60)
def test_a_reader_racing_the_writer_never_sees_half_a_number(board):
    """Another process beats and publishes as fast as it can while this one
    reads: every heartbeat age is a real one (struct's byte-at-a-time stores
    gave ages of hours, or in the future, on one read in ten) and every
    snapshot is whole."""
    import multiprocessing

    from mtok.wire import metrics

    board.claim(FIRST_WORKER_SLOT, 4242)
    metrics.publish(board.extra(FIRST_WORKER_SLOT), {"i": -1, "pad": ""})
    writer = multiprocessing.get_context("spawn").Process(
        target=_beat_and_publish, args=(board.shm.name.lstrip("/"), FIRST_WORKER_SLOT, 200_000))
    writer.start()
    try:
        reads, whole, wrong = 0, 0, []
        while writer.is_alive() or reads < 1000:
            age = board.slot(FIRST_WORKER_SLOT).heartbeat_age
            snap = metrics.read(board.extra(FIRST_WORKER_SLOT))  # None: every try found a write under way
            reads += 1
            whole += snap is not None
            if not -1.0 < age < 60.0 or not (snap is None or set(snap) == {"i", "pad"}):
                wrong.append((age, snap))
        assert writer.exitcode == 0 and wrong == [] and whole > 0, (reads, whole, wrong[:5])
    finally:
        writer.join(30)
