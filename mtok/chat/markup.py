"""``Markup``: a string that is already HTML, with jinja2's (markupsafe's) semantics.

transformers' environment does not autoescape, yet ``|safe`` and ``|escape`` still
return ``Markup`` there, and a Markup changes what later operations build: ``+``
escapes the other side (``"x"|safe + "<b>"`` is ``x&lt;b&gt;``), ``%`` and
``format`` escape their arguments, ``join`` escapes the items, and the string
methods (``upper``, slicing, ``split``...) return Markup, ``replace`` escaping
its new text and ``center``/``ljust``/``rjust`` their fill (markupsafe 3's rules).  Templates depend on it (meetkai's functionary
templates build tool descriptions with ``"..."|safe + name``), so mtok's engine
has its own Markup, written from that behaviour, standard library only.

``~`` and ``{{ }}`` treat a Markup as the plain string it is (the environment
does not autoescape), and ``escape`` of a Markup leaves it unchanged.  Sizes are
the budget's business (:mod:`mtok.chat.guards` charges what escaping will build,
using :func:`escaped_size`); this module only defines the values.
"""

from __future__ import annotations

import html
import string
from typing import Any, Iterable, List

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"})


def escaped_size(s: str) -> int:
    """``len(escape(s))`` of a plain string, counted without building it."""
    return len(s) + 4 * (s.count("&") + s.count('"') + s.count("'")) + 3 * (s.count("<") + s.count(">"))


def escape(value: Any) -> "Markup":
    """``value`` as HTML: a Markup (anything with ``__html__``) as it is, else its text escaped."""
    if hasattr(value, "__html__"):
        return Markup(value.__html__())
    return Markup(str(value).translate(_ESCAPES))


def soft_str(value: Any) -> str:
    """A string stays what it is (a Markup stays a Markup); anything else becomes ``str(value)``."""
    return value if isinstance(value, str) else str(value)


class _Escaping:
    """An argument of ``Markup % args``: prints escaped, indexes into escaped items, counts as a number."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __getitem__(self, key: Any) -> "_Escaping":
        return _Escaping(self.obj[key])

    def __str__(self) -> str:
        return str(escape(self.obj))

    def __repr__(self) -> str:
        return str(escape(repr(self.obj)))

    def __int__(self) -> int:
        return int(self.obj)

    def __float__(self) -> float:
        return float(self.obj)


class _EscapingFormatter(string.Formatter):
    """``Markup.format``: each field formatted, then escaped unless it is Markup."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if hasattr(value, "__html_format__"):
            return value.__html_format__(format_spec)
        if hasattr(value, "__html__"):
            if format_spec:
                raise ValueError(f"Format specifier {format_spec} given, but {type(value)} does not define "
                                 "__html__. A class that defines __html__ must define __html_format__ to work "
                                 "with format specifiers.")
            return value.__html__()
        return str(escape(super().format_field(value, str(format_spec))))


class Markup(str):
    """A str that is HTML already; see the module's docstring for what it changes."""

    __slots__ = ()

    def __new__(cls, base: Any = "", encoding: Any = None, errors: str = "strict") -> "Markup":
        if hasattr(base, "__html__"):
            base = base.__html__()
        if encoding is None:
            return super().__new__(cls, base)
        return super().__new__(cls, base, encoding, errors)

    def __html__(self) -> "Markup":
        return self

    def __add__(self, other: Any) -> Any:
        if isinstance(other, str) or hasattr(other, "__html__"):
            return Markup(str.__add__(self, escape(other)))
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str) or hasattr(other, "__html__"):
            return Markup(str.__add__(escape(other), self))
        return NotImplemented

    def __mul__(self, count: Any) -> Any:
        if isinstance(count, int):
            return Markup(str.__mul__(self, count))
        return NotImplemented

    __rmul__ = __mul__

    def __mod__(self, args: Any) -> "Markup":
        if isinstance(args, tuple):
            args = tuple(_Escaping(a) for a in args)
        elif hasattr(type(args), "__getitem__") and not isinstance(args, str):  # a mapping (or a list)
            args = _Escaping(args)
        else:
            args = (_Escaping(args),)
        return Markup(str.__mod__(self, args))

    def __repr__(self) -> str:
        return f"Markup({str.__repr__(self)})"

    def __getitem__(self, key: Any) -> "Markup":
        return Markup(str.__getitem__(self, key))

    def join(self, items: Iterable[Any]) -> "Markup":
        return Markup(str.join(self, map(escape, items)))

    def split(self, sep: Any = None, maxsplit: int = -1) -> List["Markup"]:
        return [Markup(v) for v in str.split(self, sep, maxsplit)]

    def rsplit(self, sep: Any = None, maxsplit: int = -1) -> List["Markup"]:
        return [Markup(v) for v in str.rsplit(self, sep, maxsplit)]

    def splitlines(self, keepends: bool = False) -> List["Markup"]:
        return [Markup(v) for v in str.splitlines(self, keepends)]

    def partition(self, sep: Any) -> Any:
        return tuple(Markup(v) for v in str.partition(self, sep))

    def rpartition(self, sep: Any) -> Any:
        return tuple(Markup(v) for v in str.rpartition(self, sep))

    def format(self, *args: Any, **kwargs: Any) -> "Markup":
        return Markup(_EscapingFormatter().vformat(self, args, kwargs))

    def format_map(self, mapping: Any) -> "Markup":
        return Markup(_EscapingFormatter().vformat(self, (), mapping))

    def __html_format__(self, format_spec: str) -> "Markup":
        if format_spec:
            raise ValueError("Unsupported format specification for Markup.")
        return self

    def unescape(self) -> str:
        """The text with its character references turned back into characters (a plain str)."""
        return html.unescape(str(self))

    def striptags(self) -> str:
        """:meth:`unescape` of the text without its comments and tags, its whitespace collapsed."""
        return Markup(" ".join(_without_tags(str(self)).split())).unescape()

    @classmethod
    def escape(cls, value: Any) -> "Markup":
        return escape(value)


def _without_tags(text: str) -> str:
    """``text`` without its ``<...>`` tags and ``<!-- ... -->`` comments, in one pass from the left;
    at the first one never closed the text is kept as it is from there."""
    out, at = [], 0
    while True:
        start = text.find("<", at)
        if start == -1:
            break
        comment = text.startswith("<!--", start)
        end = text.find("-->", start + 4) if comment else text.find(">", start)
        if end == -1:
            break
        out.append(text[at:start])
        at = end + (3 if comment else 1)
    out.append(text[at:])
    return "".join(out)


def _markup_method(name: str, escaped: int) -> Any:
    """Markup's version of a str method: the result a Markup, and its argument at position ``escaped``
    (``replace``'s new text, the fill character of ``center``/``ljust``/``rjust``) escaped."""
    method = getattr(str, name)

    def wrapped(self: Markup, *args: Any) -> Markup:
        if len(args) > escaped >= 0:
            args = args[:escaped] + (escape(args[escaped]),) + args[escaped + 1:]
        return Markup(method(self, *args))

    wrapped.__name__ = wrapped.__qualname__ = name
    wrapped.__doc__ = method.__doc__
    return wrapped


for _name in ("capitalize", "title", "lower", "upper", "lstrip", "rstrip", "strip", "translate", "expandtabs",
              "swapcase", "zfill", "casefold", "removeprefix", "removesuffix", "replace", "ljust", "rjust", "center"):
    if hasattr(str, _name):  # removeprefix/removesuffix: Python 3.9+
        setattr(Markup, _name, _markup_method(_name, 1 if _name in ("replace", "ljust", "rjust", "center") else -1))
