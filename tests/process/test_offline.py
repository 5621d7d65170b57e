"""``mtok.Engine``: the pipeline in the test process, no HTTP; its answers are
the HTTP server's, compared request by request."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys

import pytest

import mtok
from support import ROOT, Server, children_of, import_real, wait_for
from mtok.procutil import pid_alive
from mtok.engines.echo import echo_embedding
from test_launch import ReverseEngine
from test_lifecycle import leftovers

pytestmark = pytest.mark.fast

VOLATILE = ("id", "e2e_latency")  # differ between any two runs of the same request


@pytest.fixture(scope="module")
def engine():
    with mtok.Engine() as eng:
        yield eng


@pytest.fixture(scope="module")
def http():
    with mtok.launch(port=0) as handle:
        c = Server.__new__(Server)
        c.host, c.port = handle.host, handle.port
        yield c


def stable(out):
    if isinstance(out, list):
        return [stable(o) for o in out]
    meta = {k: v for k, v in out["meta_info"].items() if k not in VOLATILE}
    return {**out, "meta_info": meta}


CASES = [
    dict(prompt="Hello, world", sampling_params={"max_new_tokens": 4}),
    dict(prompt=["a b c", "d e f g"], sampling_params={"max_new_tokens": 6, "stop": " f"}),
    dict(input_ids=[15, 16, 17], sampling_params={"max_new_tokens": 3, "stop_token_ids": [16]}),
    dict(input_ids=[[15, 16], [17]], sampling_params=[{"max_new_tokens": 2}, {"max_new_tokens": 5}]),
]


def as_body(case):
    body = dict(case)
    if "prompt" in body:
        body["text"] = body.pop("prompt")
    return body


@pytest.mark.parametrize("case", CASES)
def test_generate_answers_as_the_server_does(engine, http, case):
    status, expected = http.post("/generate", as_body(case))
    assert status == 200, expected
    got = engine.generate(**case)
    assert stable(got) == stable(expected)
    assert isinstance(got, list) == isinstance(expected, list)


@pytest.mark.parametrize("case", CASES[:2])
def test_streamed_generate_is_the_servers_stream(engine, http, case):
    events = list(engine.generate(**case, stream=True))
    expected = [e for e in http.stream("/generate", {**as_body(case), "stream": True}) if e != "[DONE]"]
    final = {}
    for e in events:
        final[e.get("index", 0)] = e
        assert e["text"].startswith(final[e.get("index", 0)]["text"])  # cumulative, as in SGLang
    finals = {e.get("index", 0): e for e in expected}
    assert stable(list(final.values())) == stable(list(finals.values()))
    assert all(e["meta_info"]["finish_reason"] for e in final.values())


def test_logprob_requests_pass_through_unchanged(engine, http):
    """The fields reach the native request as they are: the engine answers what
    the server answers (today a 400 naming the field, where the engine has none)."""
    body = {"text": "Hello", "return_logprob": True, "top_logprobs_num": 2, "sampling_params": {"max_new_tokens": 2}}
    status, expected = http.post("/generate", body)
    try:
        got = engine.generate("Hello", {"max_new_tokens": 2}, return_logprob=True, top_logprobs_num=2)
    except mtok.APIError as e:
        assert status == e.status and expected["error"]["message"] == e.message
    else:
        assert status == 200 and stable(got) == stable(expected)


def test_bad_input_raises_with_the_servers_message(engine, http):
    with pytest.raises(mtok.APIError, match="max_new_tokens") as err:
        engine.generate("x", {"max_new_tokens": -1})
    assert err.value.status == 400
    status, expected = http.post("/generate", {"text": "x", "image_data": "cat.png",
                                               "sampling_params": {"max_new_tokens": 1}})
    try:  # a field mtok does not know: refused or ignored, as the server does
        got = engine.generate("x", {"max_new_tokens": 1}, image_data="cat.png")
    except mtok.APIError as e:
        assert (e.status, e.message) == (status, expected["error"]["message"])
    else:
        assert status == 200 and stable(got) == stable(expected)
    assert engine.generate("still serving", {"max_new_tokens": 1})["meta_info"]["completion_tokens"] == 1


def test_encode(engine, http):
    one = engine.encode("a cat")
    assert one["embedding"] == pytest.approx(echo_embedding(engine.tokenize("a cat")))
    batch = engine.encode(["a cat", "a dog"])
    status, expected = http.post("/encode", {"text": ["a cat", "a dog"]})
    assert status == 200
    assert [b["embedding"] for b in batch] == [e["embedding"] for e in expected]
    assert engine.encode([5823, 3791])["meta_info"]["prompt_tokens"] == 2


def test_tokenize_and_detokenize(engine):
    ids = engine.tokenize("Hello, world")
    assert engine.detokenize(ids) == "Hello, world"
    assert engine.tokenize(["a", "b c"]) == [engine.tokenize("a"), engine.tokenize("b c")]
    assert engine.detokenize([ids, ids[:1]]) == ["Hello, world", engine.detokenize(ids[:1])]


def test_async_variants(engine):
    prompts = [f"prompt {i} of many" for i in range(40)]

    async def main():
        singles = await asyncio.gather(*[engine.async_generate(p, {"max_new_tokens": 4}) for p in prompts])
        stream = await engine.async_generate(["x y z", "q"], {"max_new_tokens": 3}, stream=True)
        events = [e async for e in stream]
        emb = await engine.async_encode(["a cat"])
        return singles, events, emb

    singles, events, emb = asyncio.run(main())
    sync = engine.generate(prompts, {"max_new_tokens": 4})
    assert [s["text"] for s in singles] == [s["text"] for s in sync]
    assert {e["index"] for e in events} == {0, 1} and events[-1]["meta_info"]["finish_reason"]
    assert emb[0]["embedding"] == pytest.approx(echo_embedding(engine.tokenize("a cat")))


def test_a_batch_beyond_capacity_is_sent_in_windows():
    with mtok.Engine(max_running_requests=4, max_queued_requests=8) as eng:
        prompts = [f"number {i}" for i in range(50)]
        out = eng.generate(prompts, {"max_new_tokens": 2})
        assert [o["output_ids"] for o in out] == [eng.tokenize(p)[:2] for p in prompts]
        seen = {e["index"] for e in eng.generate(prompts, {"max_new_tokens": 2}, stream=True)}
        assert seen == set(range(50))


def test_shutdown_leaves_nothing_behind():
    before = set(children_of(os.getpid()))
    eng = mtok.Engine()
    pids = list(eng.pids.values())
    sock_dir = eng._pipeline.sock_dir
    assert os.path.isdir(sock_dir)
    assert set(pids) <= set(children_of(os.getpid())) - before
    assert eng.generate("x", {"max_new_tokens": 1})["text"] == "x"
    eng.shutdown()
    eng.shutdown()  # idempotent
    assert eng.tokenizer_manager.recv_from_detokenizer is None  # its inbox closed too
    wait_for(lambda: not [p for p in pids if pid_alive(p)], timeout=5, what="the engine's processes to exit")
    assert not os.path.exists(sock_dir)
    assert not [p for p in leftovers(os.getpid()) if p.startswith("/dev/shm")]  # an engine uses none
    with pytest.raises(RuntimeError, match="shut down"):
        eng.generate("x")


def test_closing_a_stream_early_aborts_its_request():
    """The stream's iterator holds the request handle: closing it aborts the request in the scheduler."""
    with mtok.Engine(engine_step_delay=0.01) as eng:
        tm = eng.tokenizer_manager
        events = eng.generate("long", {"max_new_tokens": 50000, "ignore_eos": True}, stream=True)
        assert next(events)["meta_info"]["finish_reason"] is None
        assert tm.num_in_flight == 1
        events.close()
        assert tm.num_in_flight == 0
        wait_for(lambda: tm.rpc("get_state")["num_running"] == 0, timeout=5, what="the scheduler to drop it")


def test_two_engines_in_one_process_are_independent():
    with mtok.Engine() as a, mtok.Engine(engine=ReverseEngine) as b:
        assert a._pipeline.sock_dir != b._pipeline.sock_dir
        assert a.generate(input_ids=[15, 16], sampling_params={"max_new_tokens": 2})["output_ids"] == [15, 16]
        assert b.generate(input_ids=[15, 16], sampling_params={"max_new_tokens": 2})["output_ids"] == [16, 15]


def test_a_dead_scheduler_fails_requests_at_once():
    with mtok.Engine() as eng:
        os.kill(eng.pids["scheduler"], signal.SIGKILL)
        wait_for(lambda: eng.tokenizer_manager.failure, timeout=5, what="the engine to notice")
        with pytest.raises(mtok.APIError, match="scheduler.*died") as err:
            eng.generate("x", {"max_new_tokens": 1})
        assert err.value.status == 503


def test_settings_are_checked():
    with pytest.raises(ValueError, match="tokenizer_worker_num"):
        mtok.Engine(tokenizer_worker_num=2)
    with pytest.raises(TypeError, match="max_running_requests"):
        mtok.Engine(max_running_request=3)
    before = set(leftovers(os.getpid()))
    with pytest.raises(mtok.BootError, match="/nonexistent/dir"):
        mtok.Engine(tokenizer_path="/nonexistent/dir")
    assert set(leftovers(os.getpid())) == before


ECHO_LAST = os.path.join(ROOT, "examples",
                         "chat_template_echo_last.jinja")


def test_chat_and_apply_chat_template_match_the_server():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hello there"}]
    with mtok.Engine(chat_template=ECHO_LAST) as eng, mtok.launch(port=0, chat_template=ECHO_LAST) as handle:
        srv = Server.__new__(Server)
        srv.host, srv.port = handle.host, handle.port
        text = eng.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = eng.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
        status, tok = srv.post("/tokenize", {"messages": messages})
        assert status == 200 and ids == tok["tokens"] and eng.detokenize(ids) == text
        got = eng.chat(messages, max_tokens=len(ids))
        status, expected = srv.post("/v1/chat/completions", {"messages": messages, "max_tokens": len(ids)})
        assert status == 200
        assert got["choices"] == expected["choices"] and got["usage"] == expected["usage"]
        assert got["object"] == "chat.completion" and got["choices"][0]["message"]["content"] == text
        chunks = list(eng.chat(messages, max_tokens=len(ids), stream=True))
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == text
        with pytest.raises(mtok.APIError, match="messages"):
            eng.chat([])


# Shows each input apply_chat_template hands the template.
PROBE = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
         "{% if add_generation_prompt %}<gen>{% endif %}"
         "{% if enable_thinking is defined %}[think={{ enable_thinking }}]{% endif %}{{ flavour | default('') }}")
CHAT = [{"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def probe_engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "probe.jinja"
    path.write_text(PROBE)
    with mtok.Engine(chat_template=str(path)) as eng:
        yield eng


def test_apply_chat_template_has_transformers_defaults(probe_engine):
    """Issue 25: ``tokenize`` defaulted to False and ``add_generation_prompt`` to
    True; transformers (5.x) tokenizes into a dict and adds no generation prompt."""
    eng = probe_engine
    assert eng.apply_chat_template(CHAT, tokenize=False) == "<user>Hello there"
    ids = eng.tokenize("<user>Hello there", add_special_tokens=False)
    assert eng.apply_chat_template(CHAT) == {"input_ids": ids, "attention_mask": [1] * len(ids)}
    assert eng.apply_chat_template(CHAT, return_dict=False) == ids
    assert eng.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True) == "<user>Hello there<gen>"
    two = [CHAT, [{"role": "system", "content": "s"}]]
    assert eng.apply_chat_template(two, tokenize=False) == ["<user>Hello there", "<system>s"]
    assert eng.apply_chat_template(two, return_dict=False) == [ids, eng.tokenize("<system>s", False)]


def test_apply_chat_template_passes_template_kwargs(probe_engine):
    """Issue 25: ``chat_template_kwargs`` was ignored; extra keywords reach the
    template as in transformers, and so does the HTTP field's dict."""
    eng = probe_engine
    plain = "<user>Hello there"
    assert eng.apply_chat_template(CHAT, tokenize=False, enable_thinking=False) == plain + "[think=False]"
    assert eng.apply_chat_template(CHAT, tokenize=False, chat_template_kwargs={"enable_thinking": True},
                                   flavour="!") == plain + "[think=True]!"
    assert eng.apply_chat_template(CHAT, tokenize=False, chat_template_kwargs={"flavour": "a"},
                                   flavour="b") == plain + "b"


def test_apply_chat_template_refuses_what_it_cannot_do(probe_engine):
    with pytest.raises(TypeError, match="chat_template"):
        probe_engine.apply_chat_template(CHAT, chat_template="{{ 1 }}")
    with pytest.raises(TypeError, match="return_tensors"):
        probe_engine.apply_chat_template(CHAT, return_tensors="pt")
    with pytest.raises(mtok.APIError, match="continue_final_message"):
        probe_engine.apply_chat_template(CHAT, add_generation_prompt=True, continue_final_message=True)


def test_apply_chat_template_matches_transformers(probe_engine, tmp_path):
    transformers = import_real("transformers")
    from chat_models import model_dir

    hf = transformers.AutoTokenizer.from_pretrained(model_dir(tmp_path, "probe", {}, jinja=PROBE))
    chats = [CHAT, [CHAT, [{"role": "assistant", "content": "hi"}]]]
    for conversation in chats:
        for kw in ({}, {"add_generation_prompt": True}, {"tokenize": False, "enable_thinking": False},
                   {"return_dict": False, "flavour": "x"}):
            want = hf.apply_chat_template(conversation, **kw)
            got = probe_engine.apply_chat_template(conversation, **kw)
            assert (dict(want) if kw.get("tokenize", True) and kw.get("return_dict", True) else want) == got, kw


def embedding_examples():
    """The Python examples of docs/embedding.md: mtok.launch's, then mtok.Engine's."""
    with open(os.path.join(ROOT, "docs", "embedding.md"), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


@pytest.mark.parametrize("index", [0, 1])
def test_the_embedding_page_examples_run(tmp_path, index):
    assert len(embedding_examples()) == 2
    script = tmp_path / "example.py"
    script.write_text(embedding_examples()[index])
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT),
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), "the example printed nothing"
