"""Seeded fuzzing: over 1,000 malformed or hostile requests at a 2-worker server.

No 5xx, no process dies, and the good requests interleaved with them all succeed.
"""

from __future__ import annotations

import json
import random
import socket
import threading
from typing import List, Optional, Tuple

import pytest

from support import Server, children_of

pytestmark = pytest.mark.slow

PATHS = ["/generate", "/v1/completions", "/tokenize", "/detokenize", "/v1/tokenize", "/health", "/abort_request",
         "/get_server_info", "/get_model_info", "/v1/models", "/health_generate", "/", "/generate/", "/../etc/passwd",
         "/%00", "/generate?x=1", "//generate", "/v1/completions#frag", "*", "http://evil/generate"]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "CONNECT", "BREW", "post", "G\x00ET"]
KEYS = ["text", "input_ids", "sampling_params", "stream", "rid", "prompt", "max_tokens", "stop", "tokens", "model",
        "max_new_tokens", "temperature", "stop_token_ids", "ignore_eos", "stream_options", "n", "logprobs",
        "skip_special_tokens", "add_special_tokens", "include_usage", "__proto__", "", "\u0000", "🙂"]


class Fuzzer:
    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def value(self, depth: int = 0):
        r = self.r
        kinds = ["int", "bigint", "neg", "float", "str", "bool", "null", "list", "dict", "ids", "weird"]
        kind = r.choice(kinds if depth < 3 else kinds[:7])
        if kind == "int":
            return r.randint(0, 50)
        if kind == "bigint":
            return r.choice([2 ** 63, 10 ** 30, 2 ** 31 - 1, 1e308])
        if kind == "neg":
            return -r.randint(1, 10 ** 6)
        if kind == "float":
            return r.choice([0.5, -0.0, 1e-300, 3.14, 1.0])
        if kind == "str":
            return "".join(chr(r.choice([r.randint(32, 126), r.randint(0x80, 0x2FFF), r.randint(0x1F300, 0x1F6FF),
                                         r.randint(0, 31)])) for _ in range(r.randint(0, 40)))
        if kind == "bool":
            return r.random() < 0.5
        if kind == "null":
            return None
        if kind == "list":
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        if kind == "ids":
            return [r.randint(-5, 70000) for _ in range(r.randint(0, 8))]
        if kind == "weird":
            return r.choice(["\ud800"[:0] + "\\ud800", "", " " * 1000, "x" * 5000, "<|endoftext|>" * 3])
        return {r.choice(KEYS): self.value(depth + 1) for _ in range(r.randint(0, 4))}

    def body(self) -> bytes:
        r = self.r
        obj = {k: self.value() for k in r.sample(KEYS, r.randint(0, 5))}
        if r.random() < 0.4:  # near-valid: a good request with one field broken
            obj = {"text": "fuzz", "sampling_params": {"max_new_tokens": r.randint(1, 3)}}
            obj[r.choice(KEYS)] = self.value()
        raw = json.dumps(obj, ensure_ascii=r.random() < 0.5).encode()
        mutation = r.random()
        if mutation < 0.15:
            raw = raw[: r.randint(0, len(raw))]
        elif mutation < 0.3 and raw:
            i = r.randrange(len(raw))
            raw = raw[:i] + bytes([r.randint(0, 255)]) + raw[i + 1:]
        elif mutation < 0.35:
            raw = bytes(r.randint(0, 255) for _ in range(r.randint(0, 200)))
        elif mutation < 0.4:
            raw = b"[" * r.randint(1, 50000)
        return raw

    def request(self) -> bytes:
        r = self.r
        method = r.choice(METHODS[:2] * 6 + METHODS)
        path = r.choice(PATHS)
        body = self.body()
        headers = [b"Host: fuzz", b"Connection: close"]
        framing = r.random()
        if framing < 0.6:
            headers.append(b"Content-Length: %d" % len(body))
        elif framing < 0.7:
            headers.append(b"Content-Length: %d" % max(0, len(body) - r.randint(1, 5)))  # a lie, too short
        elif framing < 0.75:
            headers.append(r.choice([b"Content-Length: -1", b"Content-Length: 1e3", b"Content-Length: 99999999999",
                                     b"Content-Length: 5, 6"]))
        elif framing < 0.85:
            headers.append(b"Transfer-Encoding: chunked")
            body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if r.random() < 0.7 else body
        if r.random() < 0.1:
            headers += [b"X-Junk-%d: %s" % (i, b"v" * r.randint(0, 300)) for i in range(r.randint(1, 120))]
        if r.random() < 0.05:
            headers.append(b"Authorization: Bearer " + bytes(r.randint(33, 126) for _ in range(20)))
        version = r.choice([b"HTTP/1.1"] * 8 + [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 extra", b""])
        line = method.encode("latin-1", "replace") + b" " + path.encode() + (b" " + version if version else b"")
        if r.random() < 0.03:
            line = bytes(r.randint(0, 255) for _ in range(r.randint(1, 300)))
        return line + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + body


def exchange(host: str, port: int, payload: bytes) -> Tuple[Optional[int], bytes]:
    with socket.create_connection((host, port), timeout=15) as s:
        try:
            # No half-close after sending: like nginx, mtok takes end-of-file
            # from a client as a hang-up and aborts its request.
            s.sendall(payload)
        except OSError:
            pass
        chunks = []
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except OSError:
            pass
    raw = b"".join(chunks)
    if not raw.startswith(b"HTTP/"):
        return None, raw
    return int(raw.split(b" ", 2)[1]), raw


def good(host: str, port: int, i: int) -> bool:
    text = f"good request {i}"
    body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": 64, "stop": "request"}}).encode()
    status, raw = exchange(host, port, b"POST /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return status == 200 and json.loads(raw.split(b"\r\n\r\n", 1)[1])["text"] == "good "


def test_fuzz_never_breaks_the_server():
    srv = Server("--tokenizer-worker-num", "2", "--max-request-bytes", "100000", "--http-timeout", "2")
    try:
        before = sorted(children_of(srv.pid))
        workers = [w["pid"] for w in srv.info()["workers"]]
        failures: List[str] = []
        no_response: List[bytes] = []
        counts = {"hostile": 0, "good": 0}
        lock = threading.Lock()

        def run(seed: int, n: int) -> None:
            fz = Fuzzer(seed)
            for i in range(n):
                payload = fz.request()
                status, raw = exchange(srv.host, srv.port, payload)
                with lock:
                    counts["hostile"] += 1
                    if status is None:
                        no_response.append(payload[:120])
                    elif status >= 500:
                        failures.append(f"{status} for {payload[:200]!r}: {raw[-300:]!r}")
                    elif status >= 400 and b'"error"' not in raw and not payload.startswith(b"HEAD "):
                        failures.append(f"{status} without a JSON error for {payload[:200]!r}")
                if i % 20 == 0:
                    ok = good(srv.host, srv.port, seed * 10000 + i)
                    with lock:
                        counts["good"] += 1
                        if not ok:
                            failures.append(f"a good request failed after {payload[:200]!r}")

        threads = [threading.Thread(target=run, args=(seed, 300)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
        assert counts["hostile"] >= 1000 and counts["good"] >= 50
        assert failures == [], failures[:10]
        # A request line of random bytes may leave nothing to answer (the peer is
        # not speaking HTTP at all); everything else must get a status line.
        assert len(no_response) <= counts["hostile"] // 50, no_response[:10]
        assert sorted(children_of(srv.pid)) == before
        assert [w["pid"] for w in srv.info()["workers"]] == workers
        assert srv.info()["worker_restarts"] == 0
        assert "Traceback" not in srv.stderr(), srv.stderr()[-3000:]
    finally:
        assert srv.stop() == 0
