"""Natural text in several scripts, for prompts that look like what servers are sent.

The bench's default prompts are random word-like tokens; real prompts are
prose, Hangul, source code and mixtures of them, which tokenize differently
(longer merges in English, two or three bytes a syllable in Korean, runs of
punctuation and indentation in code).  This module makes such prompts offline:

- ``english``: docstrings and comments of the running Python's standard library
  (see :mod:`.stdlib_text`; PSF-licensed text every Python has);
- ``code``: the source of the same modules;
- ``korean``: sentences written for this module, shuffled and joined;
- ``mixed``: a Korean sentence, an English one and a line of code in turn, as in
  a question about a program;
- ``natural``: the four above in turn, one per prompt.

A prompt is a slice of such text cut to an exact token count of the server's
tokenizer; it is cut by characters, never by tokens, so no UTF-8 sequence is
split.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Dict, List

from . import stdlib_text

KINDS = ("english", "korean", "code", "mixed")
TEXT_CHOICES = ("random", "natural") + KINDS
CORPUS_CHARS = 200_000  # enough text per kind that 256 prompts of 2 KB rarely overlap

# Written for mtok's benchmark (no source): everyday and technical Korean prose.
KOREAN = [
    "오늘 아침에는 비가 조금 내렸지만 점심 무렵부터 하늘이 맑게 개었다.",
    "새로 문을 연 식당은 된장찌개와 김치볶음밥이 맛있다고 동네에서 소문이 났다.",
    "서버가 요청을 받으면 먼저 본문을 읽고, 그다음에 프롬프트를 토큰으로 나눈다.",
    "토크나이저는 문장을 작은 조각으로 쪼개어 모델이 이해할 수 있는 숫자로 바꾼다.",
    "주말마다 한강 공원에서 자전거를 타는 사람들이 점점 늘어나고 있다.",
    "이 함수는 입력이 비어 있으면 아무것도 하지 않고 바로 빈 목록을 돌려준다.",
    "할머니께서는 추석이 되면 송편을 빚으시며 옛날이야기를 들려주셨다.",
    "작업자 프로세스가 두 개일 때 처리량이 거의 두 배가 되는지 측정해 보았다.",
    "지하철 2호선은 출근 시간에 사람이 너무 많아서 한 대를 그냥 보내야 할 때도 있다.",
    "오류가 나면 서버는 상태 코드와 함께 무엇이 잘못되었는지 설명하는 메시지를 보낸다.",
    "봄이 오면 진해의 벚꽃길을 보러 전국에서 관광객이 몰려든다.",
    "캐시를 데워 두면 같은 문장을 두 번째로 처리할 때 훨씬 빨라진다.",
    "그는 대학에서 국어국문학을 전공했지만 지금은 소프트웨어 회사에서 일한다.",
    "요청이 몰릴 때에도 응답 시간이 일정하게 유지되는 것이 무엇보다 중요하다.",
    "제주도의 바닷바람은 겨울에도 생각보다 차갑지 않아서 산책하기에 좋았다.",
    "각 요청의 CPU 사용 시간을 프로세스별로 나누어 보면 병목이 어디인지 알 수 있다.",
    "도서관에서 빌린 책을 반납하는 날짜를 깜빡 잊어서 연체료를 내고 말았다.",
    "스트리밍 응답은 토큰이 생성될 때마다 조금씩 클라이언트에게 전달된다.",
    "김장철이 되면 온 가족이 모여 배추를 절이고 양념을 버무린다.",
    "설정 파일에 잘못된 값이 들어 있으면 서버는 시작하지 않고 이유를 알려 준다.",
    "어제 본 영화는 줄거리가 조금 뻔했지만 배우들의 연기가 훌륭했다.",
    "한글은 자음과 모음을 모아 한 글자를 이루기 때문에 배우기가 비교적 쉽다.",
    "네트워크가 끊기면 클라이언트는 잠시 기다렸다가 다시 연결을 시도한다.",
    "시장 골목의 떡볶이 가게는 삼십 년 넘게 같은 자리에서 장사를 하고 있다.",
    "테스트가 모두 통과한 뒤에야 변경 사항을 본 브랜치에 합칠 수 있다.",
    "가을 설악산의 단풍은 붉은색과 노란색이 어우러져 그림처럼 아름답다.",
    "긴 문서를 한 번에 보내는 대신 여러 조각으로 나누어 보내면 메모리를 아낄 수 있다.",
    "아이들은 눈이 오자마자 마당으로 뛰어나가 눈사람을 만들었다.",
]


def _from_stdlib(pieces: Callable[[str], List[str]], fallback: str) -> List[str]:
    """Pieces of the stdlib's sources (``pieces`` picks them from one source) until
    there are CORPUS_CHARS of them; ``fallback`` where no source can be read."""
    out: List[str] = []
    size = 0
    for path in stdlib_text.sources():
        source = stdlib_text.read(path)
        for piece in pieces(source) if source else ():
            out.append(piece)
            size += len(piece)
        if size >= CORPUS_CHARS:
            break
    return out or [fallback]


def _english(rnd: random.Random) -> List[str]:
    return _from_stdlib(lambda src: (stdlib_text.docstrings(src) or []) + stdlib_text.comments(src),
                        "The quick brown fox jumps over the lazy dog.")


def _code(rnd: random.Random) -> List[str]:
    return _from_stdlib(lambda src: [src], "def f(x):\n    return x + 1\n")


def _korean(rnd: random.Random) -> List[str]:
    out = []
    while sum(map(len, out)) < CORPUS_CHARS // 4:
        para = rnd.sample(KOREAN, rnd.randint(3, 6))
        out.append(" ".join(para))
    return out


def _mixed(rnd: random.Random, english: List[str], code: List[str]) -> List[str]:
    lines = [ln for src in code[:8] for ln in src.splitlines() if ln.strip()]
    sentences = [s for doc in english[:400] for s in doc.replace("\n", " ").split(". ") if len(s) > 20]
    out = []
    for _ in range(400):
        out.append(f"{rnd.choice(KOREAN)} {rnd.choice(sentences)}.\n```python\n{rnd.choice(lines)}\n```")
    return out


def corpora(seed: int = 0) -> Dict[str, str]:
    """One long text per kind, the same for the same seed and Python."""
    rnd = random.Random(seed)
    english, code = _english(rnd), _code(rnd)
    parts = {"english": english, "code": code, "korean": _korean(rnd), "mixed": _mixed(rnd, english, code)}
    return {kind: "\n\n".join(p) for kind, p in parts.items()}


class NaturalPromptMaker:
    """Slices of natural text, each cut to the token count asked for.

    ``kind`` is one of :data:`KINDS`, or ``natural`` for each of them in turn.
    """

    def __init__(self, tokenizer: Any, kind: str = "natural", seed: int = 0):
        if kind not in KINDS and kind != "natural":
            raise ValueError(f"unknown text kind {kind!r}; choose from {', '.join(TEXT_CHOICES)}")
        self.tok = tokenizer
        self.kinds = KINDS if kind == "natural" else (kind,)
        self.texts = corpora(seed)
        self.rnd = random.Random(seed)
        self.made = 0

    def make(self, n_tokens: int) -> str:
        kind = self.kinds[self.made % len(self.kinds)]
        self.made += 1
        text = self.texts[kind]
        start = self.rnd.randrange(max(1, len(text) - 16 * max(n_tokens, 1)))
        start = text.find(" ", start) + 1  # from a word's start (0 if none follows)
        return self.cut(text[start:], n_tokens)

    def count(self, text: str) -> int:
        return len(self.tok.encode(text))

    def cut(self, text: str, n_tokens: int) -> str:
        """The longest prefix of ``text`` that the server counts as at most ``n_tokens`` tokens
        (special tokens included), found by bisecting on characters."""
        lo, hi = 1, min(len(text), 16 * max(n_tokens, 1))
        while hi < len(text) and self.count(text[:hi]) <= n_tokens:
            hi = min(len(text), hi * 2)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count(text[:mid]) <= n_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]
