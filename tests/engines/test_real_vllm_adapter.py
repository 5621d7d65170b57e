"""The vLLM adapter's own fixes against a real vLLM (issue 26, differences 1, 4, 5;
issue 25, item 8): each answer compared with vLLM's own answer to the same
request, or, for constrained output, parsed and held to its schema.

The engines and fronts are ``real_vllm_fixtures.py``'s (one set of boots per
session, shared with tests/engines/test_real_vllm.py): ``front`` is mtok at N = 1 before
the plain vLLM and at N = 2 before the ``--skip-tokenizer-init`` one; ``ref``
is the plain vLLM's own OpenAI server.

- ``return_token_ids``, streamed: the prompt's ids once and each chunk's new
  ids, the same ids as vLLM's (the unstreamed form is in test_real_vllm.py).
- the context limit: mtok's is the engine's ``--max-model-len`` (1024), below
  the tokenizer's ``model_max_length`` (2048).
- prompt logprobs (``echo`` with ``logprobs``, chat's ``prompt_logprobs``):
  vLLM's token stream has no field for them, so mtok asks its token route
  unstreamed; the values are vLLM's own, on both fronts.
- ``response_format: json_schema``, ``tool_choice: "required"`` and a named
  tool go to vLLM as its nested ``structured_outputs``: the plain vLLM honours
  them (the output parses and matches the schema; a completion is vLLM's own
  constrained answer, token for token); the ``--skip-tokenizer-init`` one
  cannot compile a grammar and says so, which mtok answers as a 400 naming why
  (never unconstrained output).  The model is random, and a JSON grammar
  allows whitespace anywhere: such a model fills its budget with it, so the
  requests push the vocabulary's pure-whitespace tokens down with ``logit_bias``
  (the grammar alone decides the rest).
"""

from __future__ import annotations

import json
import os
import re

import pytest

from real_vllm_fixtures import MODEL

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

PROMPT = "東京は日本の首都です。I feel 🙂 today"
MESSAGES = [{"role": "user", "content": "What time is it in Paris? 🕰"}]
ZONES = {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET", "JST"]}, "hour": {"enum": [1, 2, 3]}},
         "required": ["tz", "hour"], "additionalProperties": False}
CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": ZONES}},
         {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]


def post(server, path, body):
    status, got = server.post(path, {"model": MODEL, **body})
    assert status == 200, got
    return got


def chunks_of(events, index=None):
    return [e for e in events if e != "[DONE]" and e.get("choices")
            and (index is None or e["choices"][0]["index"] == index)]


def close(a, b):
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 1e-4)


# -- difference 1: return_token_ids, streamed ------------------------------------------------------------

def test_streamed_token_ids_are_vllms(front, ref):
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "stream": True, "return_token_ids": True}
    theirs = ref.stream("/v1/completions", {"model": MODEL, **body})
    ours = front.stream("/v1/completions", {"model": MODEL, **body})
    t, o = [c["choices"][0] for c in chunks_of(theirs)], [c["choices"][0] for c in chunks_of(ours)]
    assert o[0]["prompt_token_ids"] == t[0]["prompt_token_ids"]
    assert all(c.get("prompt_token_ids") is None for c in o[1:])
    assert [i for c in o for i in c["token_ids"]] == [i for c in t for i in c["token_ids"]]

    body = {"messages": MESSAGES, "max_tokens": 12, "temperature": 0, "stream": True, "return_token_ids": True}
    theirs = ref.stream("/v1/chat/completions", {"model": MODEL, **body})
    ours = front.stream("/v1/chat/completions", {"model": MODEL, **body})
    assert chunks_of(ours)[0]["prompt_token_ids"] == chunks_of(theirs)[0]["prompt_token_ids"]
    ids = [[i for c in chunks_of(side)[1:] for i in c["choices"][0].get("token_ids") or []] for side in (theirs, ours)]
    assert ids[1] == ids[0] and len(ids[0]) == 12


# -- difference 4: the engine's context limit ------------------------------------------------------------

def test_the_context_limit_is_the_engines(front):
    card = front.get("/v1/models")[1]["data"][0]
    assert card["max_model_len"] == 1024  # the engine's --max-model-len, not the tokenizer's 2048
    assert front.get("/get_model_info")[1]["context_length"] == 1024
    status, body = front.post("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "max_tokens": 1025})
    assert status == 400 and "1024" in body["error"]["message"], body


# -- difference 5: prompt logprobs ---------------------------------------------------------------------------

def test_echo_with_logprobs_is_vllms(front, ref):
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "echo": True, "logprobs": 3}
    t = post(ref, "/v1/completions", body)["choices"][0]["logprobs"]
    o = post(front, "/v1/completions", body)["choices"][0]["logprobs"]
    assert len(o["token_logprobs"]) == len(t["token_logprobs"]) > 4
    assert o["token_logprobs"][0] is None and t["token_logprobs"][0] is None
    assert all(close(a, b) for a, b in zip(t["token_logprobs"], o["token_logprobs"])), (t, o)
    for a, b in zip(t["top_logprobs"][1:], o["top_logprobs"][1:]):  # names may differ (difference 6): values
        assert len(a) == len(b) and all(close(x, y) for x, y in zip(sorted(a.values()), sorted(b.values())))
    events = front.stream("/v1/completions", {"model": MODEL, **body, "stream": True})
    streamed = [x for c in chunks_of(events) if c["choices"][0]["logprobs"]
                for x in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert all(close(a, b) for a, b in zip(o["token_logprobs"], streamed)) and len(streamed) == len(o["token_logprobs"])


def test_chat_prompt_logprobs_are_vllms(front, ref):
    body = {"messages": MESSAGES, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 2}
    theirs, ours = post(ref, "/v1/chat/completions", body), post(front, "/v1/chat/completions", body)
    t, o = theirs["prompt_logprobs"], ours["prompt_logprobs"]
    assert len(o) == len(t) > 3 and o[0] is None and t[0] is None
    for a, b in zip(t[1:], o[1:]):
        assert set(b) == set(a), (a, b)
        for tid, x in a.items():
            assert close(x["logprob"], b[tid]["logprob"])
            assert b[tid]["rank"] in (x["rank"], None)  # mtok ranks only within the top k it was given


def test_prompt_logprobs_from_a_position(front, ref):
    """/generate's ``logprob_start_len``: the prompt's rows from there on, the values vLLM gives."""
    ids = post(ref, "/tokenize", {"prompt": PROMPT})["tokens"]
    status, body = front.post("/generate", {"input_ids": ids, "return_logprob": True, "logprob_start_len": 3,
                                            "top_logprobs_num": 1, "sampling_params": {"max_new_tokens": 1,
                                                                                       "temperature": 0}})
    assert status == 200, body
    rows = body["meta_info"]["input_token_logprobs"]
    assert [r[1] for r in rows] == ids[3:]
    t = post(ref, "/v1/completions", {"prompt": ids, "max_tokens": 1, "temperature": 0, "echo": True,
                                      "logprobs": 1})["choices"][0]["logprobs"]["token_logprobs"]
    assert all(close(r[0], v) for r, v in zip(rows, t[3:len(ids)]))


# -- issue 25 item 8: constrained output -----------------------------------------------------------------------

def whitespace_bias(model_dir: str) -> dict:
    """-100 for every token that is whitespace only: a random model given a JSON grammar
    (which allows whitespace between any two tokens) would otherwise never end."""
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    return {str(i): -100 for t, i in vocab.items()
            if re.fullmatch(r"[\u2581\s]+", t) or t in ("<0x09>", "<0x0A>", "<0x0D>", "<0x20>")}


def matches(value, schema) -> bool:
    """``value`` against the small schemas above: objects of enums, all required, nothing else."""
    props = schema["properties"]
    return (isinstance(value, dict) and set(value) == set(schema["required"]) <= set(props)
            and all(value[k] in props[k]["enum"] for k in value))


FORCED = [
    ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "zones", "schema": ZONES}}}),
    ("required", {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}),
    ("named", {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
               "parallel_tool_calls": False}),
]


@pytest.mark.parametrize("name,extra", FORCED, ids=[f[0] for f in FORCED])
def test_constrained_chat_output_matches_its_schema(front, vllm_model, name, extra):
    body = {"messages": MESSAGES, "max_tokens": 200, "temperature": 0, "logit_bias": whitespace_bias(vllm_model),
            **extra}
    status, got = front.post("/v1/chat/completions", {"model": MODEL, **body})
    if front.engine.skip_tokenizer_init:  # no grammar without a tokenizer: a clear 400, never unconstrained text
        assert status == 400, got
        assert "tokenizer" in got["error"]["message"] and got["error"]["message"].startswith("upstream:"), got
        return
    assert status == 200, got
    choice = got["choices"][0]
    assert choice["finish_reason"] in ("stop", "tool_calls"), choice
    message = choice["message"]
    if name == "json_schema":
        assert matches(json.loads(message["content"]), ZONES), message
        return
    calls = message["tool_calls"]
    assert len(calls) == 1, message
    fn = calls[0]["function"]
    if name == "named":
        assert fn["name"] == "get_weather"
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[fn["name"]]
    assert matches(json.loads(fn["arguments"]), schema), fn


def test_a_constrained_completion_is_vllms_own(front, ref, vllm_model):
    """The token route reads the nested ``structured_outputs`` as vLLM's OpenAI routes read
    ``response_format``: the same greedy constrained answer, token for token."""
    body = {"prompt": PROMPT, "max_tokens": 120, "temperature": 0, "logit_bias": whitespace_bias(vllm_model),
            "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
            "return_token_ids": True}
    status, ours = front.post("/v1/completions", {"model": MODEL, **body})
    if front.engine.skip_tokenizer_init:
        assert status == 400 and "tokenizer" in ours["error"]["message"], ours
        events_status, _ = front.post("/v1/completions", {"model": MODEL, **body, "stream": True})
        assert events_status == 400  # refused before the stream begins, as an HTTP status
        return
    assert status == 200, ours
    theirs = post(ref, "/v1/completions", body)["choices"][0]
    o = ours["choices"][0]
    assert o["token_ids"] == theirs["token_ids"] and o["finish_reason"] == theirs["finish_reason"] == "stop"
    assert matches(json.loads(o["text"]), CITY), o["text"]
