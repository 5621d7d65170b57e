"""A worker tokenizes one event-loop turn's prompts together (mtok/managers/ahead.py).

The unit tests run the turn's context on real routes' marks, a real manager
(not started) and real tokenizers: which prompts are taken ahead, that the ids
are the tokenizer's own, that a route takes its prompt's ids, and that nothing
outlives the turn.  The last test sends many requests at once to a real server,
so that turns hold several, and checks every answer's prompt length.
"""

from __future__ import annotations

import json
import socket

import pytest

from mtok.api.intake import Plan
from mtok.api.native import Api
from mtok.api.routes import Request
from mtok.managers import prepare
from mtok.managers.ahead import EncodeAhead
from mtok.managers.tokenizer_manager import TokenizerManager
from mtok.tokenizer.load import load_tokenizer
from mtok.wire.args import PortArgs, ServerArgs
from support import Server, import_real

TEXTS = ["The quick brown fox", "jumps over the lazy dog", "다람쥐 헌 쳇바퀴에 타고파", "def f(x):\n    return x"]


def manager(**settings) -> TokenizerManager:
    return TokenizerManager(ServerArgs(**settings), PortArgs(sock_dir=""), b"")


def plan(handler, body) -> Plan:
    raw = json.dumps(body).encode()
    return Plan(handler, Request("POST", "/", "", {}, raw, None, body), False)  # type: ignore[arg-type]


def turn_of(texts):
    plans = [plan(Api.generate, {"text": t, "sampling_params": {"max_new_tokens": 1}}) for t in texts[:-1]]
    plans.append(plan(Api.completions, {"prompt": texts[-1], "model": "any name: one model serves them all"}))
    plans.append(plan(Api.generate, {"text": ["a batch", "is its route's"]}))
    plans.append(plan(Api.tokenize, {"prompt": "not a prompt to generate from"}))
    plans.append(plan(Api.generate, {"input_ids": [1, 2, 3]}))
    return plans


@pytest.mark.unit
def test_a_turns_prompts_are_tokenized_together_and_each_route_takes_its_own():
    import_real("tokenizers")
    tm = manager(tokenizer_backend="hf")
    model = tm.default_model
    with EncodeAhead(tm).turn(turn_of(TEXTS)):
        assert model.ahead == {t: model.tokenizer.encode(t) for t in TEXTS}
        taken = prepare.encode_batch(model, [TEXTS[2]], None)
        assert taken == [model.tokenizer.encode(TEXTS[2])] and TEXTS[2] not in model.ahead
        assert prepare.encode_batch(model, ["not ahead"], None) == [model.tokenizer.encode("not ahead")]
    assert model.ahead == {}  # what no route took goes with the turn


@pytest.mark.unit
@pytest.mark.parametrize("settings, texts, taken", [
    ({"tokenizer_backend": "python"}, TEXTS, 0),  # holds the GIL: two threads would take turns
    ({"tokenizer_backend": "hf", "skip_tokenizer_init": True}, TEXTS, 0),  # text prompts are refused
    ({"tokenizer_backend": "hf"}, TEXTS[:1] + TEXTS[-1:], 2),  # a /generate and a completion
    ({"tokenizer_backend": "hf"}, TEXTS[-1:], 0),  # one prompt: nothing to share
])
def test_which_prompts_are_tokenized_ahead(settings, texts, taken):
    if settings["tokenizer_backend"] == "hf":
        import_real("tokenizers")
    tm = manager(**settings)
    with EncodeAhead(tm).turn(turn_of(texts)):
        assert len(tm.default_model.ahead) == taken


@pytest.mark.unit
def test_a_prompt_the_tokenizer_refuses_is_left_to_its_route():
    import_real("tokenizers")
    tm = manager(tokenizer_backend="hf")
    with EncodeAhead(tm).turn(turn_of(["fine", "a lone surrogate \ud800 here"])):
        assert tm.default_model.ahead == {}


def test_many_requests_at_once_each_get_their_own_prompt():
    import_real("tokenizers")
    tok = load_tokenizer(None, "hf")
    srv = Server("--tokenizer-backend", "hf")
    try:
        texts = [" ".join(["word"] * (i + 1)) + f" {i}" for i in range(48)]
        socks = [socket.create_connection((srv.host, srv.port), timeout=30) for _ in texts]
        for sock, text in zip(socks, texts):  # all written before any is read: turns hold several
            body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": 1}}).encode()
            sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        for sock, text in zip(socks, texts):
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            sock.close()
            answer = json.loads(data.partition(b"\r\n\r\n")[2])
            assert answer["meta_info"]["prompt_tokens"] == len(tok.encode(text)), text
    finally:
        srv.stop()
