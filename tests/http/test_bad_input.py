"""Bad input gets a 4xx with a JSON error body, and the server keeps serving."""

from __future__ import annotations

import json
import re
import socket

import pytest

pytestmark = pytest.mark.fast

GOOD = {"text": "still serving", "sampling_params": {"max_new_tokens": 2}}

# (path, body, expected status, expected 'param' or None)
JSON_CASES = [
    ("/generate", b"{not json", 400, None),
    ("/generate", b"\xff\xfe{}", 400, None),
    ("/generate", b"", 400, None),
    ("/generate", b"[1, 2]", 400, None),
    ("/generate", b'{"text": NaN}', 400, None),
    ("/generate", b"[" * 100000, 400, None),
    ("/generate", {}, 400, "text"),
    ("/generate", {"text": "a", "input_ids": [1]}, 400, "text"),
    ("/generate", {"text": 5}, 400, "text"),
    ("/generate", {"text": []}, 400, "text"),
    ("/generate", {"text": ["a", 1]}, 400, "text"),
    ("/generate", {"text": ""}, 400, "text"),
    ("/generate", {"input_ids": []}, 400, "input_ids"),
    ("/generate", {"input_ids": [1, "2"]}, 400, "input_ids"),
    ("/generate", {"input_ids": [1, True]}, 400, "input_ids"),
    ("/generate", {"input_ids": [-1]}, 400, "input_ids"),
    ("/generate", {"input_ids": [10 ** 9]}, 400, "input_ids"),
    ("/generate", {"input_ids": [[1], []]}, 400, "input_ids"),
    ("/generate", {"text": "a", "sampling_params": []}, 400, "sampling_params"),
    ("/generate", {"text": "a", "sampling_params": "x"}, 400, "sampling_params"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 3, "min_new_tokens": 4}}, 400,
     "sampling_params.min_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"temperature": 10 ** 400}}, 400, "sampling_params.temperature"),
    ("/generate", {"text": "a", "sampling_params": {"min_p": -10 ** 400}}, 400, "sampling_params.min_p"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": -5}}, 400, "sampling_params.max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 10 ** 12}}, 400, "max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": "10"}}, 400, "sampling_params.max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": True}}, 400, "sampling_params.max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"temperature": -1}}, 400, "sampling_params.temperature"),
    ("/generate", {"text": "a", "sampling_params": {"top_p": 2}}, 400, "sampling_params.top_p"),
    ("/generate", {"text": "a", "sampling_params": {"stop": [1]}}, 400, "sampling_params.stop"),
    ("/generate", {"text": "a", "sampling_params": {"stop": [""]}}, 400, "sampling_params.stop"),
    ("/generate", {"text": "a", "sampling_params": {"stop_token_ids": [-3]}}, 400, "stop_token_ids"),
    ("/generate", {"text": "a", "sampling_params": {"ignore_eos": "yes"}}, 400, "sampling_params.ignore_eos"),
    ("/generate", {"text": "a", "sampling_params": {"stop_regex": ["[0-9"]}}, 400, "stop_regex"),
    ("/generate", {"text": "a", "sampling_params": {"stop_regex": [7]}}, 400, "sampling_params.stop_regex"),
    ("/generate", {"text": "a", "sampling_params": {"regex": "[0-9]+"}}, 400, "regex"),
    ("/generate", {"text": ["a", "b"], "sampling_params": [{}]}, 400, "sampling_params"),
    ("/generate", {"text": "a", "stream": "true"}, 400, "stream"),
    ("/generate", {"text": "a", "rid": 5}, 400, "rid"),
    ("/generate", {"text": ["a", "b"], "rid": ["x", "x"]}, 400, "rid"),
    ("/generate", {"text": "a", "image_data": "http://example.com/cat.png"}, 400, "image_data"),
    ("/generate", {"text": "a", "lora_path": "my-adapter"}, 400, "lora_path"),
    ("/generate", {"text": "a", "return_logprob": True, "logprob_start_len": 5}, 400, "logprob_start_len"),
    ("/generate", b'{"text": "\\ud800"}', 400, "text"),
    ("/generate", b'{"text": "a", "rid": "\\udfff"}', 400, "rid"),
    ("/v1/completions", {}, 400, "prompt"),
    ("/v1/completions", {"prompt": []}, 400, "prompt"),
    ("/v1/completions", {"prompt": {"a": 1}}, 400, "prompt"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "n": 2, "best_of": 3}, 400, "best_of"),
    ("/v1/completions", {"prompt": "a", "suffix": "b"}, 400, "suffix"),
    ("/v1/completions", {"prompt": "a", "presence_penalty": 10 ** 400}, 400, "presence_penalty"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 2, "min_tokens": 3}, 400, "min_new_tokens"),
    ("/v1/completions", {"prompt": "a", "logprobs": True}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "a", "stream_options": 3}, 400, "stream_options"),
    ("/v1/completions", {"prompt": "a", "response_format": {"type": "json_object"}}, 400, "response_format"),
    ("/tokenize", {"prompt": 3}, 400, "prompt"),
    ("/tokenize", {}, 400, "prompt"),
    ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
    ("/detokenize", {"tokens": [99999999]}, 400, "tokens"),
    ("/detokenize", {}, 400, "tokens"),
    ("/abort_request", {}, 400, "rid"),
]


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory("--tokenizer-worker-num", str(request.param), "--max-request-bytes", "200000",
                          "--context-length", "4096")


def assert_json_error(status, body, expected_status, param=None):
    assert status == expected_status, body
    assert isinstance(body, dict) and set(body["error"]) >= {"message", "type", "code"}, body
    assert body["error"]["code"] == expected_status and body["error"]["message"]
    if param is not None:
        assert body["error"].get("param") == param, body


def assert_still_serving(srv):
    status, body = srv.post("/generate", GOOD)
    assert status == 200 and body["text"], body


@pytest.mark.parametrize("path,body,expected,param", JSON_CASES, ids=[f"{i}" for i in range(len(JSON_CASES))])
def test_bad_json_bodies(srv, path, body, expected, param):
    status, resp = srv.post(path, body)
    assert_json_error(status, resp, expected, param)
    assert_still_serving(srv)


def test_unknown_path_and_wrong_method(srv):
    status, body = srv.get("/nope")
    assert_json_error(status, body, 404)
    status, headers, body = srv.request("GET", "/generate")
    assert_json_error(status, body, 405)
    assert headers["allow"] == "POST, PUT"
    status, headers, body = srv.request("DELETE", "/health")
    assert_json_error(status, body, 405)
    assert_still_serving(srv)


def test_oversized_body(srv):
    status, body = srv.post("/generate", {"text": "x" * 300000})
    assert_json_error(status, body, 413)
    assert_still_serving(srv)


def test_huge_prompt_over_context(srv):
    status, body = srv.post("/generate", {"text": "word " * 20000, "sampling_params": {"max_new_tokens": 1}})
    assert_json_error(status, body, 400, "text")  # the input alone is over it (SGLang's words: "The input (...")
    assert_still_serving(srv)


def raw_exchange(srv, payload: bytes, timeout: float = 10.0, until_close: bool = False) -> bytes:
    """Send ``payload``; what comes back until the server closes, or (unless
    ``until_close``) until one whole response with a Content-Length is in: a
    kept-alive connection stays open, and waiting for the timeout cost 10 s."""
    with socket.create_connection((srv.host, srv.port), timeout=timeout) as s:
        s.sendall(payload)
        raw = b""
        while until_close or not _one_whole_response(raw):
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            raw += data
        return raw


def _one_whole_response(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    return m is not None and len(body) >= int(m.group(1))


def status_and_json(raw: bytes):
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else None


def test_missing_content_length(srv):
    raw = raw_exchange(srv, b"POST /generate HTTP/1.1\r\nHost: x\r\n\r\n")
    status, body = status_and_json(raw)
    assert_json_error(status, body, 411)
    assert_still_serving(srv)


def test_content_length_lie_longer_than_body(srv):
    # Claims 50 bytes, sends 10 and closes its side: the body ends early.
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"text\": 1")
        s.shutdown(socket.SHUT_WR)
        raw = s.recv(65536)
    status, body = status_and_json(raw)
    assert_json_error(status, body, 400)
    assert_still_serving(srv)


def test_bad_content_length(srv):
    raw = raw_exchange(srv, b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    status, body = status_and_json(raw)
    assert_json_error(status, body, 400)


def test_chunked_body_is_accepted(srv):
    body = json.dumps(GOOD).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
    raw = raw_exchange(srv, b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                       + chunks + b"0\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200"), raw[:200]


def test_malformed_chunked_body(srv):
    raw = raw_exchange(srv, b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    status, body = status_and_json(raw)
    assert_json_error(status, body, 400)


def test_http10_request(srv):
    body = json.dumps(GOOD).encode()
    raw = raw_exchange(srv, b"POST /generate HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    status, parsed = status_and_json(raw)
    assert status == 200 and parsed["text"]


def test_pipelined_requests_are_answered_in_order(srv):
    reqs = []
    for text in ("first", "second", "third"):
        n = srv.post("/tokenize", {"prompt": text})[1]["count"]
        b = json.dumps({"text": text, "sampling_params": {"max_new_tokens": n}}).encode()
        reqs.append(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b))
    reqs[-1] = reqs[-1].replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
    raw = raw_exchange(srv, b"".join(reqs), until_close=True)
    assert raw.count(b"HTTP/1.1 200") == 3
    texts = [json.loads(part.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1")[0])["text"]
             for part in raw.split(b"HTTP/1.1 200")[1:]]
    assert texts == ["first", "second", "third"]


def test_header_flood(srv):
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
    raw = raw_exchange(srv, b"GET /health HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    status, body = status_and_json(raw)
    assert_json_error(status, body, 431)
    assert_still_serving(srv)


def test_garbage_request_line(srv):
    raw = raw_exchange(srv, b"\x00\x01garbage\r\n\r\n")
    status, body = status_and_json(raw)
    assert 400 <= status < 500 and "error" in body
    assert_still_serving(srv)


def test_head_parsing_finds_the_first_blank_line(srv):
    """A body that itself holds a blank line; bare-LF line ends are refused
    (RFC 9112 framing, strictly: see test_http_framing.py)."""
    body = b'{"prompt": "a\\r\\n\\r\\nb"}'
    head = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    raw = raw_exchange(srv, head % len(body) + body)
    status, parsed = status_and_json(raw)
    assert status == 200 and parsed["count"] > 2, raw[:300]
    raw = raw_exchange(srv, head.replace(b"\r\n", b"\n") % len(body) + body)
    assert status_and_json(raw)[0] == 400, raw[:300]
    raw = raw_exchange(srv, b"GET /health HTTP/1.0\r\n\r\n")
    assert status_and_json(raw) == (200, {"status": "ok"})
