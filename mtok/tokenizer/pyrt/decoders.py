"""Decoders: turn the tokens of an id sequence back into text.

Each mirrors one tokenizers ``Decoder``: ``decode_chain`` maps a list of token
strings to a new list, so that decoders compose in a ``Sequence``; ``decode``
joins the final list.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional

from .. import TokenizerError
from ._dispatch import build
from ..bytelevel import token_bytes
from .pre_tokenizers import metaspace_scheme

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2}|\+[0-9A-Fa-f])>\Z")
_HEX = "0123456789abcdefABCDEF"
# Every token ByteFallback reads as a byte (Rust's u8::from_str_radix also takes "+F").
_BYTE_TOKENS = frozenset(f"<0x{a}{b}>" for a in _HEX + "+" for b in _HEX)


class Decoder:
    def decode_chain(self, tokens: List[str]) -> List[str]:
        raise NotImplementedError

    def decode(self, tokens: List[str]) -> str:
        return "".join(self.decode_chain(tokens))


class ByteLevel(Decoder):
    """Byte-level characters back to bytes, then UTF-8 with U+FFFD for broken sequences."""

    def __init__(self) -> None:
        self._bytes: Dict[str, bytes] = {}

    @classmethod
    def from_json(cls, d: dict) -> "ByteLevel":
        return cls()

    def _token_bytes(self, token: str) -> bytes:
        raw = token_bytes(token)
        if len(self._bytes) < 1 << 20:
            self._bytes[token] = raw
        return raw

    def decode_chain(self, tokens: List[str]) -> List[str]:
        cache = self._bytes
        data = b"".join([cache.get(t) or self._token_bytes(t) for t in tokens])
        return [data.decode("utf-8", "replace")]


def cleanup(text: str) -> str:
    """tokenizers' WordPiece clean-up of tokenization artifacts, in its order."""
    for old, new in _CLEANUPS:
        text = text.replace(old, new)
    return text


_CLEANUPS = (
    (" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
    (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"),
)  # fmt: skip


class WordPiece(Decoder):
    def __init__(self, prefix: str = "##", cleanup: bool = True):
        self.prefix = prefix
        self.cleanup = cleanup

    @classmethod
    def from_json(cls, d: dict) -> "WordPiece":
        return cls(d.get("prefix", "##"), bool(d.get("cleanup", True)))

    def decode_chain(self, tokens: List[str]) -> List[str]:
        out = []
        for i, t in enumerate(tokens):
            if i:
                t = t[len(self.prefix) :] if t.startswith(self.prefix) else " " + t
            out.append(cleanup(t) if self.cleanup else t)
        return out


class Metaspace(Decoder):
    def __init__(self, replacement: str = "\u2581", prepend_scheme: str = "always"):
        if len(replacement) != 1:
            raise TokenizerError(f"Metaspace: replacement must be one character, got {replacement!r}")
        self.replacement = replacement
        self.prepend_scheme = prepend_scheme

    @classmethod
    def from_json(cls, d: dict) -> "Metaspace":
        return cls(d.get("replacement", "\u2581"), metaspace_scheme(d))

    def decode_chain(self, tokens: List[str]) -> List[str]:
        rep = self.replacement
        out = [t.replace(rep, " ") for t in tokens]
        if out and self.prepend_scheme != "never":
            out[0] = tokens[0].replace(rep, "")  # every replacement in the first token goes
        return out


class BPEDecoder(Decoder):
    def __init__(self, suffix: str = "</w>"):
        self.suffix = suffix

    @classmethod
    def from_json(cls, d: dict) -> "BPEDecoder":
        return cls(d.get("suffix", "</w>"))

    def decode_chain(self, tokens: List[str]) -> List[str]:
        last = len(tokens) - 1
        return [t.replace(self.suffix, "" if i == last else " ") for i, t in enumerate(tokens)]


class ByteFallback(Decoder):
    """``<0xNN>`` tokens back to the UTF-8 text they spell (one U+FFFD per byte if invalid)."""

    @classmethod
    def from_json(cls, d: dict) -> "ByteFallback":
        return cls()

    def decode_chain(self, tokens: List[str]) -> List[str]:
        if _BYTE_TOKENS.isdisjoint(tokens):
            return tokens
        out: List[str] = []
        pending = bytearray()
        for t in tokens:
            m = _BYTE_TOKEN.match(t) if len(t) == 6 else None
            if m is not None:
                pending.append(int(m.group(1), 16))
                continue
            if pending:
                out.extend(_bytes_text(pending))
                pending = bytearray()
            out.append(t)
        if pending:
            out.extend(_bytes_text(pending))
        return out


def _bytes_text(data: bytearray) -> List[str]:
    try:
        return [data.decode("utf-8")]
    except UnicodeDecodeError:
        return ["\ufffd"] * len(data)


class Fuse(Decoder):
    @classmethod
    def from_json(cls, d: dict) -> "Fuse":
        return cls()

    def decode_chain(self, tokens: List[str]) -> List[str]:
        return ["".join(tokens)]


class Strip(Decoder):
    """Remove up to ``start`` leading and ``stop`` trailing ``content`` characters per token."""

    def __init__(self, content: str = " ", start: int = 0, stop: int = 0):
        if len(content) != 1:
            raise TokenizerError(f"Strip: content must be one character, got {content!r}")
        self.content, self.start, self.stop = content, start, stop

    @classmethod
    def from_json(cls, d: dict) -> "Strip":
        return cls(d["content"], int(d["start"]), int(d["stop"]))

    def decode_chain(self, tokens: List[str]) -> List[str]:
        return [self._strip(t) for t in tokens]

    def _strip(self, token: str) -> str:
        c, n = self.content, len(token)
        head = 0
        while head < min(self.start, n) and token[head] == c:
            head += 1
        tail = n
        for i in range(self.stop):
            if i == n:  # tokenizers indexes before the token's start here and panics
                raise TokenizerError(f"Strip decoder: token {token!r} is shorter than stop={self.stop}")
            if token[n - i - 1] != c:
                break
            tail = n - i - 1
        if head > tail:
            raise TokenizerError(f"Strip decoder: start and stop overlap in token {token!r}")
        return token[head:tail]


class CTC(Decoder):
    def __init__(self, pad_token: str = "<pad>", word_delimiter_token: str = "|", cleanup: bool = True):
        self.pad_token = pad_token
        self.word_delimiter_token = word_delimiter_token
        self.cleanup = cleanup

    @classmethod
    def from_json(cls, d: dict) -> "CTC":
        return cls(d.get("pad_token", "<pad>"), d.get("word_delimiter_token", "|"), bool(d.get("cleanup", True)))

    def decode_chain(self, tokens: List[str]) -> List[str]:
        out = []
        for i, t in enumerate(tokens):
            if i and t == tokens[i - 1]:
                continue
            t = t.replace(self.pad_token, "")
            if self.cleanup:
                t = cleanup(t).replace(self.word_delimiter_token, " ")
            if t:
                out.append(t)
        return out


class Replace(Decoder):
    """The Replace normalizer's find-and-replace, applied to every token."""

    def __init__(self, replace) -> None:
        self.replace = replace

    @classmethod
    def from_json(cls, d: dict) -> "Replace":
        from .normalizers import Replace as ReplaceNormalizer

        return cls(ReplaceNormalizer.from_json(d))

    def decode_chain(self, tokens: List[str]) -> List[str]:
        literal = getattr(self.replace, "literal", None)
        if literal:  # the common case, a plain string: skip a call per token
            content = self.replace.content
            return [t.replace(literal, content) for t in tokens]
        return [self.replace.normalize(t) for t in tokens]


class Sequence(Decoder):
    def __init__(self, decoders: List[Decoder]):
        self.decoders = decoders

    @classmethod
    def from_json(cls, d: dict) -> "Sequence":
        return cls([_required(decoder_from_json(x)) for x in d["decoders"]])

    def decode_chain(self, tokens: List[str]) -> List[str]:
        for decoder in self.decoders:
            tokens = decoder.decode_chain(tokens)
        return tokens


def _required(decoder: Optional[Decoder]) -> Decoder:
    if decoder is None:
        raise TokenizerError("decoder Sequence: null member")
    return decoder


DECODERS = {
    "BPEDecoder": BPEDecoder,
    "ByteFallback": ByteFallback,
    "ByteLevel": ByteLevel,
    "CTC": CTC,
    "Fuse": Fuse,
    "Metaspace": Metaspace,
    "Replace": Replace,
    "Sequence": Sequence,
    "Strip": Strip,
    "WordPiece": WordPiece,
}


def decoder_from_json(d: Optional[dict]) -> Optional[Decoder]:
    return build(DECODERS, d, "decoder")
