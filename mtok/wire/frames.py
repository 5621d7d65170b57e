"""``multiprocessing.connection``'s message framing, read and written in bulk.

A frame is a 4-byte big-endian signed length and the payload; a payload of
2 GiB or more has the length -1 and then an 8-byte one.  That is what
``Connection.send_bytes`` writes and ``Connection.recv_bytes`` reads, so a
peer on either side may use the stdlib's methods or these.

Why not only the stdlib's: ``recv_bytes`` costs two ``read()`` calls per
message (the length, then the payload) and ``send_bytes`` one ``write()``.  A
scheduler that takes in a thousand requests a second pays for each.  Here
:func:`pack` joins any number of messages into one write, and :class:`Frames`
cuts every message out of one large read: the system calls are paid per burst,
not per message.
"""

from __future__ import annotations

import os
import struct
from typing import List, Sequence

_LENGTH = struct.Struct("!i")
_LONG_LENGTH = struct.Struct("!Q")
_LONG = 0x7FFFFFFF  # above this a payload takes the -1 marker and an 8-byte length
READ_SIZE = 1 << 16  # bytes asked of one read(); a larger message takes several


def pack(payloads: Sequence[bytes]) -> bytes:
    """The frames of ``payloads``, one after another, as one buffer."""
    parts = []
    for data in payloads:
        if len(data) > _LONG:
            parts += (_LENGTH.pack(-1), _LONG_LENGTH.pack(len(data)), data)
        else:
            parts += (_LENGTH.pack(len(data)), data)
    return b"".join(parts)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a blocking descriptor (what ``Connection._send`` does)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Frames:
    """The payloads in a byte stream that arrives in pieces of any size.

    :meth:`read` takes what one ``read()`` returns and appends each payload it
    completes.  The start of an unfinished frame is kept, with the size it
    needs, and later pieces are only collected until that size is there, so a
    large message costs one join, not one copy per piece.
    """

    __slots__ = ("_parts", "_have", "_need")

    def __init__(self) -> None:
        self._parts: List[bytes] = []  # the unfinished frame's pieces
        self._have = 0  # their bytes
        self._need = 0  # bytes the frame (or its length) needs

    def read(self, fd: int, out: List[bytes]) -> None:
        """One ``read()`` of ``fd``: every payload it completes goes to ``out``.
        Raises EOFError when the peer has closed its end."""
        data = os.read(fd, READ_SIZE)
        if not data:
            raise EOFError
        if self._parts:
            self._parts.append(data)
            self._have += len(data)
            if self._have < self._need:
                return
            data = b"".join(self._parts)
        pos = self._cut(data, out)
        if pos < len(data):
            rest = data[pos:]
            self._parts, self._have, self._need = [rest], len(rest), _needed(rest)
        else:
            self._parts, self._have, self._need = [], 0, 0

    @staticmethod
    def _cut(buf: bytes, out: List[bytes]) -> int:
        """Append the whole frames at the start of ``buf``; where the rest begins."""
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (size,) = _LENGTH.unpack_from(buf, pos)
            start = pos + 4
            if size < 0:
                if end - start < 8:
                    break
                (size,) = _LONG_LENGTH.unpack_from(buf, start)
                start += 8
            if end - start < size:
                break
            out.append(buf[start : start + size])
            pos = start + size
        return pos

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame held back."""
        return self._have


def _needed(head: bytes) -> int:
    """The bytes a frame starting with ``head`` takes, as far as ``head`` tells."""
    if len(head) < 4:
        return 4
    (size,) = _LENGTH.unpack_from(head, 0)
    if size >= 0:
        return 4 + size
    if len(head) < 12:
        return 12
    return 12 + _LONG_LENGTH.unpack_from(head, 4)[0]
