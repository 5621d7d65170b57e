"""A Gemma-3-sized SentencePiece-BPE ``tokenizer.json`` (262,144 entries), made here.

No file of that size ships with mtok or ``../shared/tokenizers`` (Mistral's 32,000 is
the largest SentencePiece-BPE there), yet load time and cold encoding grow with the
vocabulary.  This trains one with ``tokenizers``' BPE trainer on this Python's standard
library (sources and text files, tests included: PSF License), spelled also in three
other alphabets so that the vocabulary fills up as a multilingual one does.  It trains
on the pieces SentencePiece's trainer merges within: ``▁``-led, never across a change
of script or digit (its ``split_by_unicode_script`` and ``split_by_number``, and
Gemma's ``split_digits``).  Without them a trainer joins ``self.`` and ``(x``, which no
SentencePiece file does, and which would leave mtok's runtime only its coarse cuts
(``mtok/tokenizer/pyrt/bpe_cuts.py``).  The file then gets Gemma's pipeline:
``Replace(" ", "▁")``, no pre-tokenizer, byte fallback over ``<0x00>``..``<0xFF>``,
and the Replace/ByteFallback/Fuse decoder.  Merges are written as ``[a, b]`` pairs, as
recent ``tokenizers`` releases write them.  It is smaller than Gemma-3's real file
(13 MB against ~33 MB: fewer long tokens and added tokens), so it understates that
file's load time.

    python -m mtok.bench tokenizer --make-262k /tmp/sp262k.json /tmp/sp262k.json
"""

from __future__ import annotations

import json
import os
import sysconfig
from typing import Iterator

MARK = "\u2581"
VOCAB_SIZE = 262144
# A run of letters (with their marks), one digit, or a run of the rest, each after any "▁"s.
TRAINING_PIECES = f"{MARK}*(?:[\\p{{L}}\\p{{M}}]+|\\p{{N}}|[^\\p{{L}}\\p{{M}}\\p{{N}}{MARK}]+)|{MARK}+"
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]"]


def stdlib_texts() -> Iterator[str]:
    lib = sysconfig.get_paths()["stdlib"]
    for dirpath, dirnames, filenames in os.walk(lib):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        for name in sorted(filenames):
            if name.endswith((".py", ".txt", ".rst", ".html")):
                try:
                    with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                        yield f.read()
                except (OSError, UnicodeDecodeError):
                    pass


# Alphabets the stdlib's letters are also spelled in, so that the vocabulary fills up
# as a multilingual one does (Gemma-3's is mostly other languages' words): a-z, then A-Z.
ALPHABETS = (
    "абвгдежзийклмнопрстуфхцчшщ" "АБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩ",  # Cyrillic
    "αβγδεζηθικλμνξοπρστυφχψωάέ" "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩΆΈ",  # Greek
    "աբգդեզէըթժիլխծկհձղճմյնշոչպ" "ԱԲԳԴԵԶԷԸԹԺԻԼԽԾԿՀՁՂՃՄՅՆՇՈՉՊ",  # Armenian
)
LATIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def training_texts() -> Iterator[str]:
    """The stdlib's texts, each also in every other alphabet of ``ALPHABETS``."""
    tables = [str.maketrans(LATIN, alphabet) for alphabet in ALPHABETS]
    for text in stdlib_texts():
        yield text
        for table in tables:
            yield text.translate(table)


def write_262k(out: str) -> None:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=MARK, prepend_scheme="always", split=True),
        pre_tokenizers.Split(Regex(TRAINING_PIECES), behavior="isolated")])
    special = SPECIAL + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=special, limit_alphabet=6000,
                                  show_progress=False)
    tok.train_from_iterator(training_texts(), trainer)
    config = json.loads(tok.to_str())
    config["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": MARK}
    config["pre_tokenizer"] = None
    config["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": MARK}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]}
    for t in config["added_tokens"]:
        t["special"] = not t["content"].startswith("<0x")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
