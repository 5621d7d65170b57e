"""The prepared-table cache of the pure-Python runtime (``mtok.tokenizer.pyrt.prepared``).

A load that reads the cache must give the tokenizer a parse gives; an entry that is
damaged, stale, for other bytes, or writable by others must be passed over (the file
is parsed) and a good one written in its place.  Mistral's file (SentencePiece-BPE
with cuts) stands for the large files the cache is for, with the size floor lowered.
"""

from __future__ import annotations

import os

import pytest

from mtok.tokenizer.pyrt import Tokenizer
from mtok.tokenizer.pyrt import prepared
from support import ROOT, skip_real

pytestmark = [pytest.mark.unit]

SHARED = os.path.join(ROOT, "..", "shared", "tokenizers")
MISTRAL = os.path.join(SHARED, "mistral-7b-v0.1.json")
GPT2 = os.path.join(SHARED, "gpt2.json")
if not os.path.isfile(MISTRAL):
    skip_real(f"no {MISTRAL} (the shared tokenizer files)")

TEXTS = ["Hello, world! It's 3:45 p.m.", "日本語のテキスト 한국어 😀 def f(x):\n\treturn x**2",
         "ThisIsAVeryLongIdentifierWithoutAnySpaces_" * 4, ""]


@pytest.fixture(autouse=True)
def small_files_cached(monkeypatch):
    monkeypatch.setattr(prepared, "MIN_BYTES", 0)


def _entries(directory) -> list:
    return sorted(n for n in os.listdir(directory) if n.endswith(".marshal")) if os.path.isdir(directory) else []


def _same(a: Tokenizer, b: Tokenizer) -> None:
    for text in TEXTS:
        assert a.encode(text) == b.encode(text)
        assert a.decode(a.encode(text)) == b.decode(b.encode(text))
    assert a.get_vocab_size() == b.get_vocab_size() and a.token_to_id("<s>") == b.token_to_id("<s>")


@pytest.mark.parametrize("path", [MISTRAL, GPT2], ids=["mistral", "gpt2"])
def test_a_load_from_the_cache_is_the_parsed_tokenizer(tmp_path, path):
    directory = str(tmp_path / "cache")
    parsed = Tokenizer.from_file(path, cache_dir="off")
    first = Tokenizer.from_file(path, cache_dir=directory)
    [entry] = _entries(directory)
    assert os.stat(directory).st_mode & 0o777 == 0o700 and os.stat(os.path.join(directory, entry)).st_mode & 0o077 == 0
    cached = Tokenizer.from_file(path, cache_dir=directory)
    assert cached.model.prepared() == parsed.model.prepared() == first.model.prepared()
    _same(cached, parsed)


def _entry_for(path, directory) -> prepared.PreparedCache:
    with open(path, "rb") as f:
        cache = prepared.PreparedCache.for_file(f.read(), directory)
    assert cache is not None
    return cache


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "not ours"])
def test_a_bad_entry_is_a_miss_and_is_replaced(tmp_path, damage):
    directory = str(tmp_path)
    Tokenizer.from_file(MISTRAL, cache_dir=directory)
    entry = _entry_for(MISTRAL, directory)
    with open(entry.path, "rb") as f:
        data = f.read()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":
        data = data[:-100] + bytes([data[-100] ^ 1]) + data[-99:]
    elif damage == "empty":
        data = b""
    with open(entry.path, "wb") as f:
        f.write(data)
    if damage == "not ours":
        os.chmod(entry.path, 0o666)
    assert entry.load() is None
    _same(Tokenizer.from_file(MISTRAL, cache_dir=directory), Tokenizer.from_file(MISTRAL, cache_dir="off"))
    assert entry.load() is not None  # the parse wrote a good entry over it


def test_a_stale_entry_is_a_miss(tmp_path):
    """An entry written by another runtime (or Python) for the same bytes is not read."""
    directory = str(tmp_path)
    entry = _entry_for(MISTRAL, directory)
    other = _entry_for(MISTRAL, directory)
    other._key = other._key[:-1] + ("another runtime",)
    other.store(("BPE", {}, ()))
    assert entry.load() is None
    _same(Tokenizer.from_file(MISTRAL, cache_dir=directory), Tokenizer.from_file(MISTRAL, cache_dir="off"))
    assert entry.load() is not None


def test_other_bytes_are_another_entry(tmp_path):
    directory = str(tmp_path / "c")
    edited = tmp_path / "edited.json"
    with open(MISTRAL, "rb") as f:
        edited.write_bytes(f.read() + b"\n")
    Tokenizer.from_file(MISTRAL, cache_dir=directory)
    Tokenizer.from_file(str(edited), cache_dir=directory)
    assert len(_entries(directory)) == 2


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(prepared.CACHE_ENV, "off")
    assert prepared.default_dir() is None
    monkeypatch.setenv(prepared.CACHE_ENV, str(tmp_path / "c"))
    assert prepared.default_dir() == str(tmp_path / "c")
    Tokenizer.from_file(MISTRAL, cache_dir="off")
    assert _entries(str(tmp_path / "c")) == []


def test_small_files_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(prepared, "MIN_BYTES", 8 << 20)
    Tokenizer.from_file(MISTRAL, cache_dir=str(tmp_path))
    assert _entries(str(tmp_path)) == []
