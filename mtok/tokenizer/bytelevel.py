"""GPT-2's byte-level alphabet: the 256 byte values as printable characters.

Byte-level BPE vocabularies spell every token in this alphabet; a ByteLevel
decoder maps the characters back to bytes and decodes the concatenation as
UTF-8 (U+FFFD for broken sequences).  So each token id stands for a fixed byte
string, which is what lets the detokenizer stream such models at the cost of a
table lookup per token.
"""

from __future__ import annotations

from typing import Dict


def _bytes_to_unicode() -> Dict[int, str]:
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = _bytes_to_unicode()  # also a str.translate table for a latin-1 view of bytes
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def token_bytes(token: str) -> bytes:
    """What a ByteLevel decoder makes of one token: its characters as bytes, or,
    for a token outside the alphabet (an added token, say), its own UTF-8."""
    try:
        return bytes([CHAR_TO_BYTE[c] for c in token])
    except KeyError:
        return token.encode("utf-8")
