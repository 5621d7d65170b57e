"""The transport: authentication before unpickling, SocketMapping, SenderWrapper."""

from __future__ import annotations

import dataclasses
import os
import pickle
import socket
import tempfile
import threading

import pytest

from support import wait_for
from mtok.wire import finish, io_struct, ipc, socket_mapping
from mtok.wire.io_struct import AbortReq, BatchStrOutput, TokenizedGenerateReqInput

pytestmark = [pytest.mark.fast, pytest.mark.unit]

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


class WrongArity:
    """An allowed message class called with more arguments than it has fields."""

    def __reduce__(self):
        return (TokenizedGenerateReqInput, tuple(range(100)))


def test_an_allowed_class_called_wrongly_or_a_cut_message_costs_only_itself(sock_dir):
    """A message is rebuilt by calling its class with what the wire says: a peer
    that says too much, or sends half a message, loses that message; the next
    one from the same peer is read."""
    name = ipc.ipc_name(sock_dir, "r")
    rx = ipc.Receiver(name, KEY)
    try:
        s = ipc.Sender(name, KEY)
        s.send_bytes(pickle.dumps(WrongArity(), protocol=pickle.HIGHEST_PROTOCOL))
        s.send_bytes(ipc.dumps(TokenizedGenerateReqInput(rid="cut", input_ids=[1, 2, 3]))[:-7])
        s.send(AbortReq(rid="after"))
        got = drain(rx, 1)
        assert [m.rid for m in got] == ["after"]
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
        assert single.worker_address == "worker-7"
        assert batch.worker_addresses == ["worker-7", "worker-7"]
    finally:
        rx.close()


def test_socket_mapping_opens_lazily_and_reuses(sock_dir):
    names = [ipc.ipc_name(sock_dir, f"w{i}") for i in range(2)]
    rxs = [ipc.Receiver(n, KEY) for n in names]
    try:
        mapping = socket_mapping.SocketMapping(KEY)
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


def test_socket_mapping_survives_a_dead_peer_until_the_supervisor_drops_it(sock_dir, caplog):
    name = ipc.ipc_name(sock_dir, "gone")
    rx = ipc.Receiver(name, KEY)
    mapping = socket_mapping.SocketMapping(KEY)
    mapping.send_output(name, AbortReq(rid="1"))
    drain(rx, 1)
    rx.close()  # the worker dies
    for i in range(50):  # never raises, and says so once
        mapping.send_output(name, AbortReq(rid=str(i)))
    wait_for(lambda: "cannot send" in caplog.text, what="the failure to be logged")
    for i in range(50):
        mapping.send_output(name, AbortReq(rid=str(i)))
    assert caplog.text.count("cannot send") == 1
    mapping.drop(name)  # the supervisor replaced it
    assert mapping.send_output(name, AbortReq(rid="3")) is False and name not in mapping
    assert mapping.send_output(None, AbortReq(rid="4")) is False


def step(rid_texts, finished=()):
    out = BatchStrOutput(rids=[r for r, _ in rid_texts], worker_addresses=["w"] * len(rid_texts))
    for rid, text in rid_texts:
        out.output_strs.append(text)
        out.output_ids.append([len(text)])
        out.prompt_tokens.append(3)
        out.completion_tokens.append(len(text))
        out.finished_reasons.append({"type": "stop"} if rid in finished else None)
    return out


def test_a_wedged_peer_is_kept_and_its_pending_steps_are_merged(sock_dir):
    name = ipc.ipc_name(sock_dir, "stuck")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(name)
    listener.listen(1)  # accepts nothing, answers nothing: a stopped process
    mapping = socket_mapping.SocketMapping(KEY)
    try:
        assert all(mapping.send_output(name, step([("a", "x"), ("b", "y")])) for _ in range(20000))
        assert name in mapping and mapping._mapping[name].pending < socket_mapping._Peer.MERGE_AT
    finally:
        listener.close()


def test_merge_outputs_concatenates_per_request_and_keeps_a_reused_rid_apart():
    msgs = [step([("a", "he"), ("b", "x")]), step([("a", "llo")], finished={"a"}), AbortReq(rid="z"),
            step([("a", "new"), ("b", "y")]), step([("b", "z")], finished={"b"})]
    before = [m.output_strs[:] for m in msgs if isinstance(m, BatchStrOutput)]
    merged = socket_mapping.merge_outputs(msgs)
    assert [type(m).__name__ for m in merged] == ["BatchStrOutput", "AbortReq", "BatchStrOutput"]
    assert merged[0].rids == ["a", "b"] and merged[0].output_strs == ["hello", "x"]
    assert merged[0].finished_reasons == [{"type": "stop"}, None] and merged[0].output_ids == [[2, 3], [1]]
    assert merged[2].rids == ["a", "b"] and merged[2].output_strs == ["new", "yz"]
    assert merged[2].completion_tokens == [3, 1] and merged[2].finished_reasons == [None, {"type": "stop"}]
    assert [m.output_strs for m in msgs if isinstance(m, BatchStrOutput)] == before  # inputs untouched


def test_receiver_close_unblocks_a_waiting_reader(sock_dir):
    rx = ipc.Receiver(ipc.ipc_name(sock_dir, "r"), KEY)
    result = []
    t = threading.Thread(target=lambda: result.append(rx.recv_all(timeout=10)))
    t.start()
    rx.close()
    t.join(11)
    assert not t.is_alive()


def test_merge_outputs_keeps_every_logprob_row():
    """A lagging worker's queued steps are merged; logprob rows must add up, not be lost."""
    def lp_step(rids, rows, finished=()):
        msg = step([(r, "t") for r in rids], finished=set(finished))
        msg.logprobs = [None if rows.get(r) is None else {"output_token_logprobs": rows[r]} for r in rids]
        return msg

    msgs = [lp_step(["a", "b"], {"a": [[-0.5, 1, "t"]], "b": None}),
            lp_step(["a", "c"], {"a": [[-0.7, 2, "t"]], "c": [[-0.1, 3, "t"]]}),
            lp_step(["a"], {"a": [[-0.9, 4, "t"]]}, finished={"a"})]
    merged = socket_mapping.merge_outputs(msgs)
    assert len(merged) == 1 and merged[0].rids == ["a", "b", "c"]
    assert merged[0].logprobs == [{"output_token_logprobs": [[-0.5, 1, "t"], [-0.7, 2, "t"], [-0.9, 4, "t"]]},
                                  None, {"output_token_logprobs": [[-0.1, 3, "t"]]}]
    assert msgs[0].logprobs[0] == {"output_token_logprobs": [[-0.5, 1, "t"]]}  # inputs untouched


def test_every_message_crosses_by_position_and_comes_back_equal():
    """A message is pickled as its class and its fields' values (no field name on
    the wire), rebuilt through the allow-list, and equal to what was sent; one that
    holds more than its fields keeps that too."""
    for cls in io_struct.MESSAGE_TYPES:
        fields = dataclasses.fields(cls)
        msg = cls(*[f"value {i}" for i in range(len(fields))])  # every field set, each to a value of its own
        data = ipc.dumps(msg)
        assert ipc.loads(data) == msg, cls.__name__
        assert not any(f.name.encode() in data for f in fields if len(f.name) > 3), cls.__name__
    req = TokenizedGenerateReqInput(rid="r", input_ids=[1, 2, 3])
    req.note = "not a field"
    back = ipc.loads(ipc.dumps(req))
    assert back == req and back.note == "not a field"
    for reason in (finish.FinishStop(), finish.FinishStop(7), finish.FinishStop("</s>"), finish.FinishLength(3),
                   finish.FinishAbort("too long", 400, "max_tokens")):
        data = ipc.dumps(reason)
        assert ipc.loads(data) == reason and b"status_code" not in data and b"matched" not in data
