"""Chat templates from a model's files, and the prompt they render: mtok against
transformers' apply_chat_template (the reference), and the discovery rules."""

from __future__ import annotations

import json
import os

import pytest

from chat_models import TEMPLATE_NAMES, model_dir, shared_template
from mtok.chat import TemplateError, available_backends
from mtok.api.chat import prompt_ids
from mtok.api.chat_prompt import ChatInput, parse_chat_input, render_prompt, template_messages
from mtok.chat_templates import ChatTemplateFileError, content_format, load_model_chat, special_tokens, template_flags
from mtok.tokenizer import TokenizerFiles
from mtok.tokenizer.load import load_tokenizer
from mtok.models import ModelEntry
from mtok.validate import APIError
from support import import_real, skip_real

pytestmark = [pytest.mark.fast, pytest.mark.unit]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CONVERSATIONS = {
    "one_user": [{"role": "user", "content": "Hello, who are you?"}],
    "system_first": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi  "}],
    "three_turns": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": " 4 "},
                    {"role": "user", "content": "and 3+3?"}],
    "ends_with_assistant": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi there, "}],
    "unicode": [{"role": "user", "content": "héllo wörld 👋 — ｜"}],
    "developer": [{"role": "developer", "content": "Use French."}, {"role": "user", "content": "Bonjour"}],
    "tool_calls": [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": "", "tool_calls": [  # mtok sends null as "" (tested below)
                       {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "22 C"}],
    "thinking": [{"role": "user", "content": "Why?"},
                 {"role": "assistant", "content": "Because.", "reasoning_content": "Let me think."},
                 {"role": "user", "content": "Sure?"}],
    # Parts reach only templates that loop over content as parts (the others get one string; tested below).
    "parts": [{"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "text", "text": "two parts"}]},
              {"role": "assistant", "content": [{"type": "text", "text": "Seen "}]}],
}


def backends():
    return [b for b in ("jinja2", "python") if b in available_backends()]


@pytest.fixture(scope="module")
def transformers_tokenizers(tmp_path_factory):
    """name -> (model dir, transformers tokenizer) for each shared template."""
    import_real("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    base = tmp_path_factory.mktemp("models")
    out = {}
    for name in TEMPLATE_NAMES:
        d = model_dir(base, name, shared_template(name))
        out[name] = (d, AutoTokenizer.from_pretrained(d))
    return out


def mtok_model(directory, backend):
    tok = load_tokenizer(directory)
    return ModelEntry("m", tok, 65536, load_model_chat(tok.files, None, backend))


def cases():
    for name in TEMPLATE_NAMES:
        for conv in CONVERSATIONS:
            for mode in ("generation_prompt", "no_generation_prompt", "continue"):
                yield name, conv, mode


@pytest.mark.parametrize("backend", ["jinja2", "python"])
@pytest.mark.parametrize("name,conv,mode", list(cases()))
def test_prompt_matches_transformers(transformers_tokenizers, name, conv, mode, backend):
    if backend not in backends():
        skip_real(f"the {backend} chat template backend is not available here")
    directory, hf = transformers_tokenizers[name]
    messages = CONVERSATIONS[conv]
    if conv == "parts" and content_format(shared_template(name)["chat_template"]) == "string":
        pytest.skip("this template reads content as a string; mtok joins the parts (see the test below)")
    kwargs = {"add_generation_prompt": mode == "generation_prompt", "continue_final_message": mode == "continue"}
    if conv == "tool_calls":
        kwargs["tools"] = TOOLS
    try:
        expected = hf.apply_chat_template(messages, tokenize=False, **kwargs)
        expected_ids = hf.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    except Exception as e:  # the template refuses this conversation: mtok must refuse it too, with a 400
        with pytest.raises(APIError) as err:
            render_prompt(mtok_model(directory, backend).chat, ChatInput(messages, **kwargs))
        assert err.value.status == 400, e
        if type(e).__name__ == "TemplateError":  # the template's raise_exception: its words reach the client
            assert str(e) in err.value.message
        return
    model = mtok_model(directory, backend)
    inp = ChatInput(messages, **kwargs)
    assert render_prompt(model.chat, inp) == expected
    assert prompt_ids(model, inp) == list(expected_ids)


@pytest.mark.parametrize("backend", ["jinja2", "python"])
def test_context_matches_transformers(transformers_tokenizers, tmp_path, backend):
    """tools, documents, chat_template_kwargs and the special tokens, as a template sees them."""
    if backend not in backends():
        skip_real(f"the {backend} chat template backend is not available here")
    import_real("transformers")
    from transformers import AutoTokenizer

    source = ("{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ image_token }}|"
              "{{ tools | tojson }}|{{ documents | tojson }}|{{ enable_thinking }}|{{ add_generation_prompt }}|"
              "{% for m in messages %}{{ m | tojson }}{% endfor %}")
    config = {"chat_template": source, "bos_token": {"__type": "AddedToken", "content": "<s>"},
              "eos_token": "</s>", "pad_token": "<pad>", "extra_special_tokens": {"image_token": "<img>"}}
    d = model_dir(tmp_path, "ctx", config)
    hf = AutoTokenizer.from_pretrained(d)
    messages = [{"role": "user", "content": "hi", "name": None},
                {"role": "assistant", "content": "ok", "reasoning_content": "think"}]
    docs = [{"title": "t", "text": "x"}]
    expected = hf.apply_chat_template(messages, tools=TOOLS, documents=docs, tokenize=False,
                                      add_generation_prompt=True, enable_thinking=False)
    got = render_prompt(mtok_model(d, backend).chat,
                        ChatInput(messages, TOOLS, docs, True, False, {"enable_thinking": False}))
    assert got == expected


def test_special_tokens_from_the_side_files():
    cfg = {"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>", "unk_token": None,
           "extra_special_tokens": {"image_token": "<img>"}, "chat_template": "x"}
    assert special_tokens(cfg) == {"bos_token": "<s>", "eos_token": "</s>", "image_token": "<img>"}


def test_content_parts_become_a_string_unless_the_template_loops_over_them():
    llama, gemma = shared_template("llama3")["chat_template"], shared_template("gemma3")["chat_template"]
    assert content_format(llama) == "string" and content_format(gemma) == "openai"
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "tool", "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]}]
    assert [m["content"] for m in template_messages(msgs, "string")] == ["a b", "c d"]
    assert [m["content"] for m in template_messages(msgs, "openai")] == [
        [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "c d"]


def test_tool_call_arguments_reach_the_template_as_an_object():
    msgs = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}]
    out = template_messages(msgs, "string")
    assert out == [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}]
    for bad_args in ("{not json", "[1, 2]"):
        msgs[0]["tool_calls"][0]["function"]["arguments"] = bad_args
        with pytest.raises(APIError) as e:
            template_messages(msgs, "string")
        assert e.value.param == "messages[0].tool_calls[0].function.arguments"


def files_of(d):
    return TokenizerFiles.locate(d)


def test_discovery_order(tmp_path):
    d = model_dir(tmp_path, "m", {"chat_template": "config:{{ messages[0].content }}"})
    inp = ChatInput([{"role": "user", "content": "x"}])
    assert render_prompt(load_model_chat(files_of(d), None, "auto"), inp) == "config:x"
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write("jinja:{{ messages[0].content }}")
    assert render_prompt(load_model_chat(files_of(d), None, "auto"), inp) == "jinja:x"
    flag = tmp_path / "t.json"
    flag.write_text(json.dumps("flag:{{ messages[0].content }}"))
    assert render_prompt(load_model_chat(files_of(d), str(flag), "auto"), inp) == "flag:x"
    flag.write_text(json.dumps({"chat_template": "obj:{{ messages[0].content }}"}))
    assert render_prompt(load_model_chat(files_of(d), str(flag), "auto"), inp) == "obj:x"
    plain = tmp_path / "t.jinja"
    plain.write_text("plain:{{ messages[0].content }}")
    assert render_prompt(load_model_chat(files_of(d), str(plain), "auto"), inp) == "plain:x"


def test_named_templates_pick_tool_use_when_tools_are_given(tmp_path):
    named = [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T{{ tools[0].function.name }}"}]
    chat = load_model_chat(files_of(model_dir(tmp_path, "m", {"chat_template": named})), None, "auto")
    msgs = [{"role": "user", "content": "x"}]
    assert render_prompt(chat, ChatInput(msgs)) == "D"
    assert render_prompt(chat, ChatInput(msgs, tools=TOOLS)) == "Tget_weather"
    d = model_dir(tmp_path, "files", {"chat_template": "config"}, jinja="D")  # .jinja files win over the config
    os.makedirs(os.path.join(d, "additional_chat_templates"))
    with open(os.path.join(d, "additional_chat_templates", "tool_use.jinja"), "w") as f:
        f.write("T")
    from_files = load_model_chat(files_of(d), None, "auto")
    assert render_prompt(from_files, ChatInput(msgs)) == "D" and render_prompt(from_files, ChatInput(msgs, tools=TOOLS)) == "T"
    only_tools = load_model_chat(files_of(model_dir(tmp_path, "n", {"chat_template": named[1:]})), None, "auto")
    with pytest.raises(APIError) as e:
        render_prompt(only_tools, ChatInput(msgs))
    assert "none named 'default'" in e.value.message and "--chat-template" in e.value.message


def test_no_template_and_broken_templates(tmp_path):
    inp = ChatInput([{"role": "user", "content": "x"}])
    with pytest.raises(APIError) as e:
        render_prompt(load_model_chat(files_of(model_dir(tmp_path, "none", {})), None, "auto"), inp)
    assert e.value.status == 400 and "no chat template" in e.value.message and "--chat-template FILE" in e.value.message
    broken = load_model_chat(files_of(model_dir(tmp_path, "broken", {"chat_template": "{% for %}"})), None, "auto")
    with pytest.raises(APIError) as e:
        render_prompt(broken, inp)
    assert "does not compile" in e.value.message
    bad_file = tmp_path / "bad.jinja"
    bad_file.write_text("{% if %}")
    with pytest.raises(ChatTemplateFileError):
        load_model_chat(files_of(model_dir(tmp_path, "ok", {})), str(bad_file), "auto")


def test_template_flags_per_model():
    assert template_flags(["a.jinja"], ["x", "y"]) == {"x": "a.jinja", "y": "a.jinja"}
    assert template_flags(["a.jinja", "y=b.jinja"], ["x", "y"]) == {"x": "a.jinja", "y": "b.jinja"}
    assert template_flags(["y=b.jinja"], ["x", "y"]) == {"y": "b.jinja"}
    assert template_flags(["dir/k=v.jinja"], ["x"]) == {"x": "dir/k=v.jinja"}  # '=' in a path that names no model
    with pytest.raises(ChatTemplateFileError):
        template_flags(["a.jinja", "b.jinja"], ["x"])


def test_tools_the_template_sees():
    body = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS + [{"type": "function", "function": {"name": "g"}}]}
    assert parse_chat_input(body).tools == body["tools"]
    assert parse_chat_input(dict(body, tool_choice="auto")).tools == body["tools"]
    assert parse_chat_input(dict(body, tool_choice="none")).tools is None
    assert parse_chat_input(dict(body, tools=[])).tools is None
    assert parse_chat_input(dict(body, tool_choice={"type": "function", "function": {"name": "g"}})).tools == body["tools"][1:]
    with pytest.raises(APIError) as e:
        parse_chat_input(dict(body, tool_choice={"type": "function", "function": {"name": "h"}}))
    assert e.value.param == "tool_choice"


def test_request_fields_for_the_template():
    body = {"messages": [{"role": "user", "content": "x"}]}
    assert parse_chat_input(body).add_generation_prompt is True
    inp = parse_chat_input(dict(body, continue_final_message=True))
    assert inp.continue_final_message and not inp.add_generation_prompt
    for extra, param in (({"continue_final_message": True, "add_generation_prompt": True}, "continue_final_message"),
                         ({"chat_template_kwargs": []}, "chat_template_kwargs"),
                         ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
                         ({"tools": {}}, "tools"),
                         ({"messages": []}, "messages"),
                         ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
                         ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
                         ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
                          "messages[0].content[0]")):
        with pytest.raises(APIError) as e:
            parse_chat_input(dict(body, **extra))
        assert e.value.status == 400 and e.value.param == param, (extra, e.value.message)


@pytest.mark.parametrize("backend", ["jinja2", "python"])
def test_environment_globals_and_limits(tmp_path, backend):
    """strftime_now and raise_exception come with the template's environment; a render
    past the output limit is a 400, as any template failure."""
    if backend not in backends():
        skip_real(f"the {backend} chat template backend is not available here")
    import datetime

    source = ("{% if messages[0].content == 'boom' %}{{ raise_exception('no ' + messages[0].content) }}{% endif %}"
              "{% if messages[0].content == 'big' %}{% for i in range(20000) %}{{ 'y' * 300 }}{% endfor %}{% endif %}"
              "{{ strftime_now('%Y') }}")
    chat = load_model_chat(files_of(model_dir(tmp_path, "m", {"chat_template": source})), None, backend)
    year = datetime.datetime.now().strftime("%Y")
    assert render_prompt(chat, ChatInput([{"role": "user", "content": "x"}])) in (year, str(int(year) + 1))
    for content, words in (("boom", "no boom"), ("big", "")):
        with pytest.raises(APIError) as e:
            render_prompt(chat, ChatInput([{"role": "user", "content": content}]))
        assert e.value.status == 400 and words in e.value.message and "chat template" in e.value.message


def test_special_tokens_are_not_added_twice(tmp_path):
    """Mistral's tokenizer adds <s> itself; the template writes it too: the prompt has one."""
    from support import shared_tokenizer

    config = {"chat_template": "{{ bos_token }}[INST] {{ messages[0].content }} [/INST]", "bos_token": "<s>",
              "eos_token": "</s>"}
    d = model_dir(tmp_path, "mistral", config, tokenizer_json=shared_tokenizer("mistral-7b-v0.1.json"))
    model = mtok_model(d, "auto")
    bos = model.tokenizer.token_to_id("<s>")
    plain = model.tokenizer.encode("hello", True)
    assert plain[0] == bos  # the tokenizer's own post-processor adds it
    ids = prompt_ids(model, ChatInput([{"role": "user", "content": "hello"}]))
    assert ids[0] == bos and ids.count(bos) == 1
    assert prompt_ids(model, ChatInput([{"role": "user", "content": "hello"}]), add_special_tokens=True)[:2] == [bos, bos]


@pytest.mark.unit
def test_the_render_budget_flags_reach_every_template(tmp_path):
    """--chat-template-max-cpu-seconds and --chat-template-max-memory-mib become the Limits every template of
    every model renders under (issue 23, finding 2)."""
    from mtok.chat_templates import load_chats, render_limits
    from mtok.tokenizer import DEFAULT_TOKENIZER_DIR
    from mtok.wire.args import ServerArgs

    template = tmp_path / "t.jinja"
    template.write_text("{% set ns = namespace(l=[]) %}{% for i in range(100) %}"
                        "{% set ns.l = ns.l + ['x' * 1000000] %}{% endfor %}")
    args = ServerArgs(chat_template=[str(template)], chat_template_max_cpu_seconds=0.5,
                      chat_template_max_memory_mib=8)
    limits = render_limits(args)
    assert (limits.max_cpu_seconds, limits.max_memory) == (0.5, 8 << 20)
    chat = load_chats(args, {"m": load_tokenizer(DEFAULT_TOKENIZER_DIR)})["m"]
    compiled = chat.pick(False).template
    assert compiled.limits == limits
    with pytest.raises(TemplateError) as info:
        compiled.render(messages=[])
    assert "--chat-template-max-memory-mib" in str(info.value) and "8 MiB" in str(info.value)
