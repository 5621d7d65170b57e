"""Train mtok's built-in default tokenizer (mtok/data/default/).

What it is: a small GPT-2-style byte-level BPE (8192 tokens, GPT-2 split regex,
ByteLevel decoder, no post-processor, so ``encode`` adds no special tokens and
decode(encode(text)) == text for any text), with ``<|endoftext|>`` as its only
special token.  It exists so that mtok serves out of a fresh checkout with no
download; it is not meant to be a good tokenizer for any model.

Training text: the docstrings and comments of the Python standard library of the
interpreter running this script (its ``Lib`` directory, tests excluded), which is
under the PSF License Agreement (https://docs.python.org/3/license.html).  The
committed files were made with CPython 3.11.7 and tokenizers 0.23.3; other
versions give a slightly different stdlib, hence a different vocabulary::

    python scripts/train_default_tokenizer.py            # writes mtok/data/default/
    python scripts/train_default_tokenizer.py --check    # exit 1 unless it reproduces them
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mtok.bench import stdlib_text  # noqa: E402

OUT_DIR = os.path.join(ROOT, "mtok", "data", "default")
MADE_WITH = {"python": "3.11.7", "tokenizers": "0.23.3"}
VOCAB_SIZE = 8192
EOS = "<|endoftext|>"


def corpus(lib_dir: str) -> List[str]:
    """Per module that parses, its comments and then its docstrings."""
    texts: List[str] = []
    for path in stdlib_text.sources(lib_dir):
        source = stdlib_text.read(path)
        docs = stdlib_text.docstrings(source) if source is not None else None
        if docs is not None:
            texts += stdlib_text.comments(source) + docs
    return texts


def train(texts: List[str]) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return json.dumps(json.loads(tok.to_str()), ensure_ascii=False, separators=(",", ":"))


CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "clean_up_tokenization_spaces": False}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = parser.parse_args(argv)
    import tokenizers

    made_here = {"python": "%d.%d.%d" % sys.version_info[:3], "tokenizers": tokenizers.__version__}
    if made_here != MADE_WITH:
        print(f"warning: running {made_here}, the committed files were made with {MADE_WITH}", file=sys.stderr)
    texts = corpus(sysconfig.get_paths()["stdlib"])
    print(f"{len(texts)} docstrings and comments, {sum(map(len, texts))} characters", file=sys.stderr)
    files = {"tokenizer.json": train(texts), "tokenizer_config.json": json.dumps(CONFIG, indent=2)}
    if args.check:
        same = True
        for name, text in files.items():
            with open(os.path.join(OUT_DIR, name), encoding="utf-8") as f:
                if f.read().rstrip("\n") != text:
                    print(f"{name} differs from the committed one", file=sys.stderr)
                    same = False
        return 0 if same else 1
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(OUT_DIR, name), "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
