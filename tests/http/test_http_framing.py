"""HTTP/1.1 framing, strictly (RFC 9112), over raw sockets: no smuggling, no
desync, bounded bodies whatever the framing (issue 16: findings 1, 6, 8, 14)."""

from __future__ import annotations

import io
import json
import socket
from typing import List, Tuple

import pytest

from support import vm_kib, wait_for

pytestmark = pytest.mark.fast

LIMIT = 2_000_000  # --max-request-bytes of the module's server


@pytest.fixture(scope="module")
def srv(server_factory):
    return server_factory("--max-request-bytes", str(LIMIT), "--http-timeout", "10")


@pytest.fixture(scope="module")
def keyed(server_factory):
    return server_factory("--api-key", "sekrit", "--http-timeout", "10")


def exchange(srv, payload: bytes, idle: float = 2.0) -> Tuple[bytes, bool]:
    """Send ``payload``; read until the server closes (True) or stays idle for ``idle`` s (False)."""
    with socket.create_connection((srv.host, srv.port), timeout=idle) as s:
        try:
            s.sendall(payload)
        except OSError:
            pass
        chunks: List[bytes] = []
        while True:
            try:
                data = s.recv(65536)
            except socket.timeout:
                return b"".join(chunks), False
            except ConnectionResetError:
                return b"".join(chunks), True
            if not data:
                return b"".join(chunks), True
            chunks.append(data)


def statuses(raw: bytes) -> List[int]:
    return [int(part[:3]) for part in raw.split(b"HTTP/1.1 ")[1:] if part[:3].isdigit()]


def first_json(raw: bytes):
    head, _, rest = raw.partition(b"\r\n\r\n")
    length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")][0].split(b":")[1])
    return json.loads(rest[:length])


def assert_refused_and_closed(srv, payload: bytes, status: int = 400):
    raw, closed = exchange(srv, payload)
    assert statuses(raw) == [status], raw[:400]
    body = first_json(raw)
    assert set(body["error"]) >= {"message", "type", "code"} and body["error"]["code"] == status
    assert closed, "the connection must be closed after a framing error"
    assert srv.get("/health")[0] == 200


SMUGGLED = b"GET /get_model_info HTTP/1.1\r\nHost: x\r\n\r\n"


def post(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s" % (path, len(body), extra, body)


@pytest.mark.parametrize("path,method,status", [(b"/nope", b"POST", 404), (b"/health", b"PUT", 405)])
def test_early_error_does_not_leave_the_body_as_the_next_request(srv, path, method, status):
    raw, closed = exchange(srv, post(path, SMUGGLED).replace(b"POST", method, 1))
    assert statuses(raw) == [status], raw[:600]
    assert closed


def test_unauthorised_body_is_not_served_as_the_next_request(keyed):
    raw, closed = exchange(keyed, post(b"/generate", SMUGGLED.replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer sekrit\r\n\r\n")))
    assert statuses(raw) == [401], raw[:600]
    assert closed


def test_100_continue_only_after_authentication_and_routing(keyed, srv):
    head = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\nExpect: 100-continue\r\n\r\n"
    raw, closed = exchange(keyed, head)
    assert statuses(raw) == [401], raw[:400]
    raw, closed = exchange(srv, head.replace(b"/generate", b"/nope"))
    assert statuses(raw) == [404], raw[:400]
    # Where the request will be served, the client is told to go on.
    body = json.dumps({"prompt": "go on"}).encode()
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n"
                  b"Connection: close\r\n\r\n" % len(body))
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        rest = b""
        while not rest.endswith(b"}"):
            data = s.recv(65536)
            if not data:
                break
            rest += data
        assert rest.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("head", [
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    b"Transfer-Encoding: gzip, chunked\r\n",
    b"Transfer-Encoding: xchunked\r\n",
    b"Transfer-Encoding: chunked, chunked\r\n",
    b"Content-Length: \xb2\r\n",  # a Unicode superscript digit
    b"Content-Length: +5\r\n",
    b"Content-Length : 5\r\n",  # a space before the colon
    b"Content-Length: 5, 5\r\n",
], ids=["cl-te", "te-cl", "te-gzip", "te-xchunked", "te-twice", "cl-unicode", "cl-sign", "space-colon", "cl-list"])
def test_ambiguous_framing_is_refused_and_closed(srv, head):
    payload = b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n0\r\n\r\n" + SMUGGLED
    assert_refused_and_closed(srv, payload, 501 if b"gzip" in head else 400)


@pytest.mark.parametrize("size", [b"-1", b"-2", b"0xf", b"0_f", b"+f", b" f", b"", b"1" * 17, b"g"])
def test_chunk_size_is_hex_digits_only(srv, size):
    payload = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + size
               + b"\r\n" + b'{"prompt": "x"}' + b"\r\n0\r\n\r\n" + SMUGGLED)
    assert_refused_and_closed(srv, payload)


def test_negative_chunk_size_cannot_read_past_the_limit(srv):
    before = vm_kib(srv.pid, "VmRSS")
    with socket.create_connection((srv.host, srv.port), timeout=5) as s:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n")
        try:
            for _ in range(16):  # 16 MB, eight times the limit, if the server will take it
                s.sendall(b"x" * (1 << 20))
        except OSError:
            pass
        raw = b""
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                raw += data
        except (socket.timeout, ConnectionResetError):
            pass
    assert statuses(raw) == [400], raw[:300]
    assert vm_kib(srv.pid, "VmRSS") - before < 8 * 1024
    assert srv.get("/health")[0] == 200


def chunked(body: bytes, size: int) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size))


def test_tiny_chunks_stay_in_one_buffer(server_factory):
    fresh = server_factory("--max-request-bytes", "6000000")  # its own: VmHWM is a peak since start
    body = b'{"tokens": [1]' + b" " * 1_500_000 + b"}"
    wire = chunked(body, 2) + b"0\r\n\r\n"
    before = vm_kib(fresh.pid, "VmHWM")
    raw, _ = exchange(fresh, b"POST /detokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      b"Connection: close\r\n\r\n" + wire, idle=60)
    assert statuses(raw) == [200], raw[:300]
    # 750k two-byte chunks as separate bytes objects cost ~30 MB; one buffer, ~3.
    assert vm_kib(fresh.pid, "VmHWM") - before < 12 * 1024


def test_chunk_framing_counts_against_the_limit(srv):
    body = b'{"tokens": [1]' + b" " * 700_000 + b"}"
    wire = chunked(body, 2) + b"0\r\n\r\n"  # 2.45 MB on the wire for a 0.7 MB body
    raw, closed = exchange(srv, b"POST /detokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + wire,
                           idle=30)
    assert statuses(raw) == [413], raw[:300]
    assert closed


@pytest.mark.parametrize("payload", [
    b"GET /health HTTP/1.1\nHost: x\n\n",
    b"GET /health HTTP/1.1\r\nHost: x\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n",
], ids=["bare-lf", "bare-lf-header", "bare-cr"])
def test_line_ends_are_crlf(srv, payload):
    assert_refused_and_closed(srv, payload + SMUGGLED)


def test_http11_requires_host(srv):
    assert_refused_and_closed(srv, b"GET /health HTTP/1.1\r\n\r\n" + SMUGGLED)
    raw, _ = exchange(srv, b"GET /health HTTP/1.0\r\n\r\n")
    assert statuses(raw.replace(b"HTTP/1.0 ", b"HTTP/1.1 ")) == [200]


def test_connection_close_among_other_tokens_closes(srv):
    raw, closed = exchange(srv, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n" + SMUGGLED)
    assert statuses(raw) == [200] and closed, raw[:400]
    assert b"Connection: close\r\n" in raw


@pytest.mark.parametrize("ctype", [b"text/plain", b"application/x-www-form-urlencoded",
                                   b"multipart/form-data; boundary=x", b"text/json"])
def test_non_json_content_type_is_refused(srv, ctype):
    body = b'{"prompt": "csrf"}'
    raw, _ = exchange(srv, post(b"/tokenize", body, b"Content-Type: %s\r\nConnection: close\r\n" % ctype))
    assert statuses(raw) == [415], raw[:400]
    assert first_json(raw)["error"]["code"] == 415


@pytest.mark.parametrize("ctype", [None, b"application/json", b"Application/JSON; charset=utf-8",
                                   b"application/vnd.api+json"])
def test_json_content_types_are_accepted(srv, ctype):
    extra = b"Content-Type: %s\r\n" % ctype if ctype else b""
    raw, _ = exchange(srv, post(b"/tokenize", b'{"prompt": "ok"}', extra + b"Connection: close\r\n"))
    assert statuses(raw) == [200], raw[:400]


def test_a_framing_error_costs_only_its_connection(srv):
    good = socket.create_connection((srv.host, srv.port), timeout=10)
    try:
        good.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_for(lambda: good.recv(4096).startswith(b"HTTP/1.1 200"), what="a first answer")
        assert_refused_and_closed(srv, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n")
        good.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert good.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        good.close()


def test_header_lookups_fold_case_every_way():
    import io

    from mtok.api.framing import read_headers

    headers = read_headers(io.BytesIO(b"Content-Type: application/json\r\nX-A: 1\r\nx-a: 2\r\n\r\n"))
    for key in ("content-type", "Content-Type", "CONTENT-TYPE"):
        assert key in headers and headers[key] == "application/json" and headers.get(key) == "application/json"
    assert headers["X-A"] == "1, 2" and "x-b" not in headers and headers.get("X-B", "none") == "none"


class _Trickle(io.RawIOBase):
    """A raw stream that hands out at most ``step`` bytes per read, as a slow socket does."""

    def __init__(self, data: bytes, step: int):
        self.data, self.step = data, step

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.step, len(self.data))
        b[:n], self.data = self.data[:n], self.data[n:]
        return n


HEADS = [
    b"Host: a\r\nContent-Length: 3\r\n\r\nabc",
    b"\r\nabc",
    b"Host: a\r\nX-A: 1\r\nx-a: 2\r\nContent-Type: application/json\r\n\r\n{}",
    b"Host: a\r\nHost: a\r\n\r\n",
    b"Host: a\r\nHost: b\r\n\r\n",  # conflicting
    b"Host: a\nX: 1\r\n\r\n",  # bare LF
    b"Host: a\r\nX: 1\rY: 2\r\n\r\n",  # bare CR
    b"Host: a\r\n\n\r\n\r\n",  # a bare-LF empty line
    b"Host : a\r\n\r\n",  # space before the colon
    b"Host: a\r\n folded\r\n\r\n",  # obs-fold
    b"NoColon\r\n\r\n",
    b"Host: a\r\n",  # the connection closes inside the head
    b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n",  # too many
    b"".join(b"X-%d: v\r\n" % i for i in range(100)) + b"\r\nrest",  # just enough
]


@pytest.mark.parametrize("raw", HEADS, ids=range(len(HEADS)))
def test_a_head_read_at_once_or_in_pieces_reads_the_same(raw):
    """read_headers takes a fully buffered head in one piece and reads any other line by
    line: a differential test of the two paths, on good heads and broken ones."""
    from mtok.api.framing import FramingError, read_headers

    def outcome(step: int):
        rfile = io.BufferedReader(_Trickle(raw, step), 8192)
        try:
            return dict(read_headers(rfile)), rfile.read()
        except FramingError as e:
            return "refused", e.status

    whole, pieces = outcome(len(raw) or 1), outcome(3)
    assert whole == pieces
    assert outcome(1) == whole


# -- the head's bounds, control characters and absolute-form targets (issue 23, finding 7) --------
@pytest.fixture(scope="module", params=["loop", "threads"])
def either(request, server_factory):
    return server_factory("--http-timeout", "10", *(["--http-threads-only"] if request.param == "threads" else []))


def get_with(extra: bytes, target: bytes = b"/health") -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n" % (target, extra)


@pytest.mark.parametrize("extra", [
    b"X: a\x00b\r\n", b"X: \x00\r\n", b"X: a\x01b\r\n", b"X: a\x1fb\r\n", b"X: a\x7fb\r\n", b"X\x00: a\r\n",
    b"X: a\x0bb\r\n",
], ids=["nul", "nul-alone", "soh", "us", "del", "nul-in-name", "vt"])
def test_control_characters_in_a_field_are_refused(either, extra):
    assert_refused_and_closed(either, get_with(extra) + SMUGGLED)


@pytest.mark.parametrize("line", [b"GET /hea\x00lth HTTP/1.1\r\n", b"GET /health\t HTTP/1.1\r\n"], ids=["nul", "tab"])
def test_control_characters_in_the_request_line_are_refused(either, line):
    assert_refused_and_closed(either, line + b"Host: x\r\n\r\n" + SMUGGLED)


def test_a_tab_and_obs_text_in_a_value_are_taken(either):
    raw, closed = exchange(either, get_with(b"X: a\tb\r\nY: caf\xe9\r\n"))
    assert statuses(raw) == [200] and closed, raw[:300]


@pytest.mark.parametrize("extra", [
    b"X: " + b"a" * 100_000 + b"\r\n",  # one 100 KB line
    b"X: " + b"a" * (8192 - 2) + b"\r\n",  # one byte over 8 KiB
    b"X: a\r\n" * 10_000,  # one name, 10,000 times
    b"".join(b"X-%d: a\r\n" % i for i in range(100)),  # with Host and Connection, 102 lines
    b"".join(b"X-%d: %s\r\n" % (i, b"a" * 8000) for i in range(9)),  # each line fits, the head does not
], ids=["100kb-line", "8kib-plus-one", "10000-repeats", "102-lines", "72kb-head"])
def test_an_oversized_head_is_431_and_closed(either, extra):
    assert_refused_and_closed(either, get_with(extra) + SMUGGLED, 431)


def test_a_head_at_its_bounds_is_served(either):
    line = b"X: " + b"a" * (8192 - 3) + b"\r\n"  # 8 KiB exactly, CRLF aside
    many = b"".join(b"X-%d: a\r\n" % i for i in range(98))  # 100 lines with Host and Connection
    for extra in (line, many, line * 7):
        raw, closed = exchange(either, get_with(extra))
        assert statuses(raw) == [200] and closed, raw[:300]


def test_a_request_line_over_8_kib_is_414(either):
    assert_refused_and_closed(either, get_with(b"", b"/health?" + b"a" * 8200) + SMUGGLED, 414)


@pytest.mark.parametrize("target,status", [
    (b"http://example.com/health", 200), (b"HTTPS://example.com:8443/health?x=1", 200),
    (b"http://example.com", 200), (b"http://example.com/nope", 404),  # no path: "/", mtok's root
    (b"ftp://example.com/health", 400), (b"health", 400), (b"example.com/health", 400),
])
def test_an_absolute_form_target_is_read_as_its_path(either, target, status):
    raw, closed = exchange(either, get_with(b"", target))
    assert statuses(raw) == [status] and closed, raw[:300]
    if status == 200:
        assert first_json(raw).get("status" if b"health" in target else "name") in ("ok", "mtok")
