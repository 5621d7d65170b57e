"""The response shapes SGLang's and vLLM's clients rely on, over a real server
with the echo engine: ``reasoning_content`` always present, usage counting
each prompt once, the model cards, ``continuous_usage_stats``, and
``/tokenize``'s and ``/tokenizer_info``'s extras (issue 25, items 1-5).

The echo engine generates the prompt back token by token and
``examples/chat_template_echo_last.jinja`` makes the prompt the last user
message, so every count below is known before the request is sent.
"""

from __future__ import annotations

import json
import os

import pytest

from support import ROOT, import_real
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

openai = import_real("openai")

pytestmark = pytest.mark.fast

ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")
SERVED = "org/echo-model"  # a served name with a slash, as Hugging Face names are
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
END = "<<END>>"


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    """Two models of the default tokenizer: ``SERVED`` (the default) and ``think``, which reasons (deepseek-r1)."""
    return server_factory("--tokenizer-worker-num", str(request.param), "--model", f"{SERVED}={DEFAULT_TOKENIZER_DIR}",
                          "--model", f"think={DEFAULT_TOKENIZER_DIR}", "--chat-template", ECHO_LAST,
                          "--tool-call-parser", "hermes", "--reasoning-parser", "think=deepseek-r1")


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none", max_retries=0, timeout=60)


def count(srv, text):
    return srv.post("/tokenize", {"prompt": text})[1]["count"]


def chat_body(says, **kw):
    return dict({"messages": [{"role": "user", "content": says}], "max_tokens": count_free(says)}, **kw)


def count_free(says):
    return 4 * len(says.encode()) + 8


def choices_of(events):
    return [e for e in events if e != "[DONE]" and e["choices"]]


# -- 1. reasoning_content is there, null, when there is none -------------------------------------
def test_a_chat_message_has_reasoning_content_null(srv, client):
    resp = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "plain words"}],
                                          max_tokens=2, n=2)
    assert [c.message.reasoning_content for c in resp.choices] == [None, None]  # an absent one raises
    status, raw = srv.post("/v1/chat/completions", chat_body("plain words", max_tokens=2))
    assert status == 200 and raw["choices"][0]["message"] == {"role": "assistant", "content": "plain words",
                                                              "reasoning_content": None}


def test_every_streamed_delta_has_reasoning_content_null(srv, client):
    """The role chunk, each content chunk, the finish chunk: SGLang sends the key on all of them."""
    events = srv.stream("/v1/chat/completions", chat_body("one two three", max_tokens=3, stream=True))
    deltas = [e["choices"][0]["delta"] for e in choices_of(events)]
    assert deltas[0] == {"role": "assistant", "content": "", "reasoning_content": None}
    assert deltas[-1] == {"reasoning_content": None}
    assert all(d["reasoning_content"] is None for d in deltas) and len(deltas) >= 3
    stream = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "a b"}],
                                            max_tokens=2, stream=True)
    assert {c.choices[0].delta.reasoning_content for c in stream} == {None}


def test_tool_call_deltas_have_reasoning_content_null(srv, client):
    says = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    stream = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": says + END}],
                                            tools=TOOLS, stop=[END], max_tokens=count_free(says), stream=True)
    chunks = list(stream)
    calls = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert calls and all(c.choices[0].delta.reasoning_content is None for c in chunks if c.choices)
    resp = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": says + END}],
                                          tools=TOOLS, stop=[END], max_tokens=count_free(says))
    msg = resp.choices[0].message
    assert msg.tool_calls[0].function.name == "get_weather" and msg.reasoning_content is None


# -- 2. usage counts each prompt once, each choice's completion ----------------------------------
def test_chat_usage_counts_the_prompt_once_with_n(srv):
    says = "four words right here"
    prompt = srv.post("/tokenize", {"messages": [{"role": "user", "content": says}]})[1]["count"]
    status, resp = srv.post("/v1/chat/completions", chat_body(says, max_tokens=3, n=3))
    assert status == 200 and len(resp["choices"]) == 3
    assert resp["usage"] == {"prompt_tokens": prompt, "completion_tokens": 9, "total_tokens": prompt + 9,
                             "reasoning_tokens": 0}  # SGLang's key, 0 without a reasoning parser
    events = srv.stream("/v1/chat/completions", chat_body(says, max_tokens=3, n=3, stream=True,
                                                          stream_options={"include_usage": True}))
    assert events[-2]["choices"] == [] and events[-2]["usage"] == resp["usage"]


def test_completion_usage_counts_each_prompt_once_with_n(srv):
    prompts = ["a b c d", "e f"]
    prompt = sum(count(srv, p) for p in prompts)
    body = {"prompt": prompts, "max_tokens": 2, "n": 2}
    status, resp = srv.post("/v1/completions", body)
    assert status == 200 and len(resp["choices"]) == 4
    assert resp["usage"] == {"prompt_tokens": prompt, "completion_tokens": 8, "total_tokens": prompt + 8}
    events = srv.stream("/v1/completions", dict(body, stream=True, stream_options={"include_usage": True}))
    assert events[-2]["choices"] == [] and events[-2]["usage"] == resp["usage"]
    ids = srv.post("/tokenize", {"prompt": "token ids"})[1]["tokens"]
    status, resp = srv.post("/v1/completions", {"prompt": ids, "max_tokens": 1, "n": 3})
    assert resp["usage"]["prompt_tokens"] == len(ids) and resp["usage"]["completion_tokens"] == 3, resp


# -- 3. the model cards ----------------------------------------------------------------------------
CARD_KEYS = {"id", "object", "created", "owned_by", "root", "parent", "max_model_len"}  # SGLang's ModelCard


def test_model_cards_carry_sglangs_fields(srv, client):
    status, body = srv.get("/v1/models")
    assert status == 200 and [set(m) for m in body["data"]] == [CARD_KEYS, CARD_KEYS]
    card = body["data"][0]
    assert card["id"] == card["root"] == SERVED and card["parent"] is None and card["object"] == "model"
    assert isinstance(card["max_model_len"], int) and card["max_model_len"] > 0
    got = client.models.retrieve(SERVED)  # the client escapes the slash (%2F)
    assert got.id == got.root == SERVED
    status, raw = srv.get("/v1/models/" + SERVED)  # older clients send it as it is
    assert status == 200 and dict(raw, created=0) == dict(card, created=0)  # created: the answer's time, as SGLang's


def test_an_unknown_model_id_is_a_404_model_not_found(srv, client):
    status, body = srv.get("/v1/models/no-such-model")
    assert status == 404 and body == {"error": {"message": "The model 'no-such-model' does not exist",
                                                "type": "invalid_request_error", "param": "model",
                                                "code": "model_not_found"}}
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("non-existent-model")
    assert srv.get("/v1/models/org/other")[0] == 404


# -- 5. continuous_usage_stats ---------------------------------------------------------------------
def check_running_usage(chunks, prompt, final, key="completion_tokens"):
    """Each chunk's usage is its choice's so far: the prompt, completion (or reasoning) tokens that only grow."""
    seen = {}
    for c in chunks:
        u, i = c["usage"], c["choices"][0]["index"]
        assert u["prompt_tokens"] == prompt and u["total_tokens"] == prompt + u["completion_tokens"], c
        assert u[key] >= seen.get(i, 0), c
        seen[i] = u[key]
    assert set(seen.values()) == {final}


def test_continuous_usage_on_every_completion_chunk(srv):
    text = "usage on every chunk"
    n = count(srv, text)
    events = srv.stream("/v1/completions", {"prompt": text, "max_tokens": n, "n": 2, "stream": True,
                                            "stream_options": {"include_usage": True,
                                                               "continuous_usage_stats": True}})
    chunks = choices_of(events)
    check_running_usage(chunks, n, n)
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 2 * n
    alone = srv.stream("/v1/completions", {"prompt": text, "max_tokens": 2, "stream": True,
                                           "stream_options": {"continuous_usage_stats": True}})
    assert all(e["choices"] for e in alone[:-1]), "no usage chunk without include_usage"
    check_running_usage(alone[:-1], n, 2)


def test_continuous_usage_on_every_chat_chunk(srv, client):
    says = "chat usage as it goes"
    prompt = srv.post("/tokenize", {"messages": [{"role": "user", "content": says}]})[1]["count"]
    events = srv.stream("/v1/chat/completions", chat_body(says, max_tokens=4, stream=True, stream_options={
        "include_usage": True, "continuous_usage_stats": True}))
    chunks = choices_of(events)
    assert chunks[0]["usage"] is None and chunks[-1]["usage"] is None  # the role and finish chunks: SGLang's
    check_running_usage(chunks[1:-1], prompt, 4)
    assert all(c["usage"]["reasoning_tokens"] == 0 for c in chunks[1:-1])
    stream = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": says}], max_tokens=4,
                                            stream=True, stream_options={"include_usage": True,
                                                                         "continuous_usage_stats": True})
    got = list(stream)
    with_content = [c for c in got if c.choices and c.choices[0].delta.content]
    assert with_content and all(c.usage is not None for c in with_content)
    assert got[-1].choices == [] and got[-1].usage.completion_tokens == 4


def test_reasoning_tokens_are_counted_as_sglang_counts_them(srv, client):
    """Output tokens up to and including the reasoning's end marker; deepseek-r1 reasons
    from the first token, so every running usage has some (SGLang's test reads each)."""
    says, thought = "Adding one and three</think>The sum is 4.", "Adding one and three</think>"
    expect = count(srv, thought)
    body = chat_body(says + END, model="think", stop=[END])
    status, resp = srv.post("/v1/chat/completions", body)
    assert status == 200 and resp["choices"][0]["message"]["reasoning_content"] == "Adding one and three"
    u = resp["usage"]
    assert u["reasoning_tokens"] == expect and u["completion_tokens_details"] == {"reasoning_tokens": expect}
    assert u["completion_tokens"] > expect, u
    stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True,
                                                                         "continuous_usage_stats": True}, **body)
    chunks = list(stream)
    with_usage = [c for c in chunks if c.usage]
    assert len(with_usage) > 2 and all(c.usage.reasoning_tokens > 0 for c in with_usage)
    assert with_usage[-1].choices == [] and with_usage[-1].usage.reasoning_tokens == expect
    check_running_usage([c.model_dump() for c in with_usage[:-1]], u["prompt_tokens"], expect, "reasoning_tokens")
    assert srv.post("/v1/chat/completions", dict(body, n=2))[1]["usage"]["reasoning_tokens"] == 2 * expect
    plain = srv.post("/v1/chat/completions", chat_body(says + END, stop=[END]))[1]["usage"]
    assert plain["reasoning_tokens"] == 0 and "completion_tokens_details" not in plain


def test_generate_counts_reasoning_tokens_when_required(srv):
    """SGLang's ``require_reasoning`` on /generate: meta_info's ``reasoning_tokens``, the
    output up to and including the end marker's tokens, or all of it before that."""
    says, thought = "Adding one and three</think>The sum is 4.", "Adding one and three</think>"
    expect, total = count(srv, thought), count(srv, says)
    body = {"model": "think", "text": says, "require_reasoning": True, "sampling_params": {"max_new_tokens": total}}
    status, resp = srv.post("/generate", body)
    assert status == 200 and resp["meta_info"]["reasoning_tokens"] == expect, resp
    events = [e for e in srv.stream("/generate", dict(body, stream=True)) if e != "[DONE]"]
    assert [e["meta_info"]["reasoning_tokens"] for e in events] == [min(len(e["output_ids"]), expect) for e in events]
    assert events[-1]["meta_info"]["reasoning_tokens"] == expect
    plain = srv.post("/generate", dict(body, model=SERVED))[1]["meta_info"]  # no --reasoning-parser: none
    assert plain["reasoning_tokens"] == 0
    assert "reasoning_tokens" not in srv.post("/generate", dict(body, require_reasoning=False))[1]["meta_info"]
    status, resp = srv.post("/generate", dict(body, require_reasoning="yes"))
    assert status == 400 and resp["error"]["param"] == "require_reasoning", resp


def test_stream_options_are_checked(srv):
    status, resp = srv.post("/v1/completions", {"prompt": "x", "stream": True,
                                                "stream_options": {"continuous_usage_stats": "yes"}})
    assert status == 400 and resp["error"]["param"] == "stream_options.continuous_usage_stats", resp


# -- 4. /tokenize's extras, /tokenizer_info ------------------------------------------------------
def vocab_strings():
    """id -> token string, read from the tokenizer's own file (not through mtok)."""
    with open(os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    out = {i: t for t, i in tj["model"]["vocab"].items()}
    out.update({a["id"]: a["content"] for a in tj.get("added_tokens", ())})
    return out


def test_tokenize_returns_token_strs_when_asked(srv):
    strings = vocab_strings()
    status, body = srv.post("/tokenize", {"prompt": "Token strings, é and 漢字", "return_token_strs": True})
    assert status == 200 and body["token_strs"] == [strings[i] for i in body["tokens"]], body
    status, plain = srv.post("/v1/tokenize", {"prompt": "Token strings, é and 漢字"})
    assert plain["tokens"] == body["tokens"] and plain["token_strs"] is None  # vLLM's key, null
    msgs = [{"role": "user", "content": "chat strings"}]
    status, chat = srv.post("/tokenize", {"messages": msgs, "return_token_strs": True})
    assert status == 200 and chat["token_strs"] == [strings[i] for i in chat["tokens"]], chat
    status, resp = srv.post("/tokenize", {"prompt": "x", "return_token_strs": "yes"})
    assert status == 400 and resp["error"]["param"] == "return_token_strs", resp


def test_tokenize_takes_sglangs_list_of_prompts(srv):
    texts = ["first prompt", "and a second, longer one", "3"]
    status, body = srv.post("/tokenize", {"prompt": texts, "return_token_strs": True})
    singles = [srv.post("/tokenize", {"prompt": t, "return_token_strs": True})[1] for t in texts]
    assert status == 200 and body["tokens"] == [s["tokens"] for s in singles], body
    assert body["count"] == [s["count"] for s in singles] and body["token_strs"] == [s["token_strs"] for s in singles]
    assert body["max_model_len"] == singles[0]["max_model_len"]
    for bad_prompt in ([], ["a", 1], 3):
        status, resp = srv.post("/tokenize", {"prompt": bad_prompt})
        assert status == 400 and resp["error"]["param"] == "prompt", resp
    status, resp = srv.post("/tokenize", {"prompt": ["x"] * 4097})  # --max-prompts-per-request's default
    assert status == 400 and "--max-prompts-per-request" in resp["error"]["message"], resp


def test_tokenize_ignores_unknown_fields_as_every_route_does(srv):
    status, body = srv.post("/tokenize", {"prompt": "hello", "no_such_field": 1})
    assert status == 200 and body["tokens"] == srv.post("/tokenize", {"prompt": "hello"})[1]["tokens"], body
    status, body = srv.post("/tokenize", {"messages": [{"role": "user", "content": "hi"}], "typo": True})
    assert status == 200, body
    ids = srv.post("/tokenize", {"prompt": "Hi there"})[1]["tokens"]
    status, body = srv.post("/detokenize", {"tokens": ids, "unknown": "x"})
    assert status == 200 and body["text"] == "Hi there", body


def test_tokenizer_info_is_the_tokenizer_config_and_template(srv):
    status, info = srv.get("/tokenizer_info")
    assert status == 200, info
    with open(os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(ECHO_LAST, encoding="utf-8") as f:
        template = f.read()
    assert info == dict(config, chat_template=template)
