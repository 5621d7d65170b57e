"""The status board: what workers read without asking anyone."""

from __future__ import annotations

import os
import types

import pytest

from mtok.wire.args import unlink_shm
from mtok.wire.metrics import Metrics
from mtok.wire.status import DETOKENIZER_SLOT, FIRST_WORKER_SLOT, SCHEDULER_SLOT, ServerState, SlotState, StatusBoard
from mtok.managers.worker import HttpFrontend

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
    tm = types.SimpleNamespace(failure=None, fail_all=failed.append)
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
