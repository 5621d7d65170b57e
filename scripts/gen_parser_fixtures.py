"""Record SGLang's parser results for mtok's differential tests.

Runs SGLang's own tool-call and reasoning parsers (``pip install sglang``;
written against 0.5.23) over a corpus of model outputs per format and writes
``tests/parser_fixtures.json``: for each case the input text and SGLang's
one-shot result, plus what SGLang's streaming parser gives when the same text
arrives one character at a time (recorded to show where SGLang's two paths
disagree; mtok follows the one-shot result).  CI has no SGLang, so the tests
compare mtok with this file; ``tests/parsers/test_parsers_sglang_live.py`` compares
live when SGLang is importable.

    python scripts/gen_parser_fixtures.py            # rewrite the fixtures
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.parser_corpus import REASONING_CASES, TOOL_CASES, TOOLS  # noqa: E402


def sglang_tools():
    from sglang.srt.entrypoints.openai.protocol import Tool
    return [Tool(**t) for t in TOOLS]


def sglang_tool_result(name, text):
    """SGLang's one-shot and char-by-char streamed results for one output."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    tools = sglang_tools()
    content, calls = FunctionCallParser(tools, name).parse_non_stream(text)
    oneshot = {"content": content,
               "calls": [{"name": c.name, "arguments": c.parameters} for c in calls]}
    parser = FunctionCallParser(tools, name)
    normal, streamed = "", {}
    for ch in text:
        piece, items = parser.parse_stream_chunk(ch)
        normal += piece or ""
        for item in items:
            entry = streamed.setdefault(item.tool_index, {"name": None, "arguments": ""})
            entry["name"] = item.name or entry["name"]
            entry["arguments"] += item.parameters or ""
    stream = {"content": normal, "calls": [streamed[k] for k in sorted(streamed)]}
    return oneshot, stream


def sglang_reasoning_result(name, text, kwargs):
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.parser.reasoning_parser import ReasoningParser
    from mtok.parsers.reasoning import make_reasoning_parser
    force = make_reasoning_parser(name, kwargs).force  # serving_chat's choice, see reasoning.py
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                    chat_template_kwargs=kwargs or None)
    parser = ReasoningParser(name, stream_reasoning=True, force_reasoning=force, request=request)
    reasoning, content = parser.parse_non_stream(text)
    return {"reasoning": reasoning or "", "content": content or ""}


def main():
    out = {"sglang_version": __import__("sglang").__version__, "tools": TOOLS,
           "tool_cases": [], "reasoning_cases": []}
    for parser, label, text in TOOL_CASES:
        oneshot, stream = sglang_tool_result(parser, text)
        out["tool_cases"].append({"parser": parser, "case": label, "text": text,
                                  "sglang": oneshot, "sglang_stream_by_char": stream})
    for parser, label, text, kwargs in REASONING_CASES:
        out["reasoning_cases"].append({"parser": parser, "case": label, "text": text,
                                       "chat_template_kwargs": kwargs,
                                       "sglang": sglang_reasoning_result(parser, text, kwargs)})
    path = os.path.join(os.path.dirname(HERE), "tests", "parser_fixtures.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %d tool and %d reasoning cases to %s"
          % (len(out["tool_cases"]), len(out["reasoning_cases"]), path))


if __name__ == "__main__":
    main()
