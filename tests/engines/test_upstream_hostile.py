"""An upstream engine that misbehaves -- an endless line, endless events,
silence, a drip, garbage, a reset, a redirect -- fails the one request it was
serving with a 502 (an SSE error event, then ``[DONE]``, for a streaming
client), soon, and mtok keeps serving: the next request through the same
server succeeds, and the scheduler's memory stays bounded (issue 23, finding 3:
one endless SSE line once grew the scheduler to 20 GB until the kernel killed it).

Real processes: ``python -m mtok.serve --engine KIND:URL`` in front of a
stand-in (tests/upstream_standin.py) told to misbehave, for both adapters.
"""

from __future__ import annotations

import json
import time

import pytest

from mtok.engines.upstream_limits import Budget, Limits, Malformed, lines, sse_events
from support import children_of, parse_sse, vm_kib, wait_for
from test_upstream_sglang import serving
from upstream_standin import SGLangStandIn, VLLMStandIn

pytestmark = pytest.mark.timeout(180)

TIMEOUT, IDLE = 20.0, 1.0  # the URL's timeout= (to the first event) and idle_timeout= (between events)
PROMPT = [5, 6, 7]
SOON = 6.0  # "fast": a failure that needs no timer comes well within this (a loaded 2-core machine)
MIB = 1 << 20


@pytest.fixture(scope="module", params=["sglang", "vllm"])
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def standin(kind):
    s = (SGLangStandIn if kind == "sglang" else VLLMStandIn)()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def front(kind, standin):
    url = f"{kind}:{standin.url}?max_connections=4&timeout={TIMEOUT:g}&idle_timeout={IDLE:g}"
    with serving("--engine", url) as s:
        yield s


@pytest.fixture(autouse=True)
def reset(request):
    """A clean stand-in for each test that has one."""
    standin = request.getfixturevalue("standin") if "standin" in request.fixturenames else None
    if standin is not None:
        standin.behaviour.clear()
    yield
    if standin is not None:
        standin.behaviour.clear()


def scheduler_pid(front) -> int:
    for pid in children_of(front.pid):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "mtok:scheduler":
                    return pid
        except OSError:
            continue
    raise AssertionError("no mtok:scheduler among the server's processes")


def peak_since(pid: int) -> int:
    """Forget ``pid``'s peak RSS (``clear_refs`` 5) and say what it was then; VmHWM
    afterwards is the peak since this call."""
    before = vm_kib(pid, "VmHWM")
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return vm_kib(pid, "VmRSS")
    except OSError:  # not allowed here: the peak since the process started will have to do
        return before


def generate(front, **extra):
    return front.post("/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 8}, **extra})


def generate_streamed(front, **extra):
    """(status, error) of a streamed /generate that fails: the HTTP status and
    JSON error when it failed before its first token, else 200 and the error
    event that ends the stream (which must be followed by ``[DONE]``)."""
    c = front.conn()
    try:
        c.request("POST", "/generate", body=json.dumps({"input_ids": PROMPT, "stream": True,
                                                        "sampling_params": {"max_new_tokens": 8}, **extra}),
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        if resp.status != 200:
            return resp.status, json.loads(resp.read())["error"]
        events = list(parse_sse(resp))
        assert events[-1] == "[DONE]" and "error" in events[-2], events
        return 200, events[-2]["error"]
    finally:
        c.close()


def assert_upstream_failed(front, standin, hostile, words, within=SOON, status=502, **extra):
    """A request served by a ``hostile`` upstream fails with ``status`` naming
    ``words``, streamed or not, each within ``within`` s; a normal one then succeeds."""
    standin.behaviour["hostile"] = hostile
    started = time.monotonic()
    got, body = generate(front, **extra)
    took = time.monotonic() - started
    assert got == status, (got, body)
    assert words in body["error"]["message"], body
    assert took < within, f"the {status} took {took:.1f} s"
    started = time.monotonic()
    got, err = generate_streamed(front, **extra)
    took = time.monotonic() - started
    assert got in (200, status) and err["code"] == status and words in err["message"], (got, err)
    assert took < within, f"the streamed {status} took {took:.1f} s"
    standin.behaviour.clear()
    got, body = generate(front)
    assert got == 200 and len(body["output_ids"]) == 8, body


@pytest.mark.fast
@pytest.mark.parametrize("hostile,words", [
    ("malformed", "malformed event"),
    ("not_an_object", "malformed event"),
    ("wrong_types", "malformed event"),
    ("beyond_vocab", "outside the vocabulary"),
    ("after_finish", "after its finish"),
    ("reset", "broke"),
    ("redirect", "redirect"),
    ("json_body", "not an event stream"),
    ("no_body", "without a finish reason"),
    ("huge_error", "body over"),
    ("huge_header", "broke"),  # http.client's own bounds: 64 KiB a header line, 100 headers, 64 KiB a chunk-size line
    ("huge_chunk_size", "broke"),
])
def test_garbage_fails_one_request_fast(front, standin, hostile, words):
    assert_upstream_failed(front, standin, hostile, words)


@pytest.mark.fast
def test_bad_logprob_rows_fail_one_request(front, standin):
    assert_upstream_failed(front, standin, "bad_logprobs", "malformed event", return_logprob=True,
                           top_logprobs_num=1)


@pytest.mark.fast
def test_an_endless_line_is_cut_at_the_line_limit(front, standin):
    pid = scheduler_pid(front)
    base = peak_since(pid)
    assert_upstream_failed(front, standin, "endless_line", "line over")
    grew = vm_kib(pid, "VmHWM") - base
    assert grew < 128 * 1024, f"the scheduler's peak RSS grew by {grew // 1024} MiB"


@pytest.mark.fast
@pytest.mark.parametrize("hostile", ["endless_events", "endless_blank_lines"])
def test_endless_events_are_cut_at_the_event_limit(front, standin, hostile):
    pid = scheduler_pid(front)
    base = peak_since(pid)
    assert_upstream_failed(front, standin, hostile, "events")
    grew = vm_kib(pid, "VmHWM") - base
    assert grew < 64 * 1024, f"the scheduler's peak RSS grew by {grew // 1024} MiB"


@pytest.mark.fast
def test_silence_after_the_first_event_is_the_idle_timeout(front, standin):
    """A stream that has begun and then says nothing (vLLM draining for a
    graceful shutdown) ends after idle_timeout, not the much longer timeout."""
    assert_upstream_failed(front, standin, "silent", f"no event for {IDLE:g} s", within=IDLE + SOON, status=504)


@pytest.mark.fast
def test_a_drip_is_bounded_by_the_idle_timeout(front, standin):
    assert_upstream_failed(front, standin, "drip", "no whole event", within=IDLE + SOON)


@pytest.mark.fast
def test_a_slow_first_event_is_waited_for(front, standin):
    """The time to the first event (a long prompt's prefill) is ``timeout``, not ``idle_timeout``."""
    standin.behaviour.update(hostile="slow_first", first_delay=IDLE * 2.5)
    got, body = generate(front)
    assert got == 200 and len(body["output_ids"]) == 8, body


@pytest.mark.fast
def test_a_hostile_health_body_is_bounded(kind, standin):
    """/health is read with a cap too: a probe answer without end is cut, and counts as unhealthy."""
    other = (SGLangStandIn if kind == "sglang" else VLLMStandIn)()
    other.behaviour["endless_health"] = True
    try:
        with serving("--engine", f"{kind}:{other.url}") as s:
            status, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(s.get("/health")), 15,
                                    what="/health to say the upstream's health answer is too long")
            assert "over" in body["message"], body
            assert vm_kib(scheduler_pid(s), "VmHWM") < 512 * 1024
    finally:
        other.stop()


@pytest.mark.fast
def test_a_probe_stuck_in_a_dripping_head_makes_health_fail():
    """The probe's socket timeout is per read, so a head sent a byte at a time
    could hold it for days; /health says so within a few seconds instead."""
    other = SGLangStandIn()
    try:
        with serving("--engine", f"sglang:{other.url}") as s:
            wait_for(lambda: s.get("/health")[0] == 200, 15, what="healthy")
            other.behaviour["drip_health"] = True
            status, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(s.get("/health")), 20,
                                    what="/health to say the probe is stuck")
            assert "no whole answer" in body["message"], body
    finally:
        other.stop()


@pytest.mark.unit
def test_upstream_options_are_checked():
    """A misspelt option (``idle_timout``) must not silently leave the default in place."""
    assert Limits.from_query("idle_timeout=2.5&max_line_bytes=1024") == Limits(idle_timeout=2.5, max_line_bytes=1024)
    for query, words in [("idle_timout=5", "idle_timout"), ("timeout=soon", "not a number"),
                         ("max_connections=0", "positive")]:
        with pytest.raises(ValueError, match=words):
            Limits.from_query(query)


class Pieces:
    """A response whose ``read1`` hands out the given pieces, one per call."""

    def __init__(self, *pieces: bytes):
        self.pieces = list(pieces)

    def read1(self, n: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


@pytest.mark.unit
def test_the_reader_splits_lines_across_reads_and_counts_a_drip():
    budget = Budget(Limits(event_margin=2), max_new_tokens=2)
    resp = Pieces(b'data: {"a": 1}\n\nda', b"ta: ", b'{"b": 2}\n\n: a comment\n\ndata: [DONE]\n\n')
    events = sse_events(resp, budget)
    assert next(events) == {"a": 1} and not budget.dripped
    assert next(events) == {"b": 2}
    assert next(events) is None
    assert budget.events == 0  # three events and a comment line: max_new_tokens + event_margin, no more
    drip = Budget(Limits(), 8)
    next(sse_events(Pieces(b'data: {"a": 1}\n\n', b"d", b"a"), drip), None)
    assert not drip.dripped
    list(lines(Pieces(b"d", b"a"), drip))
    assert drip.dripped and drip.overdue(float("inf"), "u")[0] == 502


@pytest.mark.unit
def test_the_reader_refuses_a_line_over_the_cap_before_holding_it():
    budget = Budget(Limits(max_line_bytes=1000), 8)
    with pytest.raises(Malformed, match="a line over 1000 bytes"):
        list(lines(Pieces(*[b"x" * 300] * 10), budget))
    with pytest.raises(Malformed, match="more events"):
        list(sse_events(Pieces(b"\n" * 100), Budget(Limits(event_margin=1), 8)))
