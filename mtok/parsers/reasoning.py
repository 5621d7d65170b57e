"""Reasoning parsers: split a model's output into ``reasoning_content`` and ``content``.

Names and behaviour follow SGLang's ``srt/parser/reasoning_parser.py``:

* ``deepseek-r1`` -- reasoning until ``</think>`` even without an opening
  ``<think>`` (the model's template opens it); also ``step3``, ``gigachat35``.
* ``qwen3`` -- ``<think>...</think>``; with ``enable_thinking`` (the default)
  the template has opened the block, so the output is reasoning until
  ``</think>``; with ``chat_template_kwargs.enable_thinking: false`` only an
  explicit ``<think>`` starts reasoning.  A ``<tool_call>`` met before
  ``</think>`` ends the reasoning (Qwen3.5 sometimes skips the close).
  Also ``qwen3-thinking`` (always reasoning), ``interns1``, ``dots``, ``nanbeige``.
* ``glm45`` -- as ``qwen3``.  ``kimi`` -- ``◁think▷...◁/think▷``, only when opened.
* ``kimi_k2`` -- ``<think>...</think>``, reasoning unless ``thinking: false``;
  ``<|tool_calls_section_begin|>`` ends it.

Streaming works as for tool calls: ``stable(text)`` is what no continuation
changes, ``parse(text)`` the final split, and ``ReasoningStream`` emits the
difference, so streamed pieces always concatenate to the one-shot result.
With ``stream_reasoning=False`` the reasoning is sent in one piece when the
block closes (or the output ends).
"""

from mtok.parsers.base import partial_suffix


class ReasoningParser(object):
    """One SGLang reasoning format, configured for one request.

    mtok differs from SGLang in one place: without ``force`` only a start marker
    that opens the output starts reasoning.  SGLang's one-shot parse also treats a
    ``<think>`` met later as the start (and everything before it as reasoning),
    which would hold every streamed answer back until the end; its own streaming
    parser does not do it either.
    """

    def __init__(self, name, start, end, force=False, tool_start=None):
        self.name = name
        self.start = start
        self.end = end
        self.force = force
        self.tool_start = tool_start

    def _body(self, text):
        """(in reasoning, text without the leading start markers)."""
        in_reasoning = self.force or text.startswith(self.start)
        while in_reasoning and text.startswith(self.start):
            text = text[len(self.start):]
        return in_reasoning, text

    def parse(self, text):
        """(reasoning, content) of a finished output."""
        in_reasoning, body = self._body(text)
        if not in_reasoning:
            return "", text
        if self.end in body:
            reasoning, content = body.split(self.end, 1)
            return reasoning, content
        tool = body.find(self.tool_start) if self.tool_start else -1
        if tool != -1:
            return body[:tool], body[tool:]
        return body, ""

    def stable(self, text):
        """(reasoning prefix, content prefix) that no continuation changes."""
        if self.start.startswith(text):
            return "", ""  # empty, or maybe the start marker
        in_reasoning, body = self._body(text)
        if not in_reasoning:
            return "", text
        if self.start.startswith(body):
            return "", ""  # maybe one more start marker
        if self.end in body:
            return self.parse(text)
        tool = body.find(self.tool_start) if self.tool_start else -1
        if tool != -1:
            return body[:tool], ""  # a later end marker would still win
        hold = max(partial_suffix(body, self.end),
                   partial_suffix(body, self.tool_start) if self.tool_start else 0)
        return body[: len(body) - hold], ""

    def stream(self, stream_reasoning=True):
        return ReasoningStream(self, stream_reasoning)


class ReasoningStream(object):
    """Streaming state of one request: ``feed`` chunks, then ``finish`` once.

    Each call returns ``(reasoning_delta, content_delta)``.  With
    ``stream_reasoning=False`` the reasoning comes in one piece once its block
    has closed (or the output ended), as SGLang sends it.
    """

    def __init__(self, parser, stream_reasoning=True):
        self.parser = parser
        self.stream_reasoning = stream_reasoning
        self.text = ""
        self.reasoning = ""
        self.content = ""

    def feed(self, delta):
        self.text += delta
        reasoning, content = self.parser.stable(self.text)
        if not self.stream_reasoning and self.parser.end not in self.text:
            reasoning = self.reasoning
        return self._advance(reasoning, content)

    def finish(self):
        return self._advance(*self.parser.parse(self.text))

    def _advance(self, reasoning, content):
        if not (reasoning.startswith(self.reasoning) and content.startswith(self.content)):
            return "", ""  # cannot happen: stable() is a prefix of parse()
        r, c = reasoning[len(self.reasoning):], content[len(self.content):]
        self.reasoning, self.content = reasoning, content
        return r, c


def thinking_enabled(kwargs, key):
    """SGLang's default for ``reasoning_default`` formats: on unless the request's
    ``chat_template_kwargs[key]`` is ``False``."""
    return not kwargs or kwargs.get(key) is not False


def make_reasoning_parser(name, chat_template_kwargs=None):
    """The parser SGLang's ``--reasoning-parser NAME`` gives, set up for one request."""
    kwargs = chat_template_kwargs or {}
    spec = REASONING_FORMATS.get(name)
    if spec is None:
        raise KeyError(name)
    start, end, tool_start, default = spec
    force = default is True or (isinstance(default, str) and thinking_enabled(kwargs, default))
    return ReasoningParser(name, start, end, force=force, tool_start=tool_start)


# name -> (start, end, tool start, force: True / False / the chat_template_kwargs
# key whose False turns thinking off)
_QWEN3 = ("<think>", "</think>", "<tool_call>", "enable_thinking")
REASONING_FORMATS = {
    "deepseek-r1": ("<think>", "</think>", None, True),
    "step3": ("<think>", "</think>", None, True),
    "gigachat35": ("<think>", "</think>", None, True),
    "qwen3": _QWEN3,
    "qwen3-thinking": _QWEN3[:3] + (True,),
    "minimax": _QWEN3[:3] + (True,),
    "interns1": _QWEN3,
    "dots": _QWEN3,
    "nanbeige": _QWEN3,
    "glm45": _QWEN3,
    "kimi": ("\u25c1think\u25b7", "\u25c1/think\u25b7", None, False),
    "kimi_k2": ("<think>", "</think>", "<|tool_calls_section_begin|>", "thinking"),
}
