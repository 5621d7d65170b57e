"""Tool-call and reasoning parsers by SGLang's names (``--tool-call-parser``,
``--reasoning-parser``).

A pure package: the standard library only, nothing of the server.  Per request,
``make_tool_parser(name, tools)`` gives an object with a one-shot
``parse(text) -> (content, [Call])`` and a ``stream()`` whose ``feed``/``finish``
return deltas that concatenate to exactly that result; ``make_reasoning_parser``
does the same for ``(reasoning_content, content)``.  ``base`` holds the shared
machinery, one module per family of formats.
"""

from mtok.parsers.base import Call, ToolParser, collect  # noqa: F401
from mtok.parsers.json_calls import (
    DeepSeekV3Parser, DeepSeekV31Parser, HermesParser, KimiK2Parser, Llama3Parser,
    MistralParser, Qwen25Parser,
)
from mtok.parsers.reasoning import REASONING_FORMATS, make_reasoning_parser  # noqa: F401

# SGLang's --tool-call-parser names that mtok has (aliases as in SGLang).
TOOL_PARSERS = {
    "hermes": HermesParser,
    "qwen25": Qwen25Parser,
    "qwen": Qwen25Parser,
    "llama3": Llama3Parser,
    "mistral": MistralParser,
    "deepseekv3": DeepSeekV3Parser,
    "deepseekv31": DeepSeekV31Parser,
    "kimi_k2": KimiK2Parser,
}


def make_tool_parser(name, tools=None):
    """The parser for one request; KeyError for a name mtok does not have."""
    return TOOL_PARSERS[name](tools)


def tool_parser_names():
    return sorted(TOOL_PARSERS)


def reasoning_parser_names():
    return sorted(REASONING_FORMATS)
