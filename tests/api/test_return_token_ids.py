"""vLLM's ``return_token_ids`` on ``/v1/completions`` and ``/v1/chat/completions``
(vLLM's ``entrypoints/openai/*/serving.py``), served by mtok for every engine,
over a real server with the echo engine, which says its prompt back (so the
output's ids are the prompt's first ``max_tokens``), at N = 1 and 2.

The shapes: a completion choice has ``prompt_token_ids`` and ``token_ids``; a
chat response has ``prompt_token_ids`` at the top and ``token_ids`` per choice.
Streamed, a completion choice's first chunk carries the prompt's ids and every
chunk its new ids; chat's role chunks carry the prompt's and each choice's
chunks their new ids.  tests/engines/test_real_vllm_adapter.py compares them with a real vLLM.
"""

from __future__ import annotations

import os

import pytest

from support import ROOT

pytestmark = pytest.mark.fast

ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory("--tokenizer-worker-num", str(request.param), "--chat-template", ECHO_LAST)


def tokens(srv, **body):
    status, got = srv.post("/tokenize", body)
    assert status == 200, got
    return got["tokens"]


def text_of(srv, ids):
    status, got = srv.post("/detokenize", {"tokens": ids, "skip_special_tokens": True})
    assert status == 200, got
    return got["text"]


def test_a_completion_choice_has_its_prompt_and_output_ids(srv):
    prompts = ["Hello there, world", "a second prompt, longer than the first"]
    status, body = srv.post("/v1/completions", {"prompt": prompts, "max_tokens": 4, "n": 2, "return_token_ids": True})
    assert status == 200, body
    assert len(body["choices"]) == 4
    for choice in body["choices"]:
        ids = tokens(srv, prompt=prompts[choice["index"] // 2])
        assert choice["prompt_token_ids"] == ids
        assert choice["token_ids"] == ids[:4]
        assert choice["text"] == text_of(srv, ids[:4])
    status, plain = srv.post("/v1/completions", {"prompt": prompts[0], "max_tokens": 2})
    assert status == 200 and "token_ids" not in plain["choices"][0] and "prompt_token_ids" not in plain["choices"][0]


def test_a_completion_stream_sends_the_prompt_ids_once_and_each_chunks_new_ids(srv):
    prompt = "Streaming, one token at a time: 世界 and 🙂"
    ids = tokens(srv, prompt=prompt)
    events = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": len(ids), "n": 2, "stream": True,
                                            "return_token_ids": True})
    assert events[-1] == "[DONE]"
    for index in (0, 1):
        chunks = [e["choices"][0] for e in events[:-1] if e["choices"] and e["choices"][0]["index"] == index]
        assert chunks[0]["prompt_token_ids"] == ids
        assert all(c["prompt_token_ids"] is None for c in chunks[1:])
        assert [t for c in chunks for t in c["token_ids"]] == ids
        assert "".join(c["text"] for c in chunks) == text_of(srv, ids)


def test_a_chat_response_has_the_prompt_ids_and_each_choices_ids(srv):
    messages = [{"role": "user", "content": "say this back"}]
    prompt = tokens(srv, messages=messages)
    status, body = srv.post("/v1/chat/completions", {"messages": messages, "max_tokens": 3, "n": 2,
                                                     "return_token_ids": True})
    assert status == 200, body
    assert body["prompt_token_ids"] == prompt
    assert [c["token_ids"] for c in body["choices"]] == [prompt[:3], prompt[:3]]
    status, plain = srv.post("/v1/chat/completions", {"messages": messages, "max_tokens": 3})
    assert status == 200 and "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]


def test_a_chat_stream_sends_the_prompt_ids_on_the_role_chunks_and_the_new_ids_after(srv):
    messages = [{"role": "user", "content": "stream 世界 🙂 back"}]
    prompt = tokens(srv, messages=messages)
    events = srv.stream("/v1/chat/completions", {"messages": messages, "max_tokens": len(prompt), "n": 2,
                                                 "stream": True, "return_token_ids": True})
    assert events[-1] == "[DONE]"
    for index in (0, 1):
        mine = [e for e in events[:-1] if e["choices"] and e["choices"][0]["index"] == index]
        assert mine[0]["choices"][0]["delta"]["role"] == "assistant" and mine[0]["prompt_token_ids"] == prompt
        assert all("prompt_token_ids" not in e for e in mine[1:])
        assert [t for e in mine[1:] for t in e["choices"][0]["token_ids"]] == prompt
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in mine)
        assert text == text_of(srv, prompt)


def test_return_token_ids_is_refused_where_it_means_nothing(srv):
    status, body = srv.post("/generate", {"text": "hi", "return_token_ids": True})
    assert status == 400 and body["error"]["param"] == "return_token_ids", body
    status, body = srv.post("/v1/completions", {"prompt": "hi", "return_token_ids": "maybe"})
    assert status == 400 and body["error"]["param"] == "return_token_ids", body
