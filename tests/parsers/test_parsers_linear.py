"""Issue 23, finding 4: every tool-call and reasoning parser is linear in its
input, and a stream costs what the one-shot parse does whatever the chunking.

The measure is the parsers' own count of the characters their scans examine
(``Meter.scanned``), not a clock: at n and 8n characters the count must grow
8-fold, not 64-fold, and a stream fed one character at a time must count within
a small factor of the one-shot parse of the same text (and give its result).
Before the fix glm45 and qwen3_coder rescanned from every unclosed
``<tool_call>`` (330 KB took over a minute) and every stream re-parsed the
whole output on each chunk.
"""

import logging
import random

import pytest

from mtok.parsers import TOOL_PARSERS, collect, make_reasoning_parser, make_tool_parser
from mtok.parsers.reasoning import REASONING_FORMATS
from parser_corpus import RENDER, SEARCH, TOOLS, WEATHER

pytestmark = [pytest.mark.fast, pytest.mark.unit]
logging.getLogger("mtok.parsers").setLevel(logging.CRITICAL)

FORMATS = sorted({cls.name for cls in TOOL_PARSERS.values()})
ATOMS = ["<tool_call>", "</tool_call>", "<tool_call>\n", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", '{"name":',
         "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<|tool_calls_section_begin|>",
         "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "{", "}", "[", "]", '"', "\\", "<arg_key>",
         "</arg_key>", "<arg_value>", "<function=", "<parameter=", "[a(", "x=", ")]", "<|python_start|>", " ", "\n",
         "<think>", "</think>", "word"]
SOUP = "".join(random.Random(23).choice(ATOMS) for _ in range(400))


def one_call(name):
    return RENDER[name]([WEATHER])


def inputs(name, n):
    """Outputs of about ``n`` characters that were quadratic for some parser."""
    call = one_call(name)
    opened = call[: len(call) * 2 // 5]  # a call cut inside: its open tag never closes
    start = "Sure. " + call[:12]
    return {
        "unclosed tags": opened * (n // len(opened)),
        "many closed calls": RENDER[name]([WEATHER, SEARCH] * (n // len(RENDER[name]([WEATHER, SEARCH])))),
        "marker soup": SOUP * (n // len(SOUP)),
        "long text after an open tag": start + "word " * (n // 5),
        "text, then markers": "word " * (n // 10) + opened * (n // 2 // len(opened)),
    }


def one_shot_cost(parser, text):
    parser.scanned = 0
    result = parser.parse(text)
    return parser.scanned, result


def stream_cost(parser, pieces):
    parser.scanned = 0
    stream = parser.stream()
    deltas = []
    for piece in pieces:
        deltas += stream.feed(piece)
    return parser.scanned, collect(deltas + stream.finish())


@pytest.mark.parametrize("name", FORMATS)
def test_one_shot_parse_is_linear_in_the_output(name):
    small, large = inputs(name, 1 << 17), inputs(name, 1 << 20)
    for label in small:
        cost_small, _ = one_shot_cost(make_tool_parser(name, TOOLS), small[label])
        cost_large, _ = one_shot_cost(make_tool_parser(name, TOOLS), large[label])
        growth = len(large[label]) / len(small[label])
        assert cost_small > 0, "the parser counts what it scans"
        assert cost_large <= 1.2 * growth * cost_small + 4096, (label, cost_small, cost_large)
        assert cost_large <= 8 * len(large[label]), (label, cost_large, len(large[label]))


@pytest.mark.parametrize("name", FORMATS)
def test_a_stream_fed_one_character_at_a_time_costs_what_the_one_shot_does(name):
    for label, text in inputs(name, 1 << 15).items():
        once, want = one_shot_cost(make_tool_parser(name, TOOLS), text)
        streamed, got = stream_cost(make_tool_parser(name, TOOLS), list(text))
        assert got == want, label
        assert streamed <= 2.5 * once + 64, (label, once, streamed)
        fours, got = stream_cost(make_tool_parser(name, TOOLS), [text[i:i + 4] for i in range(0, len(text), 4)])
        assert got == want and fours <= 2.5 * once + 64, (label, once, fours)


REASONING_INPUTS = {
    "long reasoning": "<think>" + "step " * 6000,
    "many start markers": "<think>" * 6000 + "x",
    "unclosed end markers": "<think>" + "</thin" * 6000,
    "closed, then a long answer": "<think>a</think>" + "word " * 6000,
    "markers everywhere": SOUP * 40,
    "kimi's markers": "\u25c1think\u25b7" + "\u25c1/thin" * 6000,
}


@pytest.mark.parametrize("name", sorted(REASONING_FORMATS))
def test_reasoning_parsers_are_linear_and_stream_at_the_one_shot_cost(name):
    counted = 0
    for label, text in REASONING_INPUTS.items():
        costs = []
        for size in (len(text) // 8, len(text)):
            parser = make_reasoning_parser(name)
            parser.scanned = 0
            parser.parse(text[:size])
            costs.append(parser.scanned)
        counted += costs[0]
        assert costs[1] <= 1.2 * 8 * costs[0] + 4096, (label, costs)
        parser = make_reasoning_parser(name)
        want = parser.parse(text)
        once, parser.scanned = parser.scanned, 0
        for flag in (True, False):
            stream = parser.stream(flag)
            pieces = [stream.feed(ch) for ch in text] + [stream.finish()]
            assert ("".join(r for r, _ in pieces), "".join(c for _, c in pieces)) == want, label
        assert parser.scanned <= 2 * 2.5 * once + 64 + len(text) // 4, (label, once, parser.scanned)
    assert counted > 0, "the parser counts what it scans"
