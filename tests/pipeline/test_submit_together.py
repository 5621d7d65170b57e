"""A turn's jobs are submitted together: their prompts tokenized at once
(mtok/managers/batch_encode.py, through TokenizerManager.submit_all), each
call keeping its own outcome.

The unit tests run the encoder on real tokenizers of a real manager (not
started): the ids are the tokenizer's own, one model's texts go in one batch
(two halves where the backend lets go of the GIL), a text the tokenizer
refuses fails only its call, a call of many prompts is encoded alone.  The
server tests send many requests at once, so that turns hold several jobs,
chat (prepared on the pool) among them, and check every answer's prompt.
"""

from __future__ import annotations

import json
import os
import socket

import pytest

from mtok.managers.batch_encode import BatchEncoder, usable_cores
from mtok.managers.prepare import ENCODE_SLICE
from mtok.managers.tokenizer_manager import TokenizerManager
from mtok.tokenizer.load import load_tokenizer
from mtok.wire.args import PortArgs, ServerArgs
from support import ROOT, Server, import_real

TEXTS = ["The quick brown fox", "jumps over the lazy dog", "다람쥐 헌 쳇바퀴에 타고파", "def f(x):\n    return x"]
ECHO_TEMPLATE = f"{ROOT}/examples/chat_template_echo_last.jinja"


def manager(**settings) -> TokenizerManager:
    return TokenizerManager(ServerArgs(**settings), PortArgs(sock_dir=""), b"")


def counting(tokenizer):
    """Count the tokenizer's encode_batch calls (the real method does the work)."""
    calls = []
    real = tokenizer.encode_batch

    def encode_batch(texts, *args, **kw):
        calls.append(len(texts))
        return real(texts, *args, **kw)
    tokenizer.encode_batch = encode_batch
    return calls


@pytest.mark.unit
@pytest.mark.parametrize("backend, split, batches",
                         [("python", True, [7]), ("hf", True, [3, 4]), ("hf", False, [7])])
def test_one_models_texts_are_encoded_in_one_batch_and_each_call_gets_its_own(backend, split, batches):
    if backend == "hf":
        import_real("tokenizers")
    tm = manager(tokenizer_backend=backend)
    tm.encoder = BatchEncoder(split=split)
    model = tm.default_model
    calls = {"a": (model, TEXTS[:2], None), "b": (model, TEXTS[2:3], None), "c": (model, TEXTS[3:] + TEXTS[:3], None)}
    seen = counting(model.tokenizer)
    got = tm.encoder.encode(calls)
    assert seen == batches  # hf split: two halves, one in a helper thread; else one call
    own = load_tokenizer(None, backend)
    assert got == {k: [own.encode(t) for t in texts] for k, (_, texts, _) in calls.items()}


@pytest.mark.unit
def test_a_worker_splits_its_batches_only_while_the_workers_leave_a_core_free(monkeypatch):
    for cores, workers, split in ((2, 1, True), (2, 2, False), (1, 1, False), (16, 8, True), (16, 16, False)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)), raising=False)
        assert usable_cores() == cores
        assert manager(tokenizer_worker_num=workers).encoder.split is split, (cores, workers)


@pytest.mark.unit
def test_a_text_the_tokenizer_refuses_fails_only_its_call():
    import_real("tokenizers")
    tm = manager(tokenizer_backend="hf")
    model = tm.default_model
    got = tm.encoder.encode({"fine": (model, ["fine"], None), "bad": (model, ["a lone surrogate \ud800"], None)})
    assert got["fine"] == [model.tokenizer.encode("fine")]
    assert isinstance(got["bad"], Exception)


@pytest.mark.unit
def test_a_call_of_many_prompts_is_encoded_alone_in_slices():
    tm = manager(tokenizer_backend="python")
    model = tm.default_model
    many = [f"prompt {i}" for i in range(ENCODE_SLICE + 1)]
    seen = counting(model.tokenizer)
    got = tm.encoder.encode({"many": (model, many, None), "one": (model, ["one"], None)})
    assert sorted(seen) == [1, 1, ENCODE_SLICE] and len(got["many"]) == len(many)


def burst(srv, requests):
    """Every request written before any answer is read (turns hold several); the answers, in order."""
    socks = [socket.create_connection((srv.host, srv.port), timeout=30) for _ in requests]
    for sock, (path, body) in zip(socks, requests):
        data = json.dumps(body).encode()
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
    out = []
    for sock in socks:
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        out.append((int(head.split(b" ")[1]), json.loads(body)))
    return out


def test_many_requests_at_once_each_get_their_own_prompt_and_a_refusal_costs_its_own():
    import_real("tokenizers")
    tok = load_tokenizer(None, "hf")
    srv = Server("--tokenizer-backend", "hf", "--chat-template", ECHO_TEMPLATE)
    try:
        texts = [" ".join(["word"] * (i + 1)) + f" {i}" for i in range(36)]
        reqs = []
        for i, text in enumerate(texts):
            if i % 3 == 0:
                reqs.append(("/v1/chat/completions", {"messages": [{"role": "user", "content": text}], "max_tokens": 1}))
            elif i % 3 == 1:
                reqs.append(("/v1/completions", {"prompt": text, "max_tokens": 1}))
            else:
                reqs.append(("/generate", {"text": text, "sampling_params": {"max_new_tokens": 1}}))
        reqs.insert(7, ("/generate", {"text": "too long", "sampling_params": {"max_new_tokens": 10 ** 9}}))
        got = burst(srv, reqs)
        assert got[7][0] == 400 and "context length" in got[7][1]["error"]["message"]
        del got[7]
        for (status, answer), text in zip(got, texts):
            assert status == 200, answer
            prompt = answer["meta_info"]["prompt_tokens"] if "meta_info" in answer else answer["usage"]["prompt_tokens"]
            assert prompt == len(tok.encode(text)), text
    finally:
        srv.stop()
