"""Grammar notation read by the Korean analyser: which morpheme sequences show a pattern in a sentence, and
the forms a sentence's analysis is compared in (whether two notations name the same construction:
:mod:`hyde_tutor.retrieval.naming`).

:func:`pattern_sequences` turns grammar notation (``-(으)ㄹ 뻔하다``, ``-아/어 주다 / -아/어 드리다``, ``을/를``)
into morpheme sequences: each alternative is written out with a dummy stem (a verb for an ending, a noun for a
particle), analysed, and the dummy's morphemes dropped; the sequences are normalised so that allomorphs meet
(``을``/``ᆯ``, ``으세요``/``세요``, ``습니다``/``ᆸ니다``, ``를``/``을``, ``것``/``거``).

Used by the reply checks (``tutor/checks.py``: is the entry's pattern in the model's sentence?) and by the HyDE
pipeline (``hyde/stages.py``: which entry does a hypothesis name in its header?).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

from .analysis import morphemes

__all__ = ["GAP", "HANGUL", "SOUND_OPTION", "is_infix", "pattern_sequences", "sentence_morphemes", "uses_pattern"]

HANGUL = re.compile("[가-힣]")
SOUND_OPTION = "[으스이ㄴ는/]+"
"""What a bracket holds when it is a sound the stem decides (``(으)``, ``(스)``, ``(이)``, ``(ㄴ/는)``): the analyser
reads such a notation both ways itself."""
_JAMO_CODA = {"ㄱ": "\u11a8", "ㄴ": "\u11ab", "ㄹ": "\u11af", "ㅁ": "\u11b7", "ㅂ": "\u11b8", "ㅅ": "\u11ba",
              "ㅆ": "\u11bb"}
_PARTICLE_NOUNS = ("책", "사과")
_VERB_STEMS = ("가", "먹")
_PARTICLE_START = ("이", "가", "은", "는", "을", "를", "에", "께", "와", "과", "의", "도", "만", "로", "으로", "랑",
                   "이랑", "처럼", "같이", "보다", "마다", "밖에", "부터", "까지", "조차", "마저", "나", "이나", "라도",
                   "이라도", "야말로", "이야말로", "한테", "하고")
_J_SAME = {"를": "을", "가": "이", "는": "은", "와": "과", "로": "으로", "랑": "이랑", "나": "이나", "라도": "이라도",
           "야말로": "이야말로"}


def _coarse(tag: str) -> str:
    if tag.startswith(("V", "XSV", "XSA")):
        return "V"
    return tag[:1]


def _norm(form: str, tag: str) -> tuple[str, str]:
    """A morpheme as the matcher compares it: allomorphs of one ending or particle made equal."""
    group = _coarse(tag)
    form = unicodedata.normalize("NFD", unicodedata.normalize("NFC", form))
    if group == "E":
        for lead in ("\u110b\u1173", "\u1109\u1173"):  # 으, 스 before the ending proper: 으세요 / 세요, 습니다 / ㅂ니다
            if form.startswith(lead) and len(form) > 2:
                form = form[2:]
        form = form.replace("\u110b\u1161", "\u110b\u1165")  # 아 -> 어 (kiwi mostly does this itself)
    elif group == "J":
        nfc = unicodedata.normalize("NFC", form)
        form = unicodedata.normalize("NFD", _J_SAME.get(nfc, nfc))
    elif group == "N" and unicodedata.normalize("NFC", form) == "거":
        form = unicodedata.normalize("NFD", "것")
    return unicodedata.normalize("NFC", form), group


def _alternatives(notation: str) -> list[str]:
    """Concrete spellings of a pattern's notation: comments and placeholders dropped, ``(으)`` both ways, a
    Korean ending in brackets right after a word both ways (``보니(까)``, ``위해(서)``), each ``a/b`` word both
    ways, `` / `` and ``,`` separating whole alternatives."""
    text = re.sub(r"\(([^)]*)\)", lambda m: m.group(0) if _option(notation, m) else " ", notation)
    text = re.sub(r"[а-яёА-ЯЁa-zA-Z+?]+", " ", text).replace("…", " … ")  # N, + отрицание; … is a gap
    out: list[str] = []
    for whole in re.split(r"\s/\s|,\s*", text):
        whole = " ".join(whole.split())
        if not whole:
            continue
        options = [""]
        for piece in re.split(r"(\([^)]*\))", whole):
            if piece.startswith("("):
                inner = piece[1:-1].split("/")
                options = [o + i for o in options for i in ["", *inner]]
            else:
                options = [o + piece for o in options]
        for option in options:
            words = [_slashed(w) for w in option.split(" ")]
            out += [" ".join(combo) for combo in itertools.product(*words)]
    return list(dict.fromkeys(_merge_jamo(o) for o in out if HANGUL.search(o) or re.search("[ㄱ-ㅎ]", o)))


def _option(notation: str, bracket: re.Match[str]) -> bool:
    """Whether a bracketed part of ``notation`` is an optional piece of the construction: ``(으)``, ``(스)``,
    ``(이)``, ``(ㄴ/는)``, or Korean letters right after a word (``보니(까)``, ``-던데(요)``); a bracket after a space
    is a comment (``(반말)``, ``(причина)``, ``(시간이)``)."""
    inner, before = bracket.group(1), notation[bracket.start() - 1:bracket.start()]
    return bool(re.fullmatch(SOUND_OPTION, inner)
                or (re.fullmatch("[가-힣]+", inner) and re.fullmatch("[가-힣ㄱ-ㅎ]", before)))


def _slashed(word: str) -> list[str]:
    """A word's ``/`` alternatives; a one-character alternative takes the longer one's tail: ``ㄴ/는지`` ->
    ``ㄴ지``, ``는지``; ``았/었더니`` -> ``았더니``, ``었더니``."""
    dash = "-" if word.startswith("-") else ""
    alts = word[len(dash):].split("/")
    longest = max(alts, key=len)
    return [dash + (a + longest[1:] if len(a) == 1 and len(longest) > 2 else a) for a in alts]


def _has_coda(syllable: str) -> bool:
    """Whether a Hangul syllable ends in a consonant (``먹``, not ``가``)."""
    return bool((ord(syllable[-1]) - 0xAC00) % 28)


def _merge_jamo(text: str) -> str:
    """A syllable followed by a lone consonant becomes one syllable: ``으ㄹ`` -> ``을``, ``스ㅂ`` -> ``습``."""
    def merge(m: re.Match[str]) -> str:
        syllable, jamo = m.group(1), m.group(2)
        if _has_coda(syllable) or jamo not in _JAMO_CODA:
            return m.group(0)
        return chr(ord(syllable) + ord(_JAMO_CODA[jamo]) - 0x11A7)
    return re.sub("([가-힣])([ㄱ-ㅎ])", merge, text)


_CONSONANT_ONLY = re.compile("-는(다|대|단|답|냐|냬)")
"""Endings whose ``는`` is the plain present after a consonant stem (``-는다고``, ``-는대요``; ``ㄴ`` after a vowel)."""


def _with_stem(word: str, stem: str) -> str:
    """``word`` (an ending without its ``-``) on ``stem``: a lone consonant fuses with the stem's last syllable."""
    if word[:1] in _JAMO_CODA:
        return _merge_jamo(stem + word[0]) + word[1:]
    return stem + word


def _analysed(phrase: str, dummies: Sequence[tuple[int, int]], trailing_da: bool) -> tuple[tuple[str, str], ...]:
    """The morphemes of ``phrase`` outside the dummy stems' spans, normalised; a dictionary ``다`` at the end
    dropped (``trailing_da``: the notation ended in it)."""
    tokens, dropped = [], set()
    for f, t, start, _ in morphemes(phrase):
        dummy = next((s for s, _ in dummies if start == s and s not in dropped and _coarse(t) in ("V", "N")), None)
        if dummy is not None:
            dropped.add(dummy)  # the stem itself (its first morpheme at its position), not what fused with it
        elif not t.startswith(("S", "W_", "Z")):
            tokens.append((f, t))
    if trailing_da and len(tokens) > 1 and tokens[-1][0] == "다" and tokens[-1][1].startswith("E"):
        tokens = tokens[:-1]
    return _normed(tokens)


_E_SPLIT = {"세요": ("시", "어요"), "셨": ("시", "었"), "십시오": ("시", "ᆸ시오"), "셔": ("시", "어"),
            "셔서": ("시", "어서"), "셔요": ("시", "어요")}
"""Endings kiwipiepy fuses with the honorific ``시``: split, so ``-(으)시-`` meets «읽으세요»."""


def _normed(tokens: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for form, tag in tokens:
        form, group = _norm(form, tag)
        if group == "E":
            form = re.sub("^(?:\u11ab|는)(?=[다대])", "", form)  # 간다고 / 먹는다고 / 바쁘다고: one 다고
            out += [(f, "E") for f in _E_SPLIT.get(form, (form,))]
        else:
            out.append((form, group))
    return tuple(out)


def _segment(words: list[str], trailing_da: bool) -> list[tuple[tuple[str, str], ...]]:
    """The morpheme sequences of one gap-free stretch of a pattern's words."""
    if words[0].startswith("-") and words[0].endswith("-") and len(words[0]) > 2:  # an infix: -았-, -겠-, -시-
        words, trailing_da = [words[0][:-1] + "다", *words[1:]], True
    starts = [""]
    if words[0].startswith("-"):
        starts = list(_VERB_STEMS) + (list(_PARTICLE_NOUNS) if words[0][1:2] == "에" else [])  # -에 따라
    elif words[0].startswith(_PARTICLE_START) and len(words[0]) <= 4:
        starts = list(_PARTICLE_NOUNS)
    found: list[tuple[tuple[str, str], ...]] = []
    for start in starts:
        if start and _CONSONANT_ONLY.match(words[0]) and not _has_coda(start):
            continue  # -는다 follows a consonant stem only (먹는다, 간다): on 가 the analyser reads nonsense
        pieces, dummies, at = [], [], 0
        for i, word in enumerate(words):
            if word.startswith("-") and word[1:]:
                stem = start if i == 0 else "가"
                dummies.append((at, len(stem)))
                word = _with_stem(word[1:], stem)
            elif i == 0 and start:
                dummies.append((at, len(start)))
                word = start + word
            pieces.append(word)
            at += len(word) + 1
        sequence = _analysed(" ".join(pieces), dummies, trailing_da)
        first = "J" if start in _PARTICLE_NOUNS else "E" if start else ""
        if sequence and (not first or sequence[0][1] == first) and sequence not in found:
            found.append(sequence)
    return found


GAP = ("…", "")
"""A gap in a pattern (``부터 … 까지``): any morphemes may stand there."""


@lru_cache(maxsize=1024)
def pattern_sequences(notation: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The morpheme sequences any of which shows ``notation`` in a sentence (empty: nothing to look for)."""
    found: list[tuple[tuple[str, str], ...]] = []
    for alternative in _alternatives(notation):
        segments = [s.replace("~", "-").split() for s in alternative.split("…") if s.strip()]
        trailing_da = alternative.rstrip("-").endswith("다")
        options = [_segment(words, trailing_da and k == len(segments) - 1) for k, words in enumerate(segments)]
        for combo in itertools.product(*options):
            sequence = tuple(itertools.chain.from_iterable(
                (*([GAP] if k else []), *part) for k, part in enumerate(combo)))
            if sequence and sequence not in found:
                found.append(sequence)
    return tuple(found)


_INFIXES = frozenset({"었", "겠", "시"})
"""The tense, future and honorific infixes as the analyser's forms are normalised (았 → 었, 셨 → 시 + 었)."""


def is_infix(morpheme: tuple[str, str]) -> bool:
    """A tense, future or honorific infix (``-았/었-``, ``-겠-``, ``-(으)시-``) as the analyser normalises it."""
    return morpheme[1] == "E" and morpheme[0] in _INFIXES


def _contains(sentence: Sequence[tuple[str, str]], pattern: Sequence[tuple[str, str]]) -> bool:
    """``pattern`` in ``sentence`` in order, a tense or honorific infix (EP) of the sentence allowed between."""
    for begin in range(len(sentence)):
        i, j = begin, 0
        while i < len(sentence) and j < len(pattern):
            if pattern[j] == GAP:
                rest = pattern[j + 1:]
                return any(_contains(sentence[k:], rest) for k in range(i, len(sentence)))
            if sentence[i] == pattern[j]:
                i, j = i + 1, j + 1
            elif j > 0 and is_infix(sentence[i]):
                i += 1
            else:
                break
        if j == len(pattern):
            return True
    return False


def sentence_morphemes(sentence: str) -> tuple[tuple[str, str], ...]:
    """The sentence's morphemes as the matcher compares them (punctuation left out)."""
    return _normed((f, t) for f, t, _, _ in morphemes(sentence) if not t.startswith(("S", "W_", "Z")))


def uses_pattern(sentence: str, notation: str) -> bool:
    """Whether the Korean analyser finds the pattern ``notation`` in ``sentence`` (a notation with nothing
    Korean to look for, e.g. a document's topic, never matches)."""
    if not HANGUL.search(sentence):
        return False
    words = sentence_morphemes(sentence)
    joined = "".join(f for f, _ in words)
    for pattern in pattern_sequences(notation):
        if _contains(words, pattern):
            return True
        # the analyser tags one word two ways (비해서: 비하/VV + 어서, or 비/NNG + 하/XSV + 어서): a pattern of
        # several morphemes also counts when its forms follow one another in the sentence's
        forms = "".join(f for f, _ in pattern)
        if len(pattern) >= 2 and GAP not in pattern and len(forms) >= 3 and forms in joined:
            return True
    return False
