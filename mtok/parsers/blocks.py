"""The block formats' common reader: content, then call blocks ``open ... close``
(hermes, qwen25, deepseekv3/v31, kimi_k2, glm45, qwen3_coder).

A format states its markers and how one closed block reads; ``BlockStream``
does the rest, for one-shot and streamed parsing alike, in one pass over the
text: the content is the text before ``start``; a block is an ``open`` marker
and the first ``close`` after it (what SGLang's ``open(.*?)close`` finds), read
once when it closes.  The search for a close never restarts from each open
marker: if the first open block has no close, no later one has either, so a
text of a million unclosed tags costs one scan, not a million.

``all_or_nothing`` follows the SGLang detectors for which one unreadable block
turns the whole output into content (no calls): such a format can settle no
call before the output ends, so it streams its calls at the end; the others
skip just that block and stream each call as its block closes.
"""

import logging

from mtok.parsers.base import UNREADABLE, Cursor, HeadStream, ToolParser

logger = logging.getLogger(__name__)


class BlockToolParser(ToolParser):
    """A format of ``start``, then blocks; subclasses give the markers and ``read_block``."""

    start = ""  # ends the content; a call is only read when it occurs
    open = close = ""  # a block: ``open``, its body, the first ``close`` after the body's start
    strip_content = True
    all_or_nothing = True

    def read_block(self, text, at, body, close_at):
        """Calls in the block ``text[at:]`` whose body is ``text[body:close_at]``
        (``[]`` when dropped); raise one of UNREADABLE when it cannot be read."""
        raise NotImplementedError

    def tail_calls(self, stream, text):
        """Calls that only the end of the output settles (a format's last open block)."""
        return []

    def finder(self):
        return BlockFinder(self)

    def stream(self):
        return BlockStream(self)


class BlockFinder(object):
    """The blocks of a growing text, each character searched once.

    ``step(text)`` gives the blocks that closed since the last call, as
    ``(open at, body at, close at, end)``; while a block is open, ``open_at``
    and ``body_at`` say where (``body_at`` is -1 when none is).
    """

    def __init__(self, parser):
        self.parser = parser
        self.opens = Cursor(parser.open)
        self.closes = Cursor(parser.close)
        self.open_at = self.body_at = -1

    def step(self, text):
        spans = []
        while True:
            if self.body_at == -1 and not self.find_open(text):
                return spans
            end = self.find_close(text)
            if end is None:
                return spans
            spans.append((self.open_at, self.body_at, end[0], end[1]))
            self.open_at = self.body_at = -1
            self.opens.reset(end[1])

    def find_open(self, text):
        """Look for the next open marker; True when a block's body has begun."""
        at = self.opens.find(self.parser, text)
        if at == -1:
            return False
        self.open_at, self.body_at = at, at + len(self.parser.open)
        self.closes.reset(self.body_at)
        return True

    def find_close(self, text):
        """``(close at, block end)`` of the open block, or None while it is open."""
        at = self.closes.find(self.parser, text)
        return None if at == -1 else (at, at + len(self.parser.close))


class BlockStream(HeadStream):
    """One output of a block format, read as it arrives (see the module docstring)."""

    def __init__(self, parser):
        HeadStream.__init__(self, parser, parser.start)
        self.strip = parser.strip_content
        self.blocks = parser.finder()
        self.calls = []
        self.closed = 0  # blocks closed so far
        self.bad = None  # the first unreadable block's error, for all_or_nothing

    def step(self, text):
        out = self.head(text)
        for at, body, close_at, _ in self.blocks.step(text):
            self.closed += 1
            self.calls.extend(self.read(text, at, body, close_at))
        if self.marker_at != -1 and not self.parser.all_or_nothing:
            if self.strip:
                out += self.content_to(self.stripped()[1], lead=self.stripped()[0])
            out += self.calls_out(self.calls)
        return out

    def read(self, text, at, body, close_at):
        try:
            return self.parser.read_block(text, at, body, close_at)
        except UNREADABLE as exc:
            if self.parser.all_or_nothing:
                self.bad = self.bad or exc
            else:
                logger.warning("%s: unreadable tool call (%s); dropped as SGLang does", self.parser.name, exc)
            return []

    def final(self, text):
        if self.marker_at == -1:
            return self.complete((0, len(text)), [])
        calls = self.calls + self.parser.tail_calls(self, text)
        if self.bad is not None:
            logger.warning("%s: unreadable tool call (%s); output kept as content", self.parser.name, self.bad)
            return self.complete((0, len(text)), [])
        return self.complete(self.stripped() if self.strip else (0, self.marker_at), calls)
