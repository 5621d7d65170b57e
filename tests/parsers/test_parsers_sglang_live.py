"""mtok's parsers against SGLang's own, live, on the shared corpus plus random
chunkings: .ci/run installs SGLang (.ci/requirements-real.txt); elsewhere
these skip (``skip_real``) and test_parsers.py compares with the recorded
parser_fixtures.json.

Only the one-shot results are compared: SGLang's streaming parsers disagree with
its one-shot ones on several cases (see ``sglang_stream_by_char`` in the
fixtures), and mtok streams exactly its one-shot answer.
"""

import logging
import os
import sys

import pytest

from mtok.parsers import make_reasoning_parser, make_tool_parser
from parser_corpus import REASONING_CASES, RENDER, TOOL_CASES, TOOLS, lone_surrogate_call
from support import ROOT, import_real

pytestmark = [pytest.mark.unit, pytest.mark.real]

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_parser_fixtures as gen  # noqa: E402  (SGLang's side: it imports sglang when called)


@pytest.fixture(autouse=True, scope="module")
def sglang_parsers():
    import_real("sglang.srt.function_call.function_call_parser",
                "SGLang is not installed; test_parsers.py compares with recorded results")


logging.getLogger("sglang").setLevel(logging.CRITICAL)
logging.getLogger("mtok.parsers").setLevel(logging.CRITICAL)

EXTRA = [
    ("hermes", "json list in one block", '<tool_call>[{"name": "search", "arguments": {"query": "a"}}, '
                                         '{"name": "get_weather", "parameters": {"city": "b"}}]</tool_call>'),
    ("hermes", "open block, complete json", 'x <tool_call>{"name": "search", "arguments": {}}'),
    ("qwen25", "no newline after tag", '<tool_call>{"name": "search", "arguments": {}}</tool_call>'),
    ("llama3", "leading space then json", ' {"name": "search", "parameters": {}}'),
    ("llama3", "garbage then object", '<|python_tag|>oops {"name": "search", "parameters": {"q": 1}}'),
    ("mistral", "array then text", '[TOOL_CALLS] [{"name": "search", "arguments": {"a": "]"}}] after'),
    ("kimi_k2", "bare counter id", '<|tool_calls_section_begin|><|tool_call_begin|>3<|tool_call_argument_begin|>'
                                   '{"query": "q"}<|tool_call_end|>'),
    ("deepseekv31", "name with spaces", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜> search <｜tool▁sep｜>{}<｜tool▁call▁end｜>"),
] + [(name, "lone surrogate escape", lone_surrogate_call(name)) for name in sorted(RENDER)]


@pytest.mark.fast
@pytest.mark.parametrize("name,label,text", TOOL_CASES + EXTRA,
                         ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "")
def test_tool_parser_live(name, label, text):
    want, _ = gen.sglang_tool_result(name, text)
    content, calls = make_tool_parser(name, TOOLS).parse(text)
    assert {"content": content, "calls": [c.as_dict() for c in calls]} == want


@pytest.mark.fast
@pytest.mark.parametrize("name,label,text,kwargs", REASONING_CASES,
                         ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "")
def test_reasoning_parser_live(name, label, text, kwargs):
    reasoning, content = make_reasoning_parser(name, kwargs).parse(text)
    assert {"reasoning": reasoning, "content": content} == gen.sglang_reasoning_result(name, text, kwargs)
