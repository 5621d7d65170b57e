"""A cache of prepared tables, so that a large tokenizer.json loads in a fraction of its first time.

A 33 MB file (Gemma-3's: 262,144 tokens, 514,906 merges) costs ~1.5 CPU-s the
first time: ``json.loads`` and ~1.5 million vocabulary lookups of fresh strings
to pack the merge table.  What comes out (the vocabulary, the packed table, the
cuts) is plain dicts, lists and strings, which ``marshal`` writes and reads back
in a third of that.  Every HTTP worker loads the tokenizer when it starts, so
the first load prepares it and every later one (the other workers, the next
start) reads it.

The cache is only a shortcut, never a source of truth:

- an entry is named by the SHA-256 of the file's bytes and holds, checked on
  every read, the file's size and digest, the Python version (``marshal``'s format
  is CPython's), and a digest of this runtime's own sources that build the
  tables, so an edited file, another interpreter or a changed runtime all miss;
- the payload carries its own SHA-256, so a torn or damaged file is a miss;
- an entry is read only if this user owns it and no one else may write it;
- it is written to a temporary file and renamed into place (readers see all or
  nothing), and any error on either side is a miss (then the file is parsed).

Files under ``MIN_BYTES`` are not cached: they load in ~0.2 s anyway.  The
directory is ``$MTOK_PYRT_CACHE_DIR`` (``off`` or empty: no cache), else
``$XDG_CACHE_HOME/mtok/pyrt``, else ``~/.cache/mtok/pyrt``.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import sys
import tempfile
from typing import Any, Optional

CACHE_ENV = "MTOK_PYRT_CACHE_DIR"
MIN_BYTES = 8 << 20
_MAGIC = b"mtok-pyrt-prepared 1\n"
# The sources whose code shapes what is stored: a change to any of them is a miss.
_SOURCES = ("bpe.py", "bpe_cuts.py", "prepared.py", "tokenizer.py")


def default_dir() -> Optional[str]:
    """The cache directory from the environment, or None when it is turned off."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return None if chosen in ("", "off") else chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mtok", "pyrt")


@functools.lru_cache(maxsize=None)
def _runtime_digest() -> Optional[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    try:
        for name in _SOURCES:
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    except OSError:
        return None  # no sources to vouch for the tables (a frozen build): no cache
    return h.hexdigest()


class PreparedCache:
    """The cache entry for one file's bytes: ``load`` what an earlier load stored, ``store`` it."""

    def __init__(self, directory: str, raw: bytes):
        digest = hashlib.sha256(raw).hexdigest()
        self.path = os.path.join(directory, digest[:40] + ".marshal")
        self._key = (len(raw), digest, tuple(sys.version_info[:2]), marshal.version, _runtime_digest())

    @classmethod
    def for_file(cls, raw: bytes, directory: Optional[str]) -> Optional["PreparedCache"]:
        if directory is None or len(raw) < MIN_BYTES or _runtime_digest() is None:
            return None
        return cls(directory, raw)

    def load(self) -> Optional[Any]:
        """What ``store`` was given for these bytes, or None (no entry, not ours, damaged, stale)."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
                    return None
                data = f.read()
            head = len(_MAGIC) + 32
            if data[: len(_MAGIC)] != _MAGIC or hashlib.sha256(data[head:]).digest() != data[len(_MAGIC) : head]:
                return None
            key, payload = marshal.loads(data[head:])
        except Exception:  # any failure is a miss: the file is parsed instead
            return None
        return payload if key == self._key else None

    def store(self, payload: Any) -> None:
        """Write ``payload`` (marshal's types only) for these bytes; failures are ignored."""
        tmp = None
        try:
            body = marshal.dumps((self._key, payload))
            directory = os.path.dirname(self.path)
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".marshal")
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(body).digest() + body)
            os.replace(tmp, self.path)
            tmp = None
        except Exception:
            pass
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
