"""The process cores without I/O, and the runners that own their sockets.

The Scheduler and the DetokenizerManager are driven here as plain objects,
messages in and messages out, with every socket constructor made to fail and
the thread count watched: constructing and stepping them must touch neither.
Then a real scheduler process, started the way the supervisor starts it,
answers on its inbox and removes it when SIGTERM stops it.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading

import pytest

from support import wait_for
from mtok.wire.args import PortArgs, ServerArgs, args_json
from mtok.managers.detokenizer import DetokenizerManager
from mtok.wire.finish import CLIENT_CLOSED, FinishAbort, FinishLength, FinishStop
from mtok.wire.io_struct import (
    AbortReq,
    BatchEmbeddingOutput,
    BatchStrOutput,
    BatchTokenIDOutput,
    RpcOutput,
    RpcReq,
    SamplingParams,
    TokenizedEmbeddingReqInput,
    TokenizedGenerateReqInput,
)
from mtok.wire.ipc import Receiver, Sender
from mtok.managers.router import MultiTokenizerRouter
from mtok.managers.runners import DetokenizerRunner, ToTokenizerManager, ToWorkers, run_scheduler_process
from mtok.managers.scheduler import Scheduler
from mtok.wire.status import StatusBoard

pytestmark = pytest.mark.fast
unit = pytest.mark.unit  # all but the last test run in the test process alone

TEXT = "The quick brown fox jumps over the lazy dog, twice: the quick brown fox."


class _NoSocket:
    def __init__(self, *args, **kwargs):
        raise AssertionError("a process core opened a socket")


@pytest.fixture
def cores(monkeypatch):
    """A scheduler and a detokenizer, built and then stepped with sockets forbidden."""
    monkeypatch.setattr(socket, "socket", _NoSocket)
    before = set(threading.enumerate())  # other tests' threads may end meanwhile: count only new ones
    args = ServerArgs()
    sched, detok = Scheduler(args), DetokenizerManager(args)
    yield sched, detok
    started = [t.name for t in threading.enumerate() if t not in before]
    assert not started, f"a process core started threads: {started}"


def generate(rid, ids, worker="w1", **sampling):
    sampling.setdefault("max_new_tokens", len(ids))
    return TokenizedGenerateReqInput(rid=rid, worker_address=worker, input_ids=ids,
                                     sampling_params=SamplingParams(**sampling))


def pump(sched, detok, steps=1000):
    """Advance the scheduler until it has nothing to do; every message the
    detokenizer passes on, in order."""
    out = []
    for _ in range(steps):
        sched.advance()
        for msg in sched.take_outputs():
            passed = detok.handle(msg)
            if passed is not None:
                out.append(passed)
        if not (sched.running or sched.waiting or sched.pending_output or sched.embed_queue):
            return out
    raise AssertionError("the scheduler did not settle")


def texts(outputs):
    """rid -> (worker, the concatenated text, the finish reason)."""
    seen = {}
    for msg in outputs:
        if isinstance(msg, BatchStrOutput):
            for i, rid in enumerate(msg.rids):
                key = (msg.worker_addresses[i], rid)
                text = seen.get(key, ("", None))[0] + msg.output_strs[i]
                seen[key] = (text, msg.finished_reasons[i])
    return seen


@unit
def test_a_request_goes_through_both_cores_with_no_socket(cores):
    sched, detok = cores
    ids = sched.models[sched.default_model].tokenizer.encode(TEXT, add_special_tokens=False)
    sched.handle(generate("a", ids))
    sched.advance()
    first = sched.take_outputs()
    assert [type(m) for m in first] == [BatchTokenIDOutput] and first[0].decode_ids == [ids[:1]]
    out = [detok.handle(first[0])] + pump(sched, detok)
    assert texts(out) == {("w1", "a"): (TEXT, FinishLength(len(ids)))}
    assert not sched.reqs and not detok.states, "finished requests leave no state behind"


@unit
def test_a_stop_string_ends_the_request_and_is_trimmed(cores):
    sched, detok = cores
    ids = sched.models[sched.default_model].tokenizer.encode(TEXT, add_special_tokens=False)
    sched.handle(generate("s", ids, stop=["lazy"]))
    assert texts(pump(sched, detok)) == {("w1", "s"): (TEXT[:TEXT.index("lazy")], FinishStop("lazy"))}


@unit
def test_a_rid_refused_on_one_worker_leaves_the_other_workers_request_alone(cores):
    sched, detok = cores
    ids = sched.models[sched.default_model].tokenizer.encode(TEXT, add_special_tokens=False)
    sched.handle(generate("same", ids, worker="w1"))
    sched.advance()
    sched.handle(generate("same", ids, worker="w2"))
    got = texts([detok.handle(m) for m in sched.take_outputs()] + pump(sched, detok))
    assert got[("w1", "same")] == (TEXT, FinishLength(len(ids)))
    text, reason = got[("w2", "same")]
    assert text == "" and isinstance(reason, FinishAbort) and reason.status_code == 400


@unit
def test_only_the_owner_aborts_by_rid(cores):
    sched, detok = cores
    sched.handle(generate("r", [5, 6, 7], max_new_tokens=100))
    sched.advance()
    sched.handle(AbortReq(rid="r", worker_address="intruder"))
    sched.advance()
    assert "r" in sched.reqs
    sched.handle(AbortReq(rid="r", worker_address="w1"))
    reason = texts(pump(sched, detok))[("w1", "r")][1]
    assert isinstance(reason, FinishAbort) and reason.status_code == CLIENT_CLOSED


@unit
def test_a_departed_worker_is_aborted_then_announced_and_its_decode_state_goes(cores):
    sched, detok = cores
    for rid, worker in (("x", "gone"), ("y", "gone"), ("z", "stays")):
        sched.handle(generate(rid, [5, 6, 7], worker=worker, max_new_tokens=100))
    sched.advance()
    for msg in sched.take_outputs():
        detok.handle(msg)
    assert {w for w, _ in detok.states} == {"gone", "stays"}
    sched.handle(AbortReq(abort_all_of="gone"))
    flushed, notice = sched.take_outputs()
    assert sorted(flushed.rids) == ["x", "y"]
    assert all(isinstance(r, FinishAbort) for r in flushed.finished_reasons)
    detok.handle(flushed)
    assert detok.handle(notice) is notice, "the notice goes on, so the sink can forget the worker"
    assert {w for w, _ in detok.states} == {"stays"}
    assert set(sched.reqs) == {"z"}


@unit
def test_control_calls_and_embeddings_pass_through_the_detokenizer(cores):
    sched, detok = cores
    sched.handle(RpcReq(rid="c", worker_address="w1", method="get_state"))
    sched.handle(RpcReq(rid="d", worker_address="w1", method="no_such_method"))
    sched.handle(TokenizedEmbeddingReqInput(rid="e", worker_address="w2", input_ids=[1, 2, 3]))
    out = pump(sched, detok)
    state, unknown, embedded = out
    assert isinstance(state, RpcOutput) and state.result["num_running"] == 0 and state.error is None
    assert isinstance(unknown, RpcOutput) and "no_such_method" in unknown.error
    assert isinstance(embedded, BatchEmbeddingOutput) and embedded.worker_addresses == ["w2"]
    assert len(embedded.embeddings[0]) > 0 and embedded.finished_reasons == [FinishStop()]


@unit
def test_the_scheduler_forgets_everything_when_its_outputs_cannot_be_delivered(cores):
    sched, _ = cores
    sched.handle(generate("a", [1, 2, 3], max_new_tokens=50))
    sched.advance()
    sched.handle(generate("b", [1, 2, 3]))
    sched.drop_all()
    assert not (sched.reqs or sched.running or sched.waiting or sched.take_outputs())
    assert sched.gauges() == (0, 0, None)


@unit
def test_the_router_rules():
    router = MultiTokenizerRouter()
    assert router.reply_address(RpcOutput(rid="r", worker_address="w3")) == "w3"
    assert router.reply_address(object()) is None
    assert router.departure_notice("w3") == AbortReq(abort_all_of="w3")


@pytest.fixture
def sock_dir():
    path = tempfile.mkdtemp(prefix="mtok-cores-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def received(inbox, count):
    got = []
    wait_for(lambda: got.extend(inbox.recv_all(0.1)) or len(got) >= count, 20, what=f"{count} message(s)")
    return got


@unit
def test_with_several_workers_each_gets_its_piece_and_replies_go_to_the_router(sock_dir):
    key = os.urandom(16)
    inboxes = {name: Receiver(os.path.join(sock_dir, name), key) for name in ("w1", "w2", "router")}
    w1, w2, router = (inboxes[n].name for n in ("w1", "w2", "router"))
    sink = ToWorkers(router, key)
    try:
        sink.deliver(BatchStrOutput(rids=["a", "b", "c"], worker_addresses=[w1, w2, w1],
                                    finished_reasons=[None] * 3, output_strs=["A", "B", "C"],
                                    output_ids=[[1], [2], [3]], prompt_tokens=[1] * 3, completion_tokens=[1] * 3))
        sink.deliver(RpcOutput(rid="r", worker_address=w2, result=1))
        assert [(m.rids, m.output_strs) for m in received(inboxes["w1"], 1)] == [(["a", "c"], ["A", "C"])]
        assert [(m.rids, m.output_strs) for m in received(inboxes["w2"], 1)] == [(["b"], ["B"])]
        assert received(inboxes["router"], 1) == [RpcOutput(rid="r", worker_address=w2, result=1)]
        sink.deliver(AbortReq(abort_all_of=w1))  # the supervisor says w1 is gone
        assert w1 not in sink.by_address and not sink.by_address.send_output(w1, RpcOutput(rid="late"))
    finally:
        sink.close()
        for inbox in inboxes.values():
            inbox.close()


@unit
def test_with_one_worker_everything_but_a_departure_goes_to_its_tokenizer_manager(sock_dir):
    key = os.urandom(16)
    inbox = Receiver(os.path.join(sock_dir, "tm"), key)
    sink = ToTokenizerManager(inbox.name, key)
    try:
        sink.deliver(AbortReq(abort_all_of="nobody"))
        sink.deliver(RpcOutput(rid="r", result=2))
        assert received(inbox, 1) == [RpcOutput(rid="r", result=2)]
    finally:
        sink.close()
        inbox.close()


@unit
def test_the_detokenizer_runner_closes_what_it_bound(sock_dir):
    port_args = PortArgs.in_dir(sock_dir)
    runner = DetokenizerRunner(DetokenizerManager(ServerArgs()), port_args, os.urandom(16), workers=2)
    assert os.listdir(sock_dir) == [], "constructing a runner binds nothing"
    runner.bind()
    try:
        assert os.path.exists(port_args.detokenizer_inbox) and isinstance(runner.sink, ToWorkers)
    finally:
        runner.close()
    assert not os.path.exists(port_args.detokenizer_inbox)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("placement", ["process", "inline"])
def test_the_scheduler_process_serves_its_inbox_and_removes_it_on_sigterm(placement):
    """Its steps go to the detokenizer's inbox, or (``--detokenizer inline``)
    decoded, to the tokenizer manager's."""
    sock_dir = tempfile.mkdtemp(prefix="mtok-cores-")
    port_args = PortArgs.in_dir(sock_dir)
    board = StatusBoard.create(port_args.status_name, 1)
    key = os.urandom(16)
    detokenizer_inbox = Receiver(port_args.detokenizer_inbox if placement == "process" else port_args.reply_inbox,
                                 key)
    ctx = multiprocessing.get_context("spawn")
    ready_r, ready_w = ctx.Pipe(duplex=False)
    args = ServerArgs(detokenizer=placement)
    proc = ctx.Process(target=run_scheduler_process,
                       args=(args_json(args, port_args), key, os.getpid(), ready_w), daemon=True)
    proc.start()
    ready_w.close()
    to_scheduler = Sender(port_args.scheduler_inbox, key)
    try:
        assert ready_r.poll(50) and ready_r.recv()[0] == "ready"
        to_scheduler.send(generate("p", [4, 5, 6], max_new_tokens=3))
        got = []
        wait_for(lambda: got.extend(detokenizer_inbox.recv_all(0.2)) or
                 any(r is not None for m in got for r in m.finished_reasons), 30, what="the last step")
        if placement == "process":
            assert [type(m) for m in got] == [BatchTokenIDOutput] * len(got)
            assert [i for m in got for i in m.decode_ids[0]] == [4, 5, 6]
        else:
            assert [type(m) for m in got] == [BatchStrOutput] * len(got)
            assert [i for m in got for i in m.output_ids[0]] == [4, 5, 6]
            text = "".join(t for m in got for t in m.output_strs)
            assert text == DetokenizerManager(args).tokenizer.decode([4, 5, 6])
        assert os.path.exists(port_args.scheduler_inbox)
        os.kill(proc.pid, signal.SIGTERM)
        proc.join(30)
        assert proc.exitcode == 0
        assert not os.path.exists(port_args.scheduler_inbox), "the runner closes its inbox on the way out"
    finally:
        if proc.is_alive():
            proc.kill()
        to_scheduler.close()
        detokenizer_inbox.close()
        board.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
