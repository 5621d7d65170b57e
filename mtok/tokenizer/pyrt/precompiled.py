"""SentencePiece's ``precompiled_charsmap`` normalizer, as ``tokenizers`` applies it.

The charsmap is ``[u32 trie size][trie: u32 units][normalized strings, each ending in
NUL]``.  The trie is a Darts double array over UTF-8 bytes whose leaves point into the
strings blob.  ``tokenizers`` (spm_precompiled) looks up, for each extended grapheme
cluster shorter than 6 bytes, the *shortest* key that is a prefix of the cluster and
replaces the whole cluster with it (so the rest of the cluster is dropped); clusters
without such a key, and longer ones, are looked up one character at a time.

Python has no grapheme segmentation, so :func:`cluster_regex` writes the UAX #29 rules
as a regex over ``unicodedata`` classes plus the few property lists ``unicodedata``
lacks (Prepend, Other_Grapheme_Extend, Extended_Pictographic).  The segmentation only
matters where a cluster is shorter than 6 bytes, which keeps the approximation safe.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import struct
import sys
from array import array
from typing import Dict, List, Optional, Pattern

from .. import TokenizerError
from . import unicode as U

# -- the double array ---------------------------------------------------------------


class CharsMap:
    """The parsed charsmap: ``transform(chunk)`` is spm_precompiled's lookup."""

    def __init__(self, blob: bytes):
        if len(blob) < 4:
            raise TokenizerError("Precompiled: cannot parse precompiled_charsmap (too short)")
        (trie_size,) = struct.unpack_from("<I", blob, 0)
        if trie_size % 4 or 4 + trie_size > len(blob):
            raise TokenizerError("Precompiled: cannot parse precompiled_charsmap (bad trie size)")
        units = array("I")
        if units.itemsize != 4:  # pragma: no cover - no such CPython platform today
            units = array("L")
        units.frombytes(blob[4 : 4 + trie_size])
        if sys.byteorder == "big":  # pragma: no cover
            units.byteswap()
        self.units = units
        self.strings = blob[4 + trie_size :]
        try:
            self.strings.decode("utf-8")
        except UnicodeDecodeError:
            raise TokenizerError("Precompiled: normalized strings are not UTF-8") from None

    def transform(self, chunk: str) -> Optional[str]:
        """The replacement for the shortest key that prefixes ``chunk``, or None."""
        units = self.units
        n = len(units)
        if not n:
            return None
        unit = units[0]
        pos = _offset(unit)
        for byte in chunk.encode("utf-8"):
            if byte == 0:
                break
            pos ^= byte
            if pos >= n:
                return None
            unit = units[pos]
            if (unit & 0x800000FF) != byte:
                return None
            pos ^= _offset(unit)
            if (unit >> 8) & 1:
                start = units[pos] & 0x7FFFFFFF
                end = self.strings.find(b"\0", start)
                return self.strings[start : end if end >= 0 else len(self.strings)].decode("utf-8")
        return None


def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


# -- grapheme clusters ----------------------------------------------------------------

_PREPEND = (
    (0x0600, 0x0605), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2),
    (0x0D4E, 0x0D4E), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x111C2, 0x111C3), (0x1193F, 0x1193F),
    (0x11941, 0x11941), (0x11A3A, 0x11A3A), (0x11A84, 0x11A89), (0x11D46, 0x11D46), (0x11F02, 0x11F02),
)
# Extend beyond Mn/Me: Other_Grapheme_Extend, emoji modifiers and tag characters.
_EXTEND_EXTRA = (
    (0x09BE, 0x09BE), (0x09D7, 0x09D7), (0x0B3E, 0x0B3E), (0x0B57, 0x0B57), (0x0BBE, 0x0BBE),
    (0x0BD7, 0x0BD7), (0x0CC2, 0x0CC2), (0x0CD5, 0x0CD6), (0x0D3E, 0x0D3E), (0x0D57, 0x0D57),
    (0x0DCF, 0x0DCF), (0x0DDF, 0x0DDF), (0x1B35, 0x1B35), (0x200C, 0x200C), (0x302E, 0x302F),
    (0xFF9E, 0xFF9F), (0x1133E, 0x1133E), (0x11357, 0x11357), (0x114B0, 0x114B0), (0x114BD, 0x114BD),
    (0x115AF, 0x115AF), (0x11930, 0x11930), (0x1D165, 0x1D165), (0x1D16E, 0x1D172),
    (0x1F3FB, 0x1F3FF), (0xE0020, 0xE007F),
)
# Spacing marks (Mc) that do not extend a cluster, and two letters that do.
_NOT_SPACING = (
    (0x102B, 0x102C), (0x1038, 0x1038), (0x1062, 0x1064), (0x1067, 0x106D), (0x1083, 0x1083),
    (0x1087, 0x108C), (0x108F, 0x108F), (0x109A, 0x109C), (0x1A61, 0x1A61), (0x1A63, 0x1A64),
    (0xAA7B, 0xAA7B), (0xAA7D, 0xAA7D), (0x11720, 0x11721),
)
_SPACING_EXTRA = ((0x0E33, 0x0E33), (0x0EB3, 0x0EB3))
# Unassigned but Default_Ignorable code points, which count as controls.
_IGNORABLE_UNASSIGNED = (
    (0x2065, 0x2065), (0xFFF0, 0xFFF8), (0xE0000, 0xE0000), (0xE0002, 0xE001F),
    (0xE0080, 0xE00FF), (0xE01F0, 0xE0FFF),
)
# Extended_Pictographic (emoji-data), which joins through ZWJ.
_PICTOGRAPHIC = (
    (0x00A9, 0x00A9), (0x00AE, 0x00AE), (0x203C, 0x203C), (0x2049, 0x2049), (0x2122, 0x2122),
    (0x2139, 0x2139), (0x2194, 0x2199), (0x21A9, 0x21AA), (0x231A, 0x231B), (0x2328, 0x2328),
    (0x2388, 0x2388), (0x23CF, 0x23CF), (0x23E9, 0x23F3), (0x23F8, 0x23FA), (0x24C2, 0x24C2),
    (0x25AA, 0x25AB), (0x25B6, 0x25B6), (0x25C0, 0x25C0), (0x25FB, 0x25FE), (0x2600, 0x2605),
    (0x2607, 0x2612), (0x2614, 0x2685), (0x2690, 0x2705), (0x2708, 0x2712), (0x2714, 0x2714),
    (0x2716, 0x2716), (0x271D, 0x271D), (0x2721, 0x2721), (0x2728, 0x2728), (0x2733, 0x2734),
    (0x2744, 0x2744), (0x2747, 0x2747), (0x274C, 0x274C), (0x274E, 0x274E), (0x2753, 0x2755),
    (0x2757, 0x2757), (0x2763, 0x2767), (0x2795, 0x2797), (0x27A1, 0x27A1), (0x27B0, 0x27B0),
    (0x27BF, 0x27BF), (0x2934, 0x2935), (0x2B05, 0x2B07), (0x2B1B, 0x2B1C), (0x2B50, 0x2B50),
    (0x2B55, 0x2B55), (0x3030, 0x3030), (0x303D, 0x303D), (0x3297, 0x3297), (0x3299, 0x3299),
    (0x1F000, 0x1F0FF), (0x1F10D, 0x1F10F), (0x1F12F, 0x1F12F), (0x1F16C, 0x1F171),
    (0x1F17E, 0x1F17F), (0x1F18E, 0x1F18E), (0x1F191, 0x1F19A), (0x1F1AD, 0x1F1E5),
    (0x1F201, 0x1F20F), (0x1F21A, 0x1F21A), (0x1F22F, 0x1F22F), (0x1F232, 0x1F23A),
    (0x1F23C, 0x1F23F), (0x1F249, 0x1F3FA), (0x1F400, 0x1F53D), (0x1F546, 0x1F64F),
    (0x1F680, 0x1F6FF), (0x1F774, 0x1F77F), (0x1F7D5, 0x1F7FF), (0x1F80C, 0x1F80F),
    (0x1F848, 0x1F84F), (0x1F85A, 0x1F85F), (0x1F888, 0x1F88F), (0x1F8AE, 0x1F8FF),
    (0x1F90C, 0x1F93A), (0x1F93C, 0x1F945), (0x1F947, 0x1FAFF), (0x1FC00, 0x1FFFD),
)


@functools.lru_cache(maxsize=None)
def _break_classes() -> Dict[str, U.CharSet]:
    """Grapheme_Cluster_Break values as code point sets."""
    cr_lf = U.CharSet.of(0x0D, 0x0A)
    prepend = U.CharSet(_PREPEND)
    extend = U.categories("Mn", "Me") | U.CharSet(_EXTEND_EXTRA)
    zwj = U.CharSet.of(0x200D)
    spacing = (U.categories("Mc") - extend - U.CharSet(_NOT_SPACING)) | U.CharSet(_SPACING_EXTRA)
    control = (
        U.categories("Cc", "Zl", "Zp", "Cs", "Cf") | U.CharSet(_IGNORABLE_UNASSIGNED)
    ) - cr_lf - extend - zwj - prepend
    syllables = U.CharSet([(0xAC00, 0xD7A3)])
    lv = U.CharSet.of(*range(0xAC00, 0xD7A4, 28))
    return {
        "control": control | cr_lf,
        "prepend": prepend,
        "post": extend | zwj | spacing,
        "extend": extend,
        "zwj": zwj,
        "L": U.CharSet([(0x1100, 0x115F), (0xA960, 0xA97C)]),
        "V": U.CharSet([(0x1160, 0x11A7), (0xD7B0, 0xD7C6)]),
        "T": U.CharSet([(0x11A8, 0x11FF), (0xD7CB, 0xD7FB)]),
        "LV": lv,
        "LVT": syllables - lv,
        "RI": U.CharSet([(0x1F1E6, 0x1F1FF)]),
        "pict": U.CharSet(_PICTOGRAPHIC),
    }


@functools.lru_cache(maxsize=None)
def cluster_regex() -> Pattern[str]:
    """Matches, at a cluster boundary, one extended grapheme cluster of two or more characters.

    ``finditer`` over a text then yields exactly its multi-character clusters: the
    lookahead fails wherever the next character starts a cluster of its own, so the
    search only ever stops on a boundary.
    """
    c = {name: cset.regex() for name, cset in _break_classes().items()}
    k = _break_classes()
    c["noncontrol"] = (~k["control"]).regex()
    c["LV_V"] = (k["LV"] | k["V"]).regex()
    c["V_T"] = (k["V"] | k["T"]).regex()
    c["LVT_T"] = (k["LVT"] | k["T"]).regex()
    c["after_L"] = (k["L"] | k["V"] | k["LV"] | k["LVT"]).regex()
    hangul = "{L}*(?:{V}+|{LV}{V}*|{LVT}){T}*|{L}+|{T}+"
    pictographic = "{pict}(?:{extend}*{zwj}{pict})*"
    core = "(?:" + hangul + "|{RI}{RI}|" + pictographic + "|{noncontrol})"
    cluster = "\\r\\n|{prepend}*" + core + "{post}*"
    joins = (
        "\\r\\n|{prepend}{noncontrol}|{noncontrol}{post}|{L}{after_L}|{LV_V}{V_T}|{LVT_T}{T}|{RI}{RI}"
    )
    return re.compile(("(?=" + joins + ")(?:" + cluster + ")").format(**c))


# -- the normalizer -----------------------------------------------------------------

_CACHE_LIMIT = 1 << 16


class Precompiled:
    """The ``Precompiled`` normalizer."""

    def __init__(self, charsmap: Optional[CharsMap]):
        self.charsmap = charsmap
        if charsmap is not None:
            # The grapheme tables take ~0.1 s to build: pay it at load, as tokenizers
            # does its setup, not in the first request that holds a non-ASCII character.
            _join_hint()
            cluster_regex()
        self._chars: Dict[int, str] = {}  # str.translate table for single characters
        self._seen: set = set()
        self._clusters: Dict[str, str] = {}

    @classmethod
    def from_json(cls, d: dict) -> "Precompiled":
        encoded = d.get("precompiled_charsmap")
        if not encoded:  # an empty charsmap maps nothing
            return cls(None)
        try:
            blob = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise TokenizerError("Precompiled: precompiled_charsmap is not base64") from None
        return cls(CharsMap(blob))

    def normalize(self, s: str) -> str:
        if self.charsmap is None or not s:
            return s
        self._learn_chars(s)
        if _join_hint().search(s) is None:
            return s.translate(self._chars)
        parts = []
        prev = 0
        for m in cluster_regex().finditer(s):
            start, end = m.span()
            if start > prev:
                parts.append(s[prev:start].translate(self._chars))
            parts.append(self._cluster(m.group()))
            prev = end
        parts.append(s[prev:].translate(self._chars))
        return "".join(parts)

    def lead(self, s: str, z: int) -> int:
        """See :meth:`.normalizers.Normalizer.lead`.

        tokenizers rebuilds the alignments from a list of ``(char, change)`` edits, where a
        cluster mapped to "" shortens the *previous* edit; with no previous edit nothing
        records the deletion, and the following characters take the alignments of the
        ones before them.  This replays that list up to the first character off the origin.
        """
        if self.charsmap is None or not s:
            return z if s else 0
        self._learn_chars(s)
        changes: List[int] = []  # one per output character
        replay = _Replay(z)
        for cluster in _clusters(s):
            out = None
            if len(cluster) > 1 and len(cluster.encode("utf-8")) < 6:
                out = self.charsmap.transform(cluster)
            pieces = [(cluster, out)] if out is not None else [(c, self._chars.get(ord(c))) for c in cluster]
            for old, new in pieces:
                if new is None:
                    changes.append(0)
                    continue
                changes.extend(0 for _ in new)
                diff = len(new) - len(old)
                if diff > 0:
                    changes[len(changes) - diff :] = [1] * diff
                elif diff < 0 and changes:
                    changes[-1] += diff
            if not replay.run(changes, len(changes) - 1):  # the last change may still shrink
                return replay.count
        replay.run(changes, len(changes))
        return replay.count

    def keeps_start(self, s: str) -> bool:
        return bool(s) and self.lead(s, 1) > 0

    def _learn_chars(self, s: str) -> None:
        new = set(s) - self._seen
        if not new:
            return
        if len(self._seen) > _CACHE_LIMIT * 4:
            self._seen = set()
        transform = self.charsmap.transform
        for ch in new:
            out = transform(ch)
            if out is not None:
                self._chars[ord(ch)] = out
        self._seen |= new

    def _cluster(self, cluster: str) -> str:
        out = self._clusters.get(cluster)
        if out is None:
            out = None
            if len(cluster.encode("utf-8")) < 6:
                out = self.charsmap.transform(cluster)
            if out is None:
                out = cluster.translate(self._chars)
            if len(self._clusters) >= _CACHE_LIMIT:
                self._clusters.clear()
            self._clusters[cluster] = out
        return out


class _Replay:
    """Walks tokenizers' edit list, counting output characters aligned to the origin."""

    def __init__(self, z: int):
        self.z = z
        self.pos = 0  # input characters consumed
        self.count = 0
        self.done = 0  # edits replayed

    def run(self, changes: List[int], upto: int) -> bool:
        """Replay ``changes[done:upto]``; False once a character falls off the origin."""
        while self.done < upto:
            change = changes[self.done]
            if change > 0:  # inserted: aligned like the character before it
                if self.pos > 0 and self.pos - 1 >= self.z:
                    return False
            else:  # replaces the next input character and swallows -change more
                if self.pos >= self.z:
                    return False
                self.pos += 1 - change
            self.done += 1
            self.count += 1
        return True


def _clusters(s: str):
    """Every extended grapheme cluster of ``s``, in order."""
    prev = 0
    for m in cluster_regex().finditer(s):
        yield from s[prev : m.start()]
        yield m.group()
        prev = m.end()
    yield from s[prev:]


@functools.lru_cache(maxsize=None)
def _join_hint() -> Pattern[str]:
    """Any character that can start or continue a multi-character cluster (a cheap pre-check)."""
    k = _break_classes()
    hint = k["post"] | k["prepend"] | k["L"] | k["V"] | k["T"] | k["RI"] | U.CharSet.of(0x0D)
    return re.compile(hint.regex())
