"""Texts and trained tokenizers for the differential tests (helper module, not a test file).

Every family is trained here with the ``tokenizers`` trainers on a generated
corpus, so the differential tests mean something on a fresh clone that lacks
``../shared/tokenizers``.  Builders return ``tokenizer.json`` text.
"""

from __future__ import annotations

import functools
import json
import random
import unicodedata
from typing import Callable, Dict, List

SCRIPTS = [
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see, they're here, I'd go, you've won, I'm in.",
    "SHOUTING IT'S LOUD, DON'T YOU THINK? 'S 'T 'RE 'VE 'M 'LL 'D",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Москва — столица России.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε!",
    "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق. مرحبا بالعالم",
    "דג סקרן שט בים מאוכזב ולפתע מצא חברה. שלום עולם",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "我能吞下玻璃而不伤身体。天地玄黄，宇宙洪荒。いろはにほへと ちりぬるを カタカナ 漢字",
    "다람쥐 헌 쳇바퀴에 타고파. 안녕하세요 세계! ㄱㄴㄷ 한국어",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 #️⃣ ❤️ 🫠 and text after.",
    "Combining: e\u0301 a\u0308 n\u0303 o\u0302\u0323 \u1100\u1161\u11a8 क\u094d\u0937 Å Å fi ① ＡＢＣ ㎏ ½ x²",
    "Controls: \x00\x01\x07\x1b[0m\x7f \x1c\x1d\x1e\x1f \x85 \u200b\u200c\u200d\ufeff \u202e\u202c \ufffd",
    "Whitespace:\ta\t\tb\n\nc\r\nd\re \u3000f\u00a0g\u2028h\u2029i   j    k\u2003l\u205fm \t \n ",
    "   leading spaces and trailing   ",
    "\n\n\nnewlines first",
    'def f(x: int) -> int:\n    """Doc."""\n    return {"a": [1, 2.5e-3, None]}[x] // 2  # comment\n',
    '<div class="x">&amp; <b>bold</b></div> https://example.com/a?b=c&d=e user@example.org',
    "Numbers: 0 7 42 123 1234 12345 3.14159 -2.5e10 1,000,000 ١٢٣ ४५६ ๗๘๙ ⅫⅣ 2024-01-31 12:30:00",
    "Punctuation!!! ??? ... --- ___ *** ((())) [[]] {{}} <<>> «» „“ ‘’ ¿¡ … — – · • ¶ § † ‡",
    "MiXeD CaSe wOrDs and snake_case and camelCase and kebab-case and SCREAMING_SNAKE",
    "a",
    " ",
    "",
]

# Texts with added tokens around and inside words; {0}, {1}... are filled per tokenizer.
TEMPLATES = [
    "{0}Hello world{1}",
    "before {0} after {1}between{0}{0}end",
    "  {0}  spaced  {1}  ",
    "x{0}y {1}z\n{0}\t{1}",
    "{0}",
    "{0}{1}{0}",
    "word{0}word {1} word",
]


def known_to_python(text: str) -> str:
    """``text`` without the characters this Python's unicodedata has not assigned yet.

    tokenizers carries a newer Unicode than Python 3.9-3.13; on characters added
    since, the runtime's classes (from unicodedata) may legitimately differ.
    """
    return "".join(c for c in text if unicodedata.category(c) != "Cn")


def corpus_with_tokens(contents: List[str]) -> List[str]:
    """The scripts, plus every template filled with the given added-token contents."""
    texts = [known_to_python(t) for t in SCRIPTS]
    if contents:
        for i, t in enumerate(TEMPLATES):
            a, b = contents[i % len(contents)], contents[(i + 1) % len(contents)]
            texts.append(t.format(a, b))
            texts.append(t.format(a.lower(), b.upper()))
    return texts


def training_texts(seed: int = 0, n: int = 3000) -> List[str]:
    """A few thousand lines mixing the scripts with random words made of their characters."""
    rng = random.Random(seed)
    alphabet = sorted({c for s in SCRIPTS for c in s if unicodedata.category(c)[0] in "LMN"})
    words = [w for s in SCRIPTS for w in s.split()]
    lines = []
    for i in range(n):
        if i % 3 == 0:
            lines.append(SCRIPTS[i % len(SCRIPTS)])
        else:
            made = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(1, 6))]
            lines.append(" ".join(rng.sample(words, 4) + made))
    return lines


def _finish(tok, special: List[str], plain: List[str]) -> str:
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(t, normalized=False) for t in special])
    tok.add_tokens(
        [
            AddedToken(plain[0], lstrip=True, rstrip=True),
            AddedToken(plain[1], single_word=True, normalized=False),
            AddedToken(plain[2], normalized=True),
        ]
    )
    return tok.to_str()


def bytelevel_bpe() -> str:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_texts(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1", special_tokens=[("<s>", 0), ("</s>", 1)]
    )
    return _finish(tok, ["<tool>"], ["<|im_sep|>", "[[cite]]", "Héllo"])


def _add_byte_tokens(text: str) -> str:
    """SentencePiece-style files carry ``<0x00>``..``<0xFF>`` in the model vocabulary."""
    config = json.loads(text)
    vocab = config["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    config["model"]["byte_fallback"] = True
    return json.dumps(config)


def sentencepiece_bpe() -> str:
    """Llama-2/Mistral shape: Prepend + Replace normalizer, byte fallback, fused unknowns."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=150,
                                  show_progress=False)
    tok.train_from_iterator(training_texts(1), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", 1)]
    )
    return _add_byte_tokens(_finish(tok, ["<|user|>"], ["<tool_call>", "[INST]", "Ñandú"]))


def metaspace_bpe() -> str:
    """Newer SentencePiece conversions: Metaspace pre-tokenizer with prepend_scheme "first"."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>"], limit_alphabet=200,
                                  show_progress=False)
    tok.train_from_iterator(training_texts(2), trainer)
    return _add_byte_tokens(_finish(tok, ["<eot>"], ["<img>", "[[x]]", "Straße"]))


def wordpiece() -> str:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=12))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=700, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        show_progress=False)
    tok.train_from_iterator(training_texts(3), trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    return _finish(tok, ["[SYS]"], ["[MASK2]", "[[q]]", "HELLO"])


def unigram() -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=900, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(training_texts(4, 1500), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    return _finish(tok, ["<extra_id_0>"], ["<sep>", "[[u]]", "ｆｕｌｌ"])


def wordlevel() -> str:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    trainer = trainers.WordLevelTrainer(vocab_size=800, special_tokens=["[UNK]", "[BOS]"], show_progress=False)
    tok.train_from_iterator(training_texts(5), trainer)
    return _finish(tok, ["[EOS]"], ["[A]", "[[w]]", "Über"])


FAMILIES: Dict[str, Callable[[], str]] = {
    "bytelevel_bpe": bytelevel_bpe,
    "sentencepiece_bpe": sentencepiece_bpe,
    "metaspace_bpe": metaspace_bpe,
    "wordpiece": wordpiece,
    "unigram": unigram,
    "wordlevel": wordlevel,
}


@functools.lru_cache(maxsize=None)
def trained(name: str) -> str:
    return FAMILIES[name]()


@functools.lru_cache(maxsize=None)
def wordlevel_with(pre_tokenizer_json: str) -> str:
    """A WordLevel tokenizer trained behind the given pre-tokenizer (to test pre-tokenizers alone)."""
    from tokenizers import Tokenizer, models, trainers

    config = json.loads(Tokenizer(models.WordLevel(unk_token="[UNK]")).to_str())
    config["pre_tokenizer"] = json.loads(pre_tokenizer_json)
    tok = Tokenizer.from_str(json.dumps(config))
    tok.train_from_iterator(training_texts(6, 600), trainers.WordLevelTrainer(vocab_size=400, special_tokens=["[UNK]"],
                                                                              show_progress=False))
    return tok.to_str()


@functools.lru_cache(maxsize=None)
def bpe_with_affixes() -> str:
    """BPE with continuing_subword_prefix and end_of_word_suffix (the BPEDecoder's habitat)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>"], continuing_subword_prefix="##",
                                  end_of_word_suffix="</w>", limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(training_texts(7, 1500), trainer)
    return tok.to_str()
