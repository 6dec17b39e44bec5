"""Korean-aware text analyser for BM25.

* Hangul runs are split into morphemes by kiwipiepy, so ``먹고 싶어요`` yields
  ``먹, 고, 싶, 어요`` and meets an entry about ``-고 싶다`` on ``고`` and ``싶``.
* Grammar notation (``-(으)ㄹ 수 있다``, ``-았/었더니``) is expanded: optional
  parts in brackets are dropped, ``/`` alternatives are analysed one by one and
  a dummy stem ``하`` is put in front so the ending is analysed as an ending.
* Cyrillic words are lower-cased and reduced to Snowball (Russian) stems,
  with a short list of function words removed.
* Latin words and numbers are lower-cased.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable
from functools import cached_property

import snowballstemmer

_HANGUL = "가-힣ㄱ-ㅎㅏ-ㅣ"
_HAS_HANGUL = re.compile(f"[{_HANGUL}]")
_HANGUL_RUN = re.compile(f"[{_HANGUL}]+")
_CYRILLIC_WORD = re.compile(r"[а-яё]+")
_LATIN_WORD = re.compile(r"[a-z0-9]+")
_BRACKETED = re.compile(r"\([^)]*\)")
# Codas that merge with the dummy stem: -ㄹ 수 있다 -> 할 수 있다.
_CODA_SYLLABLE = {"ㄴ": "한", "ㄹ": "할", "ㅁ": "함", "ㅂ": "합"}
_DUMMY_STEM = "하"
_DROP_TAG_PREFIXES = ("S", "W_", "Z")
_KEEP_SYMBOL_TAGS = {"SL", "SH", "SN"}

# Russian function words that carry no topic. Written for this project.
RUSSIAN_STOPWORDS = frozenset(
    """
    а без бы в во вот все всё вы да для до его ее её если есть же за и из или им их
    к как ко когда ли либо мне мы на над не нет ни но о об однако он она они оно от
    по под при про с со так также то тоже у уже что чтобы это этот эта эти я ты мой
    моя мои твой свой себя там тут где чем чего кто который которая которые
    """.split()
)


_KIWI_LOCK = threading.RLock()
_KIWI: list[object] = []


def shared_kiwi():  # type: ignore[no-untyped-def]
    """The process's one kiwipiepy analyser (loaded on first use, about 2 s): the BM25 analyser and the reply's
    checks share it, so a warm-up loads it for both. Call its methods under :func:`morphemes`' lock."""
    with _KIWI_LOCK:
        if not _KIWI:
            from kiwipiepy import Kiwi

            _KIWI.append(Kiwi())
        return _KIWI[0]


def morphemes(text: str) -> list[tuple[str, str, int, int]]:
    """``(form, tag, start, length)`` of each morpheme kiwipiepy finds in ``text`` (thread-safe)."""
    kiwi = shared_kiwi()
    with _KIWI_LOCK:
        tokens = kiwi.tokenize(text)
    return [(t.form, t.tag, t.start, t.len) for t in tokens]


class KoreanAwareAnalyzer:
    """Turns mixed Korean / Russian / Latin text into index terms.

    Thread-safe: kiwipiepy is loaded once (lazily) and guarded by a lock.
    """

    name = "kiwi-snowball-v1"

    def __init__(self) -> None:
        self._lock = _KIWI_LOCK
        self._local = threading.local()  # Snowball stemmers keep state per call: one per thread

    @property
    def _stemmer(self) -> snowballstemmer.stemmer:
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = snowballstemmer.stemmer("russian")
        return stemmer

    @cached_property
    def _kiwi(self):  # type: ignore[no-untyped-def]
        return shared_kiwi()

    def tokenize(self, text: str) -> list[str]:
        """Return the index terms of ``text`` in order (duplicates kept)."""
        text = unicodedata.normalize("NFC", text).lower().replace("ё", "е")
        terms: list[str] = []
        phrase: list[str] = []
        for word in text.split():
            if _HAS_HANGUL.search(word) and not _is_notation(word):
                phrase.append(word)
                continue
            terms.extend(self._korean(" ".join(phrase)))
            phrase.clear()
            if _HAS_HANGUL.search(word):
                terms.extend(self._notation(word))
            else:
                terms.extend(self._other(word))
        terms.extend(self._korean(" ".join(phrase)))
        return terms

    def tokenize_many(self, texts: Iterable[str]) -> list[list[str]]:
        return [self.tokenize(t) for t in texts]

    # -- Korean -------------------------------------------------------------
    def _korean(self, phrase: str, drop_dummy: bool = False) -> list[str]:
        if not phrase:
            return []
        with self._lock:
            tokens = self._kiwi.tokenize(phrase)
        if drop_dummy and tokens and tokens[0].form == _DUMMY_STEM:
            tokens = tokens[1:]
        return [
            unicodedata.normalize("NFKC", t.form)
            for t in tokens
            if t.tag in _KEEP_SYMBOL_TAGS or not t.tag.startswith(_DROP_TAG_PREFIXES)
        ]

    def _notation(self, word: str) -> list[str]:
        """Analyse grammar notation such as ``-(으)ㄹ``, ``-았/었더니``, ``이/가``."""
        is_ending = word.startswith(("-", "~", "("))
        stripped = _BRACKETED.sub("", word).strip("-~.,;:!?«»\"'")
        terms: list[str] = []
        for alternative in stripped.split("/"):
            run = "".join(_HANGUL_RUN.findall(alternative))
            if not run:
                continue
            if is_ending:
                terms.extend(self._korean(_with_dummy_stem(run), drop_dummy=True))
            else:
                terms.extend(self._korean(run))
        return terms

    # -- Russian and Latin --------------------------------------------------
    def _other(self, word: str) -> list[str]:
        terms: list[str] = []
        for ru in _CYRILLIC_WORD.findall(word):
            if ru not in RUSSIAN_STOPWORDS:
                terms.append(self._stemmer.stemWord(ru))
        terms.extend(_LATIN_WORD.findall(word))
        return terms


def _is_notation(word: str) -> bool:
    return word.startswith(("-", "~")) or "/" in word or "(" in word


def _with_dummy_stem(run: str) -> str:
    first = run[0]
    if first in _CODA_SYLLABLE:
        return _CODA_SYLLABLE[first] + run[1:]
    return _DUMMY_STEM + run
