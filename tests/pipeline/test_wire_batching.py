"""Messages in bulk: the frame reader against multiprocessing's own framing,
the shared sender under many threads and when its peer is gone, and the
request ids drawn ahead."""

from __future__ import annotations

import os
import random
import select
import socket
import tempfile
import threading
from multiprocessing.connection import Connection

import pytest

from support import wait_for
from mtok.managers import limits
from mtok.wire import frames, ipc
from mtok.wire.io_struct import AbortReq

pytestmark = [pytest.mark.fast, pytest.mark.unit, pytest.mark.timeout(60)]

KEY = os.urandom(32)


@pytest.fixture
def sock_dir():
    with tempfile.TemporaryDirectory(prefix="mtok-batch-test-") as d:
        yield d


def read_until(reader: frames.Frames, fd: int, n: int):
    got = []
    while len(got) < n:
        reader.read(fd, got)
    return got


@pytest.mark.parametrize("seed", range(4))
def test_frames_read_what_connection_send_bytes_wrote(seed):
    """Payloads of every size, some larger than one read, written by the
    stdlib's Connection and cut back out by Frames, whatever the pieces."""
    rng = random.Random(seed)
    payloads = [os.urandom(rng.choice([0, 1, 3, 4, 5, 100, 16384, 16385, frames.READ_SIZE + 7, 300_000]))
                for _ in range(40)]
    a, b = socket.socketpair()
    writer = Connection(os.dup(a.fileno()))
    a.close()
    thread = threading.Thread(target=lambda: [writer.send_bytes(p) for p in payloads])
    thread.start()
    try:
        got = read_until(frames.Frames(), b.fileno(), len(payloads))
    finally:
        thread.join()
        writer.close()
        b.close()
    assert got == payloads


def test_pack_is_read_back_by_connection_recv_bytes():
    payloads = [b"", b"x", os.urandom(70_000), b"tail"]
    a, b = socket.socketpair()
    reader = Connection(os.dup(b.fileno()))
    b.close()
    thread = threading.Thread(target=frames.write_all, args=(a.fileno(), frames.pack(payloads)))
    thread.start()
    try:
        assert [reader.recv_bytes() for _ in payloads] == payloads
    finally:
        thread.join()
        reader.close()
        a.close()


def test_frames_split_at_every_byte():
    """A stream cut at each possible point: the header split, the payload split."""
    payloads = [b"abc", b"", os.urandom(10), b"z" * 5]
    stream = frames.pack(payloads)
    for cut in range(len(stream) + 1):
        r, w = os.pipe()
        try:
            reader, got = frames.Frames(), []
            for piece in (stream[:cut], stream[cut:]):
                if piece:
                    os.write(w, piece)
                    reader.read(r, got)
            assert got == payloads, cut
            assert reader.pending == 0
        finally:
            os.close(r)
            os.close(w)


def test_frames_long_header_and_eof():
    """The -1 marker with an 8-byte length (payloads of 2 GiB and more), on a small payload."""
    stream = b"\xff\xff\xff\xff" + (5).to_bytes(8, "big") + b"hello" + frames.pack([b"next"])
    r, w = os.pipe()
    try:
        reader, got = frames.Frames(), []
        for i in range(0, len(stream), 3):
            os.write(w, stream[i : i + 3])
            reader.read(r, got)
        assert got == [b"hello", b"next"]
        os.close(w)
        w = -1
        with pytest.raises(EOFError):
            reader.read(r, got)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_shared_sender_delivers_every_message_once_in_each_threads_order(sock_dir):
    name = ipc.ipc_name(sock_dir, "inbox")
    rx = ipc.Receiver(name, KEY)
    failures = []
    tx = ipc.SharedSender(ipc.Sender(name, KEY), lambda msgs, e: failures.append(msgs))
    threads, per_thread = 8, 300
    try:
        workers = [threading.Thread(target=lambda t=t: [tx.send(AbortReq(rid=f"{t}:{i}")) for i in range(per_thread)])
                   for t in range(threads)]
        for w in workers:
            w.start()
        got = []
        wait_for(lambda: got.extend(m.rid for m in rx.recv_all(timeout=0.05)) or len(got) >= threads * per_thread,
                 30, what="every message")
        for w in workers:
            w.join()
    finally:
        tx.close()
        rx.close()
    assert not failures
    assert len(got) == len(set(got)) == threads * per_thread
    for t in range(threads):
        mine = [int(r.split(":")[1]) for r in got if r.startswith(f"{t}:")]
        assert mine == list(range(per_thread))


def test_shared_sender_reports_what_a_failed_write_carried(sock_dir):
    failures = []
    tx = ipc.SharedSender(ipc.Sender(ipc.ipc_name(sock_dir, "nobody"), KEY),
                          lambda msgs, e: failures.append(([m.rid for m in msgs], e)))
    tx.send(AbortReq(rid="a"))
    tx.send(AbortReq(rid="b"))
    tx.close()
    assert [rid for rids, _ in failures for rid in rids] == ["a", "b"]
    assert all(isinstance(e, ConnectionError) for _, e in failures)


def test_request_ids_are_unique_across_threads_and_refilled():
    out = []

    def draw():
        out.extend(limits.new_rid() for _ in range(3 * limits._RID_BATCH))

    threads = [threading.Thread(target=draw) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == len(out) == 18 * limits._RID_BATCH
    assert all(r.startswith(limits.RID_PREFIX) and len(r) == len(limits.RID_PREFIX) + 32 for r in out)
    int(out[0][len(limits.RID_PREFIX):], 16)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_draws_its_own_request_ids():
    limits._rids.clear()
    limits.new_rid()  # fills the pool
    parent_next = limits._rids[-1]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, limits.new_rid().encode())
        os._exit(0)
    os.close(w)
    try:
        child = os.read(r, 100).decode()
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert child != parent_next
    assert limits.new_rid() == parent_next


def test_an_attached_receiver_is_read_by_the_loop_it_registers_with(sock_dir):
    """Receiver.attach: its descriptors go to the loop as they appear (the wake-up
    pipe, then each peer on joining), each readable one yields its messages to
    ``deliver``, and a peer that leaves is taken out of the loop."""
    name = ipc.ipc_name(sock_dir, "inbox")
    rx = ipc.Receiver(name, KEY)
    readers, got = {}, []
    rx.attach(readers.__setitem__, lambda fd: readers.pop(fd), got.append)
    assert len(readers) == 1  # the wake-up pipe

    def turn():  # one turn of a loop: every registered descriptor that is readable
        ready = select.select(list(readers), [], [], 0.05)[0]
        for fd in ready:
            readers[fd]()

    tx = ipc.SharedSender(ipc.Sender(name, KEY), lambda msgs, e: None)
    try:
        with tx.corked():  # three messages, one write
            for i in range(3):
                tx.send(AbortReq(rid=f"r{i}"))
        wait_for(lambda: turn() or len(got) == 3, 30, what="three messages")
        assert [m.rid for m in got] == ["r0", "r1", "r2"] and len(readers) == 2
        tx.close()
        wait_for(lambda: turn() or len(readers) == 1, 30, what="the peer to be taken out")
    finally:
        tx.close()
        rx.close()


def test_corked_sends_go_out_in_one_write_at_the_end(sock_dir):
    name = ipc.ipc_name(sock_dir, "inbox")
    rx = ipc.Receiver(name, KEY)
    tx = ipc.SharedSender(ipc.Sender(name, KEY), lambda msgs, e: None)
    writes = []
    real = tx.sender.send_all
    tx.sender.send_all = lambda payloads: (writes.append(len(payloads)), real(payloads))
    try:
        with tx.corked():
            for i in range(5):
                tx.send(AbortReq(rid=str(i)))
            assert writes == []  # held
        tx.send(AbortReq(rid="after"))
        got = []
        wait_for(lambda: got.extend(m.rid for m in rx.recv_all(timeout=0.05)) or len(got) >= 6, 30,
                 what="six messages")
        assert got == ["0", "1", "2", "3", "4", "after"] and writes == [5, 1]
    finally:
        tx.close()
        rx.close()
