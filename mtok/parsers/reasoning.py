"""Reasoning parsers: split a model's output into ``reasoning_content`` and ``content``.

Names and behaviour follow SGLang's ``srt/parser/reasoning_parser.py``:

* ``deepseek-r1`` -- reasoning until ``</think>`` even without an opening
  ``<think>`` (the model's template opens it); also ``step3``, ``gigachat35``.
* ``qwen3`` -- ``<think>...</think>``; with ``enable_thinking`` (the chat
  path's default; ``/separate_reasoning``, where no template ran, defaults to
  off as SGLang's route does) the template has opened the block, so the output is reasoning until
  ``</think>``; with ``chat_template_kwargs.enable_thinking: false`` only an
  explicit ``<think>`` starts reasoning.  A ``<tool_call>`` met before
  ``</think>`` ends the reasoning (Qwen3.5 sometimes skips the close).
  Also ``qwen3-thinking`` (always reasoning), ``interns1``, ``dots``, ``nanbeige``.
* ``glm45`` -- as ``qwen3``.  ``kimi`` -- ``◁think▷...◁/think▷``, only when opened.
* ``kimi_k2`` -- ``<think>...</think>``, reasoning unless ``thinking: false``;
  ``<|tool_calls_section_begin|>`` ends it.

Streaming works as for tool calls: ``ReasoningStream`` keeps its place in the
text (where the next end marker may begin) and sends what no continuation
changes, so streamed pieces always concatenate to the one-shot result, and each
character is searched once however the text is chunked (``Meter``).
With ``stream_reasoning=False`` the reasoning is sent in one piece when the
block closes (or the output ends).
"""

from mtok.parsers.base import Cursor, Meter


class ReasoningParser(Meter):
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

    def body_at(self, text, at=0):
        """Where the reasoning begins after the leading start markers from ``at``."""
        begin = at
        while text.startswith(self.start, at):
            at += len(self.start)
        self.read(at - begin + 1)
        return at

    def parse(self, text):
        """(reasoning, content) of a finished output."""
        if not (self.force or text.startswith(self.start)):
            return "", text
        body = self.body_at(text)
        end = self.find(text, self.end, body)
        if end != -1:
            return text[body:end], text[end + len(self.end):]
        tool = self.find(text, self.tool_start, body) if self.tool_start else -1
        if tool != -1:
            return text[body:tool], text[tool:]
        return text[body:], ""

    def stream(self, stream_reasoning=True):
        return ReasoningStream(self, stream_reasoning)


LEAD, REASONING, CONTENT = "lead", "reasoning", "content"


class ReasoningStream(object):
    """Streaming state of one request: ``feed`` chunks, then ``finish`` once.

    Each call returns ``(reasoning_delta, content_delta)``.  The output opens in
    ``LEAD`` (is it reasoning? more start markers?), reads ``REASONING`` until
    the end marker, then passes ``CONTENT`` through.  With
    ``stream_reasoning=False`` the reasoning comes in one piece once its block
    has closed (or the output ended), as SGLang sends it.
    """

    def __init__(self, parser, stream_reasoning=True):
        self.parser = parser
        self.stream_reasoning = stream_reasoning
        self.text = ""
        self.phase = LEAD
        self.body = self.sent = 0  # reasoning is text[body:], sent up to ``sent``
        self.ends = Cursor(parser.end)
        self.either = 0  # before the tool marker is met, both are searched at once from here
        self.end_at = self.tool_at = -1
        self.content_sent = 0  # content is text[end of the end marker:], sent up to here

    def feed(self, delta):
        text, self.text = self.text, ""
        text += delta  # in place: this local holds the only reference
        self.text = text
        if self.phase == LEAD:
            self._lead(text)
        if self.phase == REASONING:
            self._reason(text)
        reasoning = self._reasoning_to(self.limit(text)) if self.stream_reasoning or self.phase == CONTENT else ""
        return reasoning, self._content(text)

    def _lead(self, text):
        p = self.parser
        if p.start.startswith(text):
            return  # empty, or maybe the start marker
        if not (p.force or text.startswith(p.start)):
            self.phase = CONTENT
            return
        self.body = p.body_at(text, self.body)
        if not p.start.startswith(text[self.body:self.body + len(p.start)]):
            self.phase, self.sent = REASONING, self.body
            self.ends.reset(self.body)
            self.either = self.body

    def _reason(self, text):
        p = self.parser
        if p.tool_start and self.tool_at == -1:
            found, self.either = p.seek(text, (p.end, p.tool_start), self.either)
            if found == -1:
                return
            if text.startswith(p.end, found):
                return self._close(found)
            self.tool_at = found  # a later end marker would still win
            self.ends.reset(found + len(p.tool_start))
        end = self.ends.find(p, text)
        if end != -1:
            self._close(end)

    def _close(self, end):
        self.phase, self.end_at = CONTENT, end
        self.content_sent = end + len(self.parser.end)

    def limit(self, text):
        """The end of the reasoning that no continuation changes."""
        if self.phase == CONTENT:
            return self.end_at
        if self.phase == LEAD:
            return self.sent
        if self.tool_at != -1:
            return self.tool_at
        return self.either if self.parser.tool_start else self.ends.at

    def _reasoning_to(self, end):
        piece = self.text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return piece

    def _content(self, text):
        if self.phase != CONTENT or self.content_sent >= len(text):
            return ""
        piece, self.content_sent = text[self.content_sent:], len(text)
        return piece

    def finish(self):
        text = self.text
        if self.phase == LEAD:
            self.phase = CONTENT
            reasoning, content = self.parser.parse(text)
            self.content_sent = len(text)
            return reasoning, content
        if self.phase == REASONING:
            cut = self.tool_at if self.tool_at != -1 else len(text)
            self.phase, self.end_at, self.content_sent = CONTENT, cut, cut
        return self._reasoning_to(self.end_at), self._content(text)


def thinking_enabled(kwargs, key, default=True):
    """Whether a ``reasoning_default`` format's block is open: the request's
    ``chat_template_kwargs[key]`` when set (anything but ``False`` is on), else
    ``default``."""
    value = kwargs.get(key)
    return default if value is None else value is not False


def make_reasoning_parser(name, chat_template_kwargs=None, template_opens=True):
    """The parser SGLang's ``--reasoning-parser NAME`` gives, set up for one request.

    ``template_opens`` is what a hybrid-thinking format assumes when the request
    does not say: True on the chat path (the template opened the block, as
    SGLang's chat serving assumes), False where no template ran
    (``/separate_reasoning``: SGLang builds its detector with its own default,
    not forced)."""
    kwargs = chat_template_kwargs or {}
    spec = REASONING_FORMATS.get(name)
    if spec is None:
        raise KeyError(name)
    start, end, tool_start, default = spec
    force = default is True or (isinstance(default, str) and thinking_enabled(kwargs, default, template_opens))
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
