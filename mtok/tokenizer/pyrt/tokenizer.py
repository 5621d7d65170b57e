"""The pipeline: added tokens -> normalizer -> pre-tokenizer -> model -> post-processor.

``Tokenizer`` loads a HuggingFace ``tokenizer.json`` and reproduces the ids and
text of ``tokenizers.Tokenizer``.  Every component is resolved at load time, so
a file naming a component this runtime lacks is refused before any text is seen.

``from_file`` reads a large file's prepared tables from a cache when an
earlier load left them there (``prepared``), else parses it and leaves them.

The hot path is ``_encode_text``: per word it is one dict lookup in a cache of
model output keyed by the untransformed word, so that on natural text the model
and ByteLevel's byte mapping run only for words not seen before.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
from typing import Dict, Iterator, List, Optional, Sequence

from .. import TokenizerError
from .added_vocab import AddedToken, AddedVocabulary
from .decoders import Decoder, decoder_from_json
from .normalizers import aligned_prefix, normalizer_from_json
from .pre_tokenizers import pre_tokenizer_from_json
from .prepared import PreparedCache, default_dir
from .processors import processor_from_json

# Words longer than this are tokenized every time (as in tokenizers' BPE cache).
_CACHE_WORD_LEN = 256
_CACHE_ENTRIES = 1 << 17


def model_from_json(d: dict):
    """The model named by ``type`` or, in files without it, recognised by its fields."""
    if not isinstance(d, dict):
        raise TokenizerError("tokenizer.json has no model")
    kind = d.get("type") or _infer_model_type(d)
    if kind == "BPE":
        from .bpe import BPE as cls
    elif kind == "WordPiece":
        from .wordpiece import WordPiece as cls
    elif kind == "WordLevel":
        from .wordlevel import WordLevel as cls
    elif kind == "Unigram":
        from .unigram import Unigram as cls
    else:
        raise TokenizerError(f"unsupported model type {kind!r}")
    try:
        return cls.from_json(d)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise TokenizerError(f"model {kind}: invalid field {e}") from e


def _infer_model_type(d: dict) -> str:
    """The order tokenizers tries when ``type`` is missing: BPE, WordPiece, WordLevel, Unigram."""
    vocab = d.get("vocab")
    if isinstance(vocab, dict):
        if "merges" in d:
            return "BPE"
        if all(k in d for k in ("unk_token", "continuing_subword_prefix", "max_input_chars_per_word")):
            return "WordPiece"
        if "unk_token" in d:
            return "WordLevel"
    if isinstance(vocab, list):
        return "Unigram"
    raise TokenizerError("cannot tell the model type: no 'type' and no recognisable fields")


class Truncation:
    """tokenizers' truncation of a single sequence (only ids are kept, so stride has no effect)."""

    def __init__(self, d: dict):
        self.max_length = int(d["max_length"])
        self.stride = int(d.get("stride", 0))
        self.strategy = d.get("strategy", "LongestFirst")
        self.direction = d.get("direction", "Right")
        if self.strategy not in ("LongestFirst", "OnlyFirst", "OnlySecond") or self.direction not in ("Left", "Right"):
            raise TokenizerError(f"unsupported truncation {d!r}")

    def apply(self, ids: List[int], max_length: int) -> List[int]:
        if max_length == 0:
            return []
        if len(ids) <= max_length:
            return ids
        if self.strategy == "OnlySecond":
            raise TokenizerError("Truncation error: Second sequence not provided")
        if self.stride >= max_length:
            raise TokenizerError(f"truncation stride {self.stride} must be less than max length {max_length}")
        return ids[:max_length] if self.direction == "Right" else ids[len(ids) - max_length :]


class Padding:
    def __init__(self, d: dict):
        strategy = d.get("strategy", "BatchLongest")
        self.fixed = strategy.get("Fixed") if isinstance(strategy, dict) else None
        if strategy != "BatchLongest" and not isinstance(self.fixed, int):
            raise TokenizerError(f"unsupported padding strategy {strategy!r}")
        self.left = d.get("direction", "Right") == "Left"
        self.multiple = d.get("pad_to_multiple_of") or 0
        self.pad_id = int(d.get("pad_id", 0))

    def apply(self, batch: List[List[int]]) -> List[List[int]]:
        if not batch:
            return batch
        n = self.fixed if self.fixed is not None else max(len(ids) for ids in batch)
        if self.multiple and n % self.multiple:
            n += self.multiple - n % self.multiple
        pad = self.pad_id
        return [
            ids if len(ids) >= n else ([pad] * (n - len(ids)) + ids if self.left else ids + [pad] * (n - len(ids)))
            for ids in batch
        ]


class Tokenizer:
    """A subset of ``tokenizers.Tokenizer``: ids in and out, no offsets."""

    def __init__(self, config: dict, model=None):
        """``model``: the model already built (from prepared tables); else built from ``config``."""
        if not isinstance(config, dict):
            raise TokenizerError("tokenizer.json must hold a JSON object")
        version = config.get("version", "1.0")
        if version != "1.0":
            raise TokenizerError(f"unknown tokenizer version {version!r}")
        self.model = model if model is not None else model_from_json(config.get("model"))
        self.normalizer = normalizer_from_json(config.get("normalizer"))
        self.pre_tokenizer = pre_tokenizer_from_json(config.get("pre_tokenizer"))
        self.post_processor = processor_from_json(config.get("post_processor"))
        self.decoder: Optional[Decoder] = decoder_from_json(config.get("decoder"))
        self.truncation = Truncation(config["truncation"]) if config.get("truncation") else None
        self.padding = Padding(config["padding"]) if config.get("padding") else None
        normalize = self.normalizer.normalize if self.normalizer is not None else None
        tokens = [AddedToken.from_json(t) for t in config.get("added_tokens") or ()]
        self.added = AddedVocabulary(tokens, self.model, normalize)
        self._normalize = normalize
        # Only Metaspace's prepend_scheme "first" asks whether a word starts the input,
        # which after normalization depends on the normalizer's alignments.
        self._lead_of = None
        if self.pre_tokenizer is not None and self.pre_tokenizer.needs_first and self.normalizer is not None:
            self._lead_of = functools.partial(aligned_prefix, self.normalizer)
        self._split = self.pre_tokenizer.split if self.pre_tokenizer is not None else None
        self._transform = self.pre_tokenizer.transform if self.pre_tokenizer is not None else None
        self._cache: Dict[str, List[int]] = {}
        self._token_str: Dict[int, str] = {}

    @classmethod
    def from_str(cls, json_text: str) -> "Tokenizer":
        with _gc_paused():
            return cls(_parse(json_text))

    @classmethod
    def from_file(cls, path: str, cache_dir: Optional[str] = None) -> "Tokenizer":
        """The tokenizer of ``path``; ``cache_dir``: where prepared tables are kept
        (None: ``prepared.default_dir()``; ``"off"``: nowhere)."""
        # Read as bytes and decode once: text mode's newline translation costs
        # ~0.25 s on a 33 MB file, and JSON has no newline inside a string to translate.
        with open(path, "rb") as f:
            raw = f.read()
        directory = default_dir() if cache_dir is None else (None if cache_dir in ("", "off") else cache_dir)
        cache = PreparedCache.for_file(raw, directory)
        with _gc_paused():
            tok = cls._from_prepared(cache.load()) if cache is not None else None
            if tok is not None:
                return tok
            config = _parse(raw.decode("utf-8"))
            tok = cls(config)
        if cache is not None:
            form = tok._prepared_form(config)
            if form is not None:
                cache.store(form)
        return tok

    @classmethod
    def _from_prepared(cls, form) -> Optional["Tokenizer"]:
        """The tokenizer that ``_prepared_form`` described, or None (then the file is parsed)."""
        if form is None:
            return None
        from .bpe import BPE

        try:
            kind, config, state = form
            return cls(config, model=BPE.from_prepared(config["model"], state)) if kind == "BPE" else None
        except Exception:  # a cached form that does not fit is a miss, never an error
            return None

    def _prepared_form(self, config: dict) -> Optional[tuple]:
        """The file's config without the model's vocab and merges, and the model's prepared
        tables (BPE only: the other models load fast)."""
        prepared = getattr(self.model, "prepared", None)
        if prepared is None:
            return None
        model = {k: v for k, v in config["model"].items() if k not in ("vocab", "merges")}
        return ("BPE", dict(config, model=model), prepared())

    # -- encoding ------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        ids = self._post_process(self._encode_text(text), add_special_tokens)
        return self.padding.apply([ids])[0] if self.padding is not None else ids

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> List[List[int]]:
        batch = [self.encode(t, add_special_tokens) for t in texts]
        return self.padding.apply(batch) if self.padding is not None else batch

    def _encode_text(self, text: str) -> List[int]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates: tokenizers refuses them too
            raise TokenizerError(f"text is not valid Unicode: {e}") from None
        ids: List[int] = []
        cache = self._cache
        split = self._split
        for piece, tok_id, lead in self.added.segments(text, self._normalize, self._lead_of):
            if tok_id is not None:
                ids.append(tok_id)
                continue
            for word in split(piece, lead) if split is not None else (piece,):
                hit = cache.get(word)
                if hit is None:
                    hit = self._tokenize_word(word)
                ids += hit
        return ids

    def _tokenize_word(self, word: str) -> List[int]:
        ids = self.model.tokenize(self._transform(word) if self._transform is not None else word)
        if len(word) < _CACHE_WORD_LEN:
            if len(self._cache) >= _CACHE_ENTRIES:
                self._cache.clear()
            self._cache[word] = ids
        return ids

    def _post_process(self, ids: List[int], add_special_tokens: bool) -> List[int]:
        processor = self.post_processor
        if self.truncation is not None:
            added = processor.added_tokens(False) if processor is not None else 0
            limit = self.truncation.max_length
            if add_special_tokens and added:
                # tokenizers subtracts in unsigned arithmetic: below zero wraps, truncating nothing.
                limit = limit - added if limit >= added else len(ids)
            ids = self.truncation.apply(ids, limit)
        if processor is None:
            return ids
        parts = processor.process([ids], add_special_tokens)
        return parts[0] if len(parts) == 1 else [i for part in parts for i in part]

    # -- decoding ------------------------------------------------------------------
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        names = self._token_str
        tokens = [names.get(i) for i in ids]
        if None in tokens:
            tokens = [t for t in map(self._token_of, ids) if t is not None]  # unknown ids are skipped
        special = self.added.special_contents
        if skip_special_tokens and special and not special.isdisjoint(tokens):
            tokens = [t for t in tokens if t not in special]
        if self.decoder is None:
            return " ".join(tokens)  # type: ignore[arg-type]
        return self.decoder.decode(tokens)  # type: ignore[arg-type]

    def _token_of(self, i: int) -> Optional[str]:
        t = self._token_str.get(i)
        if t is None:
            t = self.id_to_token(i)
            if t is not None:
                self._token_str[i] = t
        return t

    def decode_batch(self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool = True) -> List[str]:
        return [self.decode(ids, skip_special_tokens) for ids in seqs]

    # -- vocabulary ----------------------------------------------------------------
    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        base = self.model.get_vocab_size()
        if not with_added_tokens:
            return base
        vocab = self.model.vocab
        return base + sum(1 for t in self.added.content_to_id if t not in vocab)

    def token_to_id(self, token: str) -> Optional[int]:
        i = self.added.content_to_id.get(token)
        return i if i is not None else self.model.vocab.get(token)

    def id_to_token(self, i: int) -> Optional[str]:
        t = self.added.id_to_token(i)
        return t if t is not None else self.model.id_to_token(i)

    def get_added_tokens_decoder(self) -> Dict[int, AddedToken]:
        return dict(sorted(self.added.tokens.items()))


def _parse(json_text: str) -> dict:
    try:
        return json.loads(json_text)
    except ValueError as e:
        raise TokenizerError(f"tokenizer.json is not valid JSON: {e}") from e


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """A large file is hundreds of thousands of small lists and dicts: without the
    cyclic collector running over them again and again, json parses them and the
    tables are built ~20 % faster."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
