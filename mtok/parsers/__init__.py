"""Tool-call and reasoning parsers by SGLang's names (``--tool-call-parser``,
``--reasoning-parser``).

A pure package: the standard library only, nothing of the server.  Per request,
``make_tool_parser(name, tools)`` gives an object with a one-shot
``parse(text) -> (content, [Call])`` and a ``stream()`` whose ``feed``/``finish``
return deltas that concatenate to exactly that result; ``make_reasoning_parser``
does the same for ``(reasoning_content, content)``.  ``base`` holds the shared
machinery, one module per family of formats.
"""

from mtok.parsers.base import Call, NoTools, ToolParser, collect  # noqa: F401
from mtok.parsers.bare_json import Llama3Parser, MistralParser
from mtok.parsers.json_calls import DeepSeekV3Parser, DeepSeekV31Parser, HermesParser, KimiK2Parser, Qwen25Parser
from mtok.parsers.pythonic import PythonicParser
from mtok.parsers.xml_calls import Glm45Parser, Qwen3CoderParser
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
    "glm45": Glm45Parser,
    "glm": Glm45Parser,
    "qwen3_coder": Qwen3CoderParser,
    "pythonic": PythonicParser,
}


def make_tool_parser(name, tools=None):
    """The parser for one request; KeyError for a name mtok does not have.

    A request without ``tools`` gets no parsing at all, as in SGLang.
    """
    cls = TOOL_PARSERS[name]
    return cls(tools) if tools else NoTools()


def tool_parser_names():
    return sorted(TOOL_PARSERS)


def reasoning_parser_names():
    return sorted(REASONING_FORMATS)


def per_model(values, model_names, known, flag):
    """model name -> parser name from ``--FLAG NAME`` (every model) and
    ``--FLAG MODEL=NAME`` (one model; repeatable, wins over the plain form).

    Raises ValueError naming the flag for an unknown parser or model.
    """
    out, default = {}, None
    for value in values or ():
        model, sep, name = value.rpartition("=")
        if name not in known:
            raise ValueError("%s: unknown parser %r; mtok has %s" % (flag, name, ", ".join(sorted(known))))
        if not sep:
            default = name
        elif model not in model_names:
            raise ValueError("%s: no model named %r (models: %s)" % (flag, model, ", ".join(model_names)))
        else:
            out[model] = name
    return {m: out.get(m, default) for m in model_names if out.get(m, default)}
