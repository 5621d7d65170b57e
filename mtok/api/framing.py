"""HTTP/1.1 message framing, read strictly (RFC 9112).

Where a request's head ends and where its body ends must be decided exactly
as every other hop would decide it, or the bytes of one request can be read
as another (request smuggling).  So this reader refuses what lenient parsers
guess at: bare LF or CR, control characters (NUL...) in the request line or a
field, whitespace before a header's colon, a Content-Length
that is not plain ASCII digits, Content-Length together with
Transfer-Encoding, a transfer coding other than a single final ``chunked``,
and chunk sizes that are not 1*HEXDIG.  Every refusal is a :class:`FramingError`;
the handler answers it and closes the connection, since the rest of the
stream can no longer be trusted.

A head is bounded as nginx bounds it (its 8 KiB header buffers): a request
line or a header line of at most :data:`MAX_LINE`, at most :data:`MAX_HEADERS`
header lines (counted as lines: repeats of one name are joined, but each is
read), the whole head at most :data:`MAX_HEAD` (431; a request line, 414).
An absolute-form target (``http://host/path``, RFC 9112 section 3.2.2: a
server must accept it) is read as its path and query; its authority stands
for Host, which mtok does not route by.

Bodies are bounded by ``--max-request-bytes`` whatever their framing; for a
chunked body the chunk-size lines and CRLFs count too, and the chunks are
gathered in one buffer, so many tiny chunks cost no more memory than one.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Tuple

from ..validate import APIError

MAX_HEADERS = 100  # header lines
MAX_LINE = 8 << 10  # a request line or a header line, its CRLF not counted
MAX_HEAD = 64 << 10  # the request line, the header lines and the empty line
MAX_CHUNK_LINE = 1024  # a chunk-size line, extensions included
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 token: a header name
# a header line: a token, ':', the value (no control character but HTAB; linear: no lazy part to backtrack)
_FIELD = re.compile(rf"({_TOKEN}):([^\x00-\x08\x0a-\x1f\x7f]*)")
_CTL = re.compile(r"[\x00-\x1f\x7f]")
_ABSOLUTE = re.compile(r"https?://[^/?#]*", re.IGNORECASE)  # an absolute-form target's scheme and authority
_DIGITS = re.compile(r"[0-9]{1,18}")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")

# Framings of a request body
NO_BODY, LENGTH, CHUNKED = "none", "length", "chunked"


class FramingError(APIError):
    """The request's framing is broken or ambiguous: answer, then close."""


TOO_LARGE = "Payload Too Large"  # a 413's message begins with its reason phrase: SGLang's tests look for it


class Headers(dict):
    """Request headers, keys lower-cased; repeated headers joined with ', '.

    Lookups fold case too (``get``, ``[]`` and ``in``), as HTTP header names are
    case-insensitive; the stored keys are already lower case, so no lookup pays
    for more than one ``str.lower``.
    """

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, key.lower(), default)

    def __getitem__(self, key: str) -> Any:
        return dict.__getitem__(self, key.lower())

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key.lower() if isinstance(key, str) else key)


# What the hot path calls with a name it spells in lower case: the plain dict
# lookup, without the fold (and the Python call) of Headers.get.
field = dict.get


def crlf_line(line: bytes, what: str) -> bytes:
    """The line without its CRLF; a bare LF or CR anywhere is refused."""
    if not line.endswith(b"\r\n") or b"\r" in line[:-2] or b"\n" in line[:-2]:
        raise FramingError(f"{what} must end with CRLF and hold no bare CR or LF: {line[:100]!r}")
    return line[:-2]


def parse_request_line(raw: bytes) -> Tuple[str, str, str]:
    """(method, target in origin-form, version) of a request line, CRLF included;
    a FramingError for anything but three words ending in HTTP/1.1 or HTTP/1.0."""
    if len(raw) > MAX_LINE + 2:
        raise FramingError(f"the request line is longer than {MAX_LINE >> 10} KiB", 414)
    line = crlf_line(raw, "the request line").decode("iso-8859-1")
    words = line.split(" ")
    shown = line[:100]
    if len(words) != 3 or not words[2].startswith("HTTP/") or not all(words) or _CTL.search(line):
        raise FramingError(f"bad request line {shown!r}")
    command, target, version = words
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise FramingError(f"unsupported HTTP version in {shown!r}; use HTTP/1.1 or HTTP/1.0")
    return command, origin_form(target, shown), version


def origin_form(target: str, shown: str) -> str:
    """The path and query of a request target: as it is (``//`` at its start made
    ``/``), or out of an absolute-form ``http(s)://authority/path?query``; ``*``
    (OPTIONS) stays; anything else is a FramingError."""
    if target.startswith("/"):
        return "/" + target.lstrip("/") if target.startswith("//") else target
    if target == "*":
        return target
    m = _ABSOLUTE.match(target)
    if m is None:
        raise FramingError(f"bad request target in {shown!r}: use /path or http://host/path")
    rest = target[m.end():]
    return origin_form(rest, shown) if rest.startswith("/") else "/" + rest


def head_framing(headers: Headers, version: str, limit: int) -> Tuple[str, int, bool]:
    """(framing, declared length, close after answering) of a parsed head, or a FramingError."""
    if version == "HTTP/1.1" and not field(headers, "host"):
        raise FramingError("HTTP/1.1 requests need a Host header")
    framing, length = body_framing(headers, version, limit)
    options = connection_options(headers)
    return framing, length, "close" in options or (version == "HTTP/1.0" and "keep-alive" not in options)


def head_lines(head: bytes) -> Headers:
    """The header fields of a head's lines (from after the request line to before the
    empty line, CRLFs between them), as :func:`read_headers` takes a buffered head;
    the whole head's size is its reader's to bound (:data:`MAX_HEAD`)."""
    headers = Headers()
    if head:
        for n, line in enumerate(head.decode("iso-8859-1").split("\r\n")):
            if n >= MAX_HEADERS or len(line) > MAX_LINE:
                _too_large(n)
            parse_header_line(headers, line)
    return headers


def read_headers(rfile: Any, used: int = 0) -> Headers:
    """The header fields up to the empty line, after a request line of ``used``
    bytes.  When the whole head is already in the reader's buffer (the usual case:
    it came in the same packet as the request line) it is taken in one piece and
    split; else it is read line by line.  Both refuse exactly the same heads: in a
    head whose lines all end with CRLF and hold no other CR or LF, the first
    CRLFCRLF is its end, and both check each line in turn."""
    head = _buffered_head(rfile, used)
    return _read_header_lines(rfile, used) if head is None else head_lines(head)


def _buffered_head(rfile: Any, used: int) -> Optional[bytes]:
    """The head's lines if its end is already buffered (within :data:`MAX_HEAD`),
    consumed from ``rfile``; None (nothing consumed) if it is not, or ``rfile``
    cannot peek."""
    peek = getattr(rfile, "peek", None)
    if peek is None:
        return None
    buffered = peek()
    if buffered[:2] == b"\r\n":
        rfile.read(2)
        return b""
    end = buffered.find(b"\r\n\r\n")
    if end < 0 or used + end + 4 > MAX_HEAD:
        return None
    rfile.read(end + 4)  # from the buffer: no system call
    return buffered[:end]


def _read_header_lines(rfile: Any, used: int) -> Headers:
    headers, n = Headers(), 0  # n: the header lines read
    while True:
        raw = rfile.readline(MAX_LINE + 3)
        used += len(raw)
        if len(raw) > MAX_LINE + 2 or (raw != b"\r\n" and n >= MAX_HEADERS):
            _too_large(n)
        if used > MAX_HEAD:
            raise FramingError(f"the request head is longer than {MAX_HEAD >> 10} KiB", 431)
        if not raw:
            raise FramingError("the connection closed inside the request head")
        line = crlf_line(raw, "a header line")
        if not line:
            return headers
        parse_header_line(headers, line.decode("iso-8859-1"))
        n += 1


def _too_large(n: int) -> None:
    if n >= MAX_HEADERS:
        raise FramingError(f"more than {MAX_HEADERS} header lines", 431)
    raise FramingError(f"a header line is longer than {MAX_LINE >> 10} KiB", 431)


def parse_header_line(headers: Headers, line: str) -> None:
    """One ``name: value`` line (CRLF removed) into ``headers``, with one regular
    expression (a token, a colon, a value), the value without the spaces and tabs around it."""
    m = _FIELD.fullmatch(line)
    if m is None:
        _refuse_line(line)
    name, value = m.groups()
    add_header(headers, name.lower(), value.strip(" \t"))


def _refuse_line(line: str) -> None:
    if "\r" in line or "\n" in line:
        raise FramingError(f"a header line must end with CRLF and hold no bare CR or LF: {line[:100]!r}")
    if _CTL.search(line.replace("\t", " ")):
        raise FramingError(f"a header line holds a control character: {line[:100]!r}")
    # no token before the colon: obs-fold, a space before ':', no colon at all
    raise FramingError(f"malformed header line {line[:100]!r}")


def add_header(headers: Headers, name: str, value: str) -> None:
    """``name`` is lower case already, so the plain dict methods do (no second fold)."""
    old = dict.get(headers, name)
    if old is None:
        dict.__setitem__(headers, name, value)
    elif name in ("content-length", "host", "authorization"):
        if old != value:  # two framings or two identities: refuse to pick one
            raise FramingError(f"conflicting {name} headers")
    else:
        dict.__setitem__(headers, name, f"{old}, {value}")


def tokens(value: str) -> list:
    return [t.strip(" \t").lower() for t in value.split(",") if t.strip(" \t")]


def body_framing(headers: Headers, version: str, limit: int) -> Tuple[str, int]:
    """(framing, declared length) of the body, or a FramingError."""
    te, cl = field(headers, "transfer-encoding"), field(headers, "content-length")
    if te is not None:
        if cl is not None:
            raise FramingError("Content-Length and Transfer-Encoding together are ambiguous")
        if version != "HTTP/1.1":
            raise FramingError("Transfer-Encoding needs HTTP/1.1")
        codings = tokens(te)
        if not codings or codings[-1] != "chunked" or codings.count("chunked") > 1:
            raise FramingError(f"Transfer-Encoding {te!r}: chunked must be the last coding, once")
        if len(codings) > 1:
            raise FramingError(f"Transfer-Encoding {te!r}: only chunked is supported", 501)
        return CHUNKED, -1
    if cl is None:
        return NO_BODY, 0
    if not _DIGITS.fullmatch(cl):
        if re.fullmatch(r"[0-9]+", cl):
            raise FramingError(f"{TOO_LARGE}: a request body of {len(cl)} digits exceeds the limit of {limit} bytes "
                               "(--max-request-bytes)", 413)
        raise FramingError(f"invalid Content-Length {cl[:40]!r}")
    n = int(cl)
    if n > limit:
        raise FramingError(f"{TOO_LARGE}: a request body of {n} bytes exceeds the limit of {limit} bytes "
                           "(--max-request-bytes)", 413)
    return (LENGTH, n) if n else (NO_BODY, 0)


def read_exact(rfile: Any, n: int, expired: Any) -> bytes:
    data = rfile.read(n)
    if len(data) < n:
        if expired():
            raise FramingError("the request took too long to arrive", 408)
        raise FramingError(f"request body ended after {len(data)} of {n} bytes")
    return data


def read_chunked(rfile: Any, limit: int, expired: Any) -> bytes:
    """A chunked body into one buffer; every byte on the wire counts against ``limit``."""
    body, wire = bytearray(), 0
    while True:
        data, wire = read_chunk(rfile, wire, limit, expired)
        if data is None:
            return bytes(body)
        body += data


def read_chunk(rfile: Any, wire: int, limit: int, expired: Any) -> Tuple[Optional[bytes], int]:
    """One chunk of a chunked body: (its data, or None for the last chunk, whose
    trailers are skipped; the body's bytes on the wire so far, ``wire`` before)."""
    raw = rfile.readline(MAX_CHUNK_LINE + 1)
    wire += len(raw)
    if not raw and expired():
        raise FramingError("the request took too long to arrive", 408)
    line = crlf_line(raw, "a chunk-size line")
    size_field = line.split(b";", 1)[0]
    if b";" in line:
        size_field = size_field.rstrip(b" \t")  # BWS before a chunk extension
    if not _HEX.fullmatch(size_field):
        raise FramingError(f"malformed chunk size {size_field[:40]!r}")
    size = int(size_field, 16)
    if size == 0:
        _skip_trailers(rfile)
        return None, wire
    wire += size + 2
    if wire > limit:
        raise FramingError(f"{TOO_LARGE}: the request body exceeds the limit of {limit} bytes (chunk framing "
                           "included; --max-request-bytes)", 413)
    data = read_exact(rfile, size, expired)
    if rfile.read(2) != b"\r\n":
        raise FramingError("a chunk does not end with CRLF")
    return data, wire


def _skip_trailers(rfile: Any) -> None:
    for _ in range(MAX_HEADERS + 1):
        raw = rfile.readline(MAX_LINE + 1)
        if not crlf_line(raw, "a trailer line"):
            return
    raise FramingError(f"more than {MAX_HEADERS} trailer lines", 431)


def is_json_type(value: Optional[str]) -> bool:
    """No Content-Type, application/json, or application/*+json (FastAPI's rule)."""
    if not value:
        return True
    media = value.split(";", 1)[0].strip(" \t").lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def connection_options(headers: Dict[str, str]) -> list:
    return tokens(field(headers, "connection", ""))
