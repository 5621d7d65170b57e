"""Tool-call and reasoning parsers: mtok against SGLang's recorded results, and
streamed == one-shot however the model's text is chunked.

``parser_fixtures.json`` holds SGLang 0.5.23's one-shot results for the corpus in
``parser_corpus.py`` (made by ``scripts/gen_parser_fixtures.py``), so these run
without SGLang; ``test_parsers_sglang_live.py`` compares live when it is installed.
"""

import json
import logging
import os
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtok.parsers import collect, make_reasoning_parser, make_tool_parser
from parser_corpus import LONE_SURROGATE_ARGS, REASONING_CASES, TOOL_CASES, TOOLS, lone_surrogate_call
from support import ROOT

pytestmark = [pytest.mark.fast, pytest.mark.unit]
logging.getLogger("mtok.parsers").setLevel(logging.CRITICAL)

with open(os.path.join(ROOT, "tests", "parser_fixtures.json"), encoding="utf-8") as _f:
    FIXTURES = json.load(_f)


def as_result(content, calls):
    return {"content": content, "calls": [c.as_dict() for c in calls]}


def stream_tools(name, pieces):
    stream = make_tool_parser(name, TOOLS).stream()
    deltas = []
    for piece in pieces:
        deltas += stream.feed(piece)
    deltas += stream.finish()
    return deltas


def stream_reasoning(name, kwargs, pieces, stream_reasoning=True):
    stream = make_reasoning_parser(name, kwargs).stream(stream_reasoning)
    reasoning, content = [], []
    for piece in pieces:
        r, c = stream.feed(piece)
        reasoning.append(r)
        content.append(c)
    r, c = stream.finish()
    return "".join(reasoning) + r, "".join(content) + c


def test_fixtures_cover_the_corpus():
    assert [(c["parser"], c["case"], c["text"]) for c in FIXTURES["tool_cases"]] == TOOL_CASES
    assert len(FIXTURES["reasoning_cases"]) == len(REASONING_CASES)
    assert FIXTURES["tools"] == TOOLS


@pytest.mark.parametrize("case", FIXTURES["tool_cases"], ids=lambda c: c["parser"] + ":" + c["case"])
def test_tool_parser_matches_sglang(case):
    parser = make_tool_parser(case["parser"], FIXTURES["tools"])
    assert as_result(*parser.parse(case["text"])) == case["sglang"]


@pytest.mark.parametrize("case", FIXTURES["reasoning_cases"],
                         ids=lambda c: "%s:%s:%s" % (c["parser"], c["case"], c["chat_template_kwargs"]))
def test_reasoning_parser_matches_sglang(case):
    parser = make_reasoning_parser(case["parser"], case["chat_template_kwargs"])
    reasoning, content = parser.parse(case["text"])
    assert {"reasoning": reasoning, "content": content} == case["sglang"]


@pytest.mark.parametrize("name,label,text", TOOL_CASES, ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "")
def test_tool_stream_equals_oneshot_at_every_split(name, label, text):
    """One token at a time, the whole text at once, and every two-piece split."""
    want = as_result(*make_tool_parser(name, TOOLS).parse(text))
    assert as_result(*collect(stream_tools(name, list(text)))) == want
    assert as_result(*collect(stream_tools(name, [text]))) == want
    for cut in range(len(text) + 1):
        assert as_result(*collect(stream_tools(name, [text[:cut], text[cut:]]))) == want, cut


@pytest.mark.parametrize("name,label,text,kwargs", REASONING_CASES,
                         ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "")
def test_reasoning_stream_equals_oneshot_at_every_split(name, label, text, kwargs):
    want = make_reasoning_parser(name, kwargs).parse(text)
    for flag in (True, False):
        assert stream_reasoning(name, kwargs, list(text), flag) == want
        for cut in range(len(text) + 1):
            assert stream_reasoning(name, kwargs, [text[:cut], text[cut:]], flag) == want, cut


def random_pieces(text, rng):
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 12)))) if len(text) > 1 else []
    bounds = [0] + cuts + [len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(TOOL_CASES), seed=st.integers(0, 2 ** 32 - 1),
       prefix=st.sampled_from(["", " ", "ok ", "<", "\n"]))
def test_tool_stream_random_multi_token_chunks(case, seed, prefix):
    name, _, text = case
    text = prefix + text
    want = as_result(*make_tool_parser(name, TOOLS).parse(text))
    pieces = random_pieces(text, random.Random(seed))
    assert as_result(*collect(stream_tools(name, pieces))) == want


@settings(max_examples=200, deadline=None)
@given(case=st.sampled_from(REASONING_CASES), seed=st.integers(0, 2 ** 32 - 1), flag=st.booleans())
def test_reasoning_stream_random_multi_token_chunks(case, seed, flag):
    name, _, text, kwargs = case
    pieces = random_pieces(text, random.Random(seed))
    assert stream_reasoning(name, kwargs, pieces, flag) == make_reasoning_parser(name, kwargs).parse(text)


@settings(max_examples=600, deadline=None)
@given(name=st.sampled_from(sorted({c[0] for c in TOOL_CASES})),
       text=st.lists(st.sampled_from(list('<>[]{}"\\:,;| \nabTOL_CSgtw') + [
           "<tool_call>", "</tool_call>", "<tool_call>\n", "\n</tool_call>", "[TOOL_CALLS]",
           "[ARGS]", "<|python_tag|>", '{"name": "search", "arguments": {}}', "<｜tool▁calls▁begin｜>",
           "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<|tool_calls_section_begin|>",
           "<|tool_call_begin|>functions.search:0", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "search\n", "<arg_key>query</arg_key>",
           "<arg_value>", "</arg_value>", "<function=search>", "</function>", "<parameter=filters>",
           "</parameter>", "{'a': {1, 2}}", "[search(", "query='x'", ")]", "<|python_start|>",
           "<|python_end|>", '[get_weather(city="a")]']),
           max_size=16).map("".join), seed=st.integers(0, 2 ** 32 - 1))
def test_tool_stream_random_marker_soup(name, text, seed):
    """Random mixtures of markers, JSON and text: never an exception, stream == one-shot."""
    want = as_result(*make_tool_parser(name, TOOLS).parse(text))
    assert as_result(*collect(stream_tools(name, list(text)))) == want
    assert as_result(*collect(stream_tools(name, random_pieces(text, random.Random(seed))))) == want


def test_content_streams_before_the_call_and_markers_are_held_only_until_decided():
    stream = make_tool_parser("hermes", TOOLS).stream()
    assert stream.feed("Let me look ") == [("content", "Let me look")]
    assert stream.feed("<tool") == []                       # maybe a marker: held
    assert stream.feed("box> and more ") == [("content", " <toolbox> and more")]
    assert stream.feed('<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>') == []
    assert stream.finish() == [("call", 0, "get_weather"), ("args", 0, "{}")]


def test_calls_stream_as_each_block_closes_for_formats_that_skip_bad_blocks():
    stream = make_tool_parser("qwen25", TOOLS).stream()
    first = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert stream.feed("Hi " + first) == [("content", "Hi"), ("call", 0, "get_weather"),
                                          ("args", 0, '{"city": "Oslo"}')]
    assert stream.feed('\n<tool_call>\n{"name": "search"') == []
    assert stream.feed(', "arguments": {"query": "x"}}\n</tool_call>') == [
        ("call", 1, "search"), ("args", 1, '{"query": "x"}')]
    assert stream.finish() == []


def test_reasoning_then_content_streams_in_order():
    stream = make_reasoning_parser("deepseek-r1").stream()
    assert stream.feed("I think") == ("I think", "")
    assert stream.feed(" more</th") == (" more", "")
    assert stream.feed("ink>Answer") == ("", "Answer")
    assert stream.finish() == ("", "")


def test_qwen3_enable_thinking_false_reads_plain_content():
    on = make_reasoning_parser("qwen3", {})
    off = make_reasoning_parser("qwen3", {"enable_thinking": False})
    assert on.parse("thoughts</think>answer") == ("thoughts", "answer")
    assert off.parse("thoughts</think>answer") == ("", "thoughts</think>answer")
    assert off.parse("<think>t</think>a") == ("t", "a")


def test_unknown_parser_name_is_a_key_error():
    with pytest.raises(KeyError):
        make_tool_parser("no-such-format")
    with pytest.raises(KeyError):
        make_reasoning_parser("no-such-format")


def test_a_value_json_cannot_hold_is_written_as_text_not_undoing_streamed_calls():
    """SGLang gives up on the whole output here; mtok keeps the calls it streamed."""
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"
            "<tool_call>\n<function=search>\n<parameter=filters>\n{1, 2}\n</parameter>\n</function>\n</tool_call>")
    content, calls = make_tool_parser("qwen3_coder", TOOLS).parse(text)
    assert [c.as_dict() for c in calls] == [{"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                                            {"name": "search", "arguments": '{"filters": "{1, 2}"}'}]
    assert as_result(*collect(stream_tools("qwen3_coder", list(text)))) == as_result(content, calls)


@pytest.mark.parametrize("name", sorted({c[0] for c in TOOL_CASES}))
def test_a_request_without_tools_is_not_parsed(name):
    text = [c[2] for c in TOOL_CASES if c[0] == name and c[1] == "text before and after"][0]
    assert make_tool_parser(name, []).parse(text) == (text, [])
    assert collect(stream_tools_with(name, [], list(text))) == (text, [])


def stream_tools_with(name, tools, pieces):
    stream = make_tool_parser(name, tools).stream()
    deltas = []
    for piece in pieces:
        deltas += stream.feed(piece)
    return deltas + stream.finish()


DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("name", sorted({c[0] for c in TOOL_CASES}))
def test_deeply_nested_arguments_are_unreadable_not_a_crash(name):
    """json and ast recurse: nesting past the interpreter's limit must read as a bad call."""
    from parser_corpus import RENDER
    text = "Hi. " + RENDER[name]([("search", {"query": "q", "filters": "DEEP"})]).replace('"DEEP"', DEEP).replace(
        "DEEP", DEEP)
    content, calls = make_tool_parser(name, TOOLS).parse(text)
    assert as_result(*collect(stream_tools(name, [text[:len(text) // 2], text[len(text) // 2:]]))) == \
        as_result(content, calls)


# Issue 23, finding 5a: a lone surrogate written as the escape ``\ud800`` in the
# call's JSON comes out as SGLang writes it (see parser_corpus.LONE_LONE_SURROGATE_ARGS).
@pytest.mark.parametrize("name", sorted(LONE_SURROGATE_ARGS))
def test_a_lone_surrogate_escape_in_the_call_is_written_as_sglang_writes_it(name):
    text = lone_surrogate_call(name)
    want = ("", [{"name": "search", "arguments": LONE_SURROGATE_ARGS[name]}])
    content, calls = make_tool_parser(name, TOOLS).parse(text)
    assert (content, [c.as_dict() for c in calls]) == want
    for pieces in (list(text), [text[:len(text) // 2], text[len(text) // 2:]]):
        content, calls = collect(stream_tools(name, pieces))
        assert (content, [c.as_dict() for c in calls]) == want
    assert json.loads(json.dumps(calls[0].arguments)) == LONE_SURROGATE_ARGS[name]  # an ASCII writer carries it


# The forward searches that replace SGLang's backtracking expressions find what
# those expressions find (the expressions as SGLang 0.5.23 writes them), with the
# text fed whole or in random chunks.
SOUP_ATOMS = st.sampled_from(list("{}<>|\\n :x1 ") + [
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "\\n", "<|tool_call_begin|>", "functions.f:0",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<tool_call>", "</tool_call>", "\n</tool_call>",
    "<tool_call>\n", '{"a": 1}'])
GLM_ARG_RE = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.S)
KIMI_BLOCK_RE = re.compile(r"<\|tool_call_begin\|>\s*(?P<id>[^\s<|]+)\s*<\|tool_call_argument_begin\|>"
                           r"\s*(?P<args>\{.*?\})\s*<\|tool_call_end\|>", re.S)
BLOCK_RE = {"hermes": re.compile(r"<tool_call>(.*?)</tool_call>", re.S),
            "qwen25": re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)}


def finder_spans(name, pieces):
    parser = make_tool_parser(name, TOOLS)
    finder, text, spans = parser.finder(), "", []
    for piece in pieces:
        text += piece
        spans += finder.step(text)
    return spans


@settings(max_examples=400, deadline=None)
@given(text=st.lists(SOUP_ATOMS, max_size=30).map("".join))
def test_glm45_pairs_are_sglangs_expression(text):
    assert make_tool_parser("glm45", TOOLS).pairs(text, 0, len(text)) == GLM_ARG_RE.findall(text)


@settings(max_examples=400, deadline=None)
@given(text=st.lists(SOUP_ATOMS, max_size=30).map("".join), seed=st.integers(0, 2 ** 32 - 1))
def test_block_finders_find_sglangs_blocks_however_the_text_is_chunked(text, seed):
    kimi = [(m.start(), m.start("args"), m.end("args"), m.end()) for m in KIMI_BLOCK_RE.finditer(text)]
    for pieces in ([text], list(text), random_pieces(text, random.Random(seed))):
        assert finder_spans("kimi_k2", pieces) == kimi
        for name, regex in BLOCK_RE.items():
            assert [s[1:3] for s in finder_spans(name, pieces)] == [m.span(1) for m in regex.finditer(text)]


def sglang_llama3_objects(action):
    """SGLang's loop: raw_decode the rest of the text, else retry from the next '{"name":'."""
    decoder, idx, objs = json.JSONDecoder(), 0, []
    while idx < len(action):
        try:
            obj, end = decoder.raw_decode(action[idx:])
        except ValueError:
            idx = action.find('{"name":', idx + 1)
            if idx == -1:
                break
            continue
        objs.append(obj)
        idx += end + 1
    return objs


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=3), cut=st.integers(0, 2000), number=st.booleans())
def test_llama3_reads_values_across_its_decode_windows(sizes, cut, number):
    """llama3 decodes from a window that doubles (64, 128, ... characters): values
    and errors on either side of each window's end read as json reads them whole."""
    calls = [{"name": "search", "parameters": {"query": "q" * n, "n": 10 ** n if number else n}} for n in sizes]
    action = ";".join(json.dumps(c) for c in calls)
    action = action[:cut] + action[cut + 1:] if cut < len(action) else action  # maybe one character lost
    objs = make_tool_parser("llama3", TOOLS)._objects("<|python_tag|>" + action, len("<|python_tag|>"))[0]
    assert objs == sglang_llama3_objects(action)
