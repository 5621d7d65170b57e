"""The transport: authentication before unpickling, SocketMapping, SenderWrapper."""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import threading

import pytest

from conftest import wait_for
from mtok import ipc
from mtok.io_struct import AbortReq, BatchStrOutput, TokenizedGenerateReqInput

pytestmark = pytest.mark.fast

KEY = os.urandom(32)


@pytest.fixture
def sock_dir():
    with tempfile.TemporaryDirectory(prefix="mtok-ipc-test-") as d:
        yield d


def drain(receiver, n, timeout=5.0):
    got = []
    wait_for(lambda: got.extend(receiver.recv_all(timeout=0.05)) or len(got) >= n, timeout, what=f"{n} messages")
    return got


def test_send_and_receive_from_several_peers(sock_dir):
    name = ipc.ipc_name(sock_dir, "r")
    rx = ipc.Receiver(name, KEY)
    try:
        senders = [ipc.Sender(name, KEY) for _ in range(3)]
        for i, s in enumerate(senders):
            s.send(AbortReq(rid=f"r{i}"))
        got = drain(rx, 3)
        assert sorted(m.rid for m in got) == ["r0", "r1", "r2"]
        assert rx.peer_count == 3
    finally:
        rx.close()
    assert not os.path.exists(name)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_authenticated_peer_still_cannot_unpickle_arbitrary_objects(sock_dir):
    name = ipc.ipc_name(sock_dir, "r")
    rx = ipc.Receiver(name, KEY)
    try:
        s = ipc.Sender(name, KEY)
        s.send_bytes(pickle.dumps(Evil()))
        s.send(AbortReq(rid="after"))
        got = drain(rx, 1)
        assert [m.rid for m in got] == ["after"]
        with pytest.raises(pickle.UnpicklingError):
            ipc.loads(pickle.dumps(Evil()))
    finally:
        rx.close()


def test_wrong_key_is_refused(sock_dir):
    name = ipc.ipc_name(sock_dir, "r")
    rx = ipc.Receiver(name, KEY)
    try:
        bad = ipc.Sender(name, os.urandom(32))
        with pytest.raises(ConnectionError):
            bad.send(AbortReq(rid="x"))
        assert rx.recv_all(timeout=0.2) == []
        assert rx.peer_count == 0
    finally:
        rx.close()


def test_raw_socket_payload_is_never_unpickled(sock_dir, tmp_path):
    """A peer that skips the handshake and sends a pickle gets nothing unpickled."""
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    name = ipc.ipc_name(sock_dir, "r")
    rx = ipc.Receiver(name, KEY)
    try:
        blob = pickle.dumps(Payload())
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(name)
        raw.sendall(len(blob).to_bytes(4, "big") + blob)
        raw.settimeout(10)
        try:
            while raw.recv(4096):
                pass  # the server's challenge, then its hang-up
        except OSError:
            pass
        raw.close()
        assert rx.recv_all(timeout=0.2) == []
        assert rx.peer_count == 0
        assert not marker.exists()
        good = ipc.Sender(name, KEY)
        good.send(AbortReq(rid="ok"))
        assert [m.rid for m in drain(rx, 1)] == ["ok"]
    finally:
        rx.close()


def test_silent_peer_does_not_block_others(sock_dir, monkeypatch):
    monkeypatch.setattr(ipc, "HANDSHAKE_TIMEOUT", 0.5)
    name = ipc.ipc_name(sock_dir, "r")
    rx = ipc.Receiver(name, KEY)
    try:
        silent = socket.socket(socket.AF_UNIX)
        silent.connect(name)
        good = ipc.Sender(name, KEY)
        good.send(AbortReq(rid="ok"))
        assert [m.rid for m in drain(rx, 1)] == ["ok"]
        silent.settimeout(5)
        wait_for(lambda: silent.recv(4096) == b"", what="the silent peer to be cut off")
        silent.close()
    finally:
        rx.close()


def test_sender_wrapper_stamps_the_worker_name(sock_dir):
    name = ipc.ipc_name(sock_dir, "r")
    rx = ipc.Receiver(name, KEY)
    try:
        w = ipc.SenderWrapper(ipc.Sender(name, KEY), "worker-7")
        w.send(TokenizedGenerateReqInput(rid="a", input_ids=[1]))
        w.send(BatchStrOutput(rids=["a", "b"]))
        single, batch = drain(rx, 2)
        assert single.http_worker_ipc == "worker-7"
        assert batch.http_worker_ipcs == ["worker-7", "worker-7"]
    finally:
        rx.close()


def test_socket_mapping_opens_lazily_and_reuses(sock_dir):
    names = [ipc.ipc_name(sock_dir, f"w{i}") for i in range(2)]
    rxs = [ipc.Receiver(n, KEY) for n in names]
    try:
        mapping = ipc.SocketMapping(KEY)
        assert len(mapping) == 0
        for i in range(5):
            assert mapping.send_output(names[i % 2], AbortReq(rid=str(i)))
        assert len(mapping) == 2 and names[0] in mapping
        assert [m.rid for m in drain(rxs[0], 3)] == ["0", "2", "4"]
        assert [m.rid for m in drain(rxs[1], 2)] == ["1", "3"]
        assert rxs[0].peer_count == 1  # one connection per name, reused
    finally:
        for rx in rxs:
            rx.close()


def test_socket_mapping_drops_a_dead_peer_without_raising(sock_dir, caplog):
    name = ipc.ipc_name(sock_dir, "gone")
    rx = ipc.Receiver(name, KEY)
    mapping = ipc.SocketMapping(KEY)
    mapping.send_output(name, AbortReq(rid="1"))
    drain(rx, 1)
    rx.close()  # the worker dies
    wait_for(lambda: not mapping.send_output(name, AbortReq(rid="2")) and name not in mapping,
             what="the mapping to drop the dead peer")
    assert mapping.send_output(name, AbortReq(rid="3")) is False  # no raise, no reconnect storm
    assert mapping.send_output(None, AbortReq(rid="4")) is False
    assert "gone" in caplog.text


def test_socket_mapping_gives_up_on_a_wedged_peer(sock_dir):
    name = ipc.ipc_name(sock_dir, "stuck")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(name)
    listener.listen(1)  # accepts nothing, answers nothing: a stopped process
    mapping = ipc.SocketMapping(KEY, max_pending=5)
    try:
        results = [mapping.send_output(name, AbortReq(rid=str(i))) for i in range(10)]
        assert results[-1] is False and name not in mapping
    finally:
        listener.close()


def test_receiver_close_unblocks_a_waiting_reader(sock_dir):
    rx = ipc.Receiver(ipc.ipc_name(sock_dir, "r"), KEY)
    result = []
    t = threading.Thread(target=lambda: result.append(rx.recv_all(timeout=10)))
    t.start()
    rx.close()
    t.join(11)
    assert not t.is_alive()
