"""Replies that teach from the entries the search found, by construction.

The embedded 1.5B model, asked for free text, answers «Нужно сказать: я хочу поехать в Пусан.» with the
right entry in front of it and not one Korean character, or refuses; asked for an explanation, it states
falsehoods with the reference's authority and stops mid-word at its token cap (issue 36). So with it the tutor
asks for a structured answer (:class:`GroundedAnswer`: which found entry, ONE Korean sentence for the learner's
situation and its translation), constrained token by token through llama.cpp's JSON-schema grammar
(pydantic-ai ``NativeOutput``), and :func:`reply_parts` writes the reply from the chosen entry: its name, its own
explanation (whole sentences) and its own examples; the model's sentence is added only when the checks of
:mod:`~hyde_tutor.tutor.checks` (no LLM) pass it. Nothing else the model wrote reaches the learner.

For any model and any reply (capable models in tools mode write free text), :func:`ground_reply` is the
last guard: when entries were found and the reply names none of them or holds no Korean, it is replaced
by the top entry, rendered, with one line saying so.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..corpus.rendering import distinct_entries
from .checks import korean_sentences, sentence_problem

__all__ = ["GroundedAnswer", "HeadlineRule", "ReplyPart", "clip_sentences", "distinct_entries", "early_headline", "earlier_korean",
           "entry_parts", "ground_reply", "headline_entry", "render_answer", "render_entry", "render_parts",
           "reply_parts", "with_answer_cap"]

HANGUL = re.compile("[가-힣]")
CYRILLIC = re.compile("[а-яёА-ЯЁ]")
RUSSIAN_TEXT = re.compile(r"^[а-яёА-ЯЁ0-9\s.,!?…:;\-—–«»\"'()]*$")
"""What a translation may hold: Cyrillic, digits, spaces, punctuation (no Hangul, no Latin)."""
ENTRY_TEXT_CHARS = 300
"""The entry's explanation in a reply: whole sentences up to this length."""
MAX_ENTRIES = 5
KOREAN_CHARS = 80
RUSSIAN_CHARS = 120
REPLACED_LINE = "[ответ модели не опирался на найденные статьи; вот самая подходящая из них]"


class GroundedAnswer(BaseModel):
    """The tutor's structured answer: the chosen entry and ONE Korean sentence for the learner's situation, with
    its Russian translation. The sentence is shown only when :func:`~hyde_tutor.tutor.checks.sentence_problem`
    finds nothing wrong with it; the explanation the learner reads is always the entry's own."""

    entry: int = Field(ge=1, le=MAX_ENTRIES, description="Номер статьи из списка найденных, по которой ты отвечаешь.")
    korean: str = Field(max_length=KOREAN_CHARS, description="Одно короткое предложение по-корейски (только "
                                                               "корейские буквы) для ситуации ученика, по этой "
                                                               "конструкции.")
    russian: str = Field(max_length=RUSSIAN_CHARS, description="Перевод этого предложения на русский.")


def _name(e: dict[str, Any]) -> str:
    if e.get("pattern"):
        return " — ".join(str(x) for x in (e.get("pattern"), e.get("name")) if x)
    return ": ".join(str(x) for x in (e.get("topic"), e.get("subtopic")) if x) or str(e.get("title") or e.get("id"))


def render_entry(e: dict[str, Any], max_examples: int = 2) -> str:
    """One found entry as the learner reads it: its name, its explanation, its own Korean examples."""
    lines = [f"**{_name(e)}**"]
    text = clip_sentences(str(e.get("explanation") or e.get("content") or e.get("text") or ""), 400)
    if text:
        lines.append(text)
    for ex in list(e.get("examples") or [])[:max_examples]:
        if isinstance(ex, dict) and ex.get("ko"):
            lines.append(f"Пример: {ex['ko']} — {ex.get('ru', '')}".rstrip(" —"))
    return "\n".join(lines)


ANSWER_MAX_TOKENS = 320
"""The token cap of a structured answer: its fields at their longest (120 characters of Korean, 240 of Russian)
fit, so the JSON is never cut off (with the hypotheses' cap of 200 the embedded model's answer was cut off in one
turn of twelve: ``OutputTokenLimitExceeded``)."""

def with_answer_cap(settings: dict[str, Any], cap: int = ANSWER_MAX_TOKENS) -> dict[str, Any]:
    """Model ``settings`` with the answer's token cap (a compatible server's ``extra_body.max_tokens``) at least
    ``cap``."""
    body = dict(settings.get("extra_body") or {})
    if "max_tokens" not in body:
        return settings
    return {**settings, "extra_body": {**body, "max_tokens": max(int(body["max_tokens"]), cap)}}


HeadlineRule = Literal["model", "top", "unsure"]
"""Which found entry heads a structured reply: the ``model``'s choice; the search's ``top`` entry; the top entry
when the search is sure (its top score leads by :data:`SURE_MARGIN`), the model's choice when it is ``unsure``."""
SURE_MARGIN = 0.15
"""A search is sure when its top score leads the second by this share of the top score (on 40 recorded answers of
the embedded model the rule headed 28 replies with a relevant entry at 0.15 and 0.2, 29 at 0.1, 26 at 0.25,
against 24 for the model's choice and 24 for the top entry: docs/MEASUREMENTS.md, "Offline tutor turn")."""


def headline_entry(answer: GroundedAnswer, entries: Sequence[dict[str, Any]], rule: HeadlineRule = "model",
                   margin: float | None = None) -> int:
    """The 1-based number of the found entry that heads the reply, by ``rule`` (``margin``: how sure the search
    was, :func:`~hyde_tutor.hyde.stages.top_margin`; None counts as unsure). A number out of range is the top."""
    n = len(distinct_entries(entries))
    chosen = answer.entry if 1 <= answer.entry <= n else 1
    if rule == "top" or (rule == "unsure" and margin is not None and margin >= SURE_MARGIN):
        return 1
    return chosen


@dataclass(frozen=True, slots=True)
class ReplyPart:
    """One piece of a structured reply, in the order the learner reads them. ``text`` is plain text (``**bold**``
    as markdown), never HTML-escaped: escape it once where it is shown."""

    kind: Literal["headline", "explanation", "example", "sentence", "see_also", "note"]
    text: str
    source: Literal["entry", "model", "tutor"] = "entry"
    """``entry``: the reference's own text; ``model``: the model's sentence, shown after it passed the checks."""


def clip_sentences(text: str, max_chars: int = ENTRY_TEXT_CHARS) -> str:
    """``text`` cut to whole sentences within ``max_chars`` (at least its first sentence, however long); a last
    fragment with no sentence end (a field capped mid-word, ending in ``…``) is dropped."""
    text = " ".join(text.split()).removesuffix("…").strip()
    ends = [m.end() for m in re.finditer(r"[.!?…]+[»\"')\]]*(?=\s|$)", text)]
    if not ends:
        return ""
    return text[:max([end for end in ends if end <= max_chars], default=ends[0])].strip()


def _examples(e: dict[str, Any], n: int = 2) -> list[dict[str, Any]]:
    return [ex for ex in list(e.get("examples") or [])[:n] if isinstance(ex, dict) and ex.get("ko")]


def entry_parts(e: dict[str, Any]) -> list[ReplyPart]:
    """An entry as a reply shows it: the headline, its own explanation (whole sentences), its own examples; a
    document without examples, its text."""
    parts = [ReplyPart("headline", f"Подойдёт **{_name(e)}**.")]
    text = clip_sentences(str(e.get("explanation") or e.get("content") or e.get("text") or ""))
    if text:
        parts.append(ReplyPart("explanation", text))
    parts += [ReplyPart("example", f"Пример: {ex['ko']} — {ex.get('ru', '')}".rstrip(" —")) for ex in _examples(e)]
    return parts


def early_headline(entries: Sequence[dict[str, Any]], margin: float | None = None,
                   rule: HeadlineRule = "unsure") -> int | None:
    """The number of the entry that heads the reply when it is known before the model answers (the search is
    sure, or the rule is ``top``): its :func:`entry_parts` can be shown at once. None: the model picks it."""
    if not distinct_entries(entries) or rule == "model":
        return None
    return 1 if rule == "top" or (margin is not None and margin >= SURE_MARGIN) else None


def unescaped(text: str) -> str:
    """Model text with HTML entities decoded (a model may write ``&#34;`` or ``&amp;#34;``): the page escapes it
    once, so the learner reads ``"``."""
    for _ in range(3):
        decoded = html.unescape(text)
        if decoded == text:
            break
        text = decoded
    return text.strip()


Agrees = Callable[[str, str], bool]
"""``agrees(korean, russian)``: whether a Korean sentence and its translation say the same, and say what the
learner asked (:func:`~hyde_tutor.tutor.checks.meaning_check`: a sentence embedder, no LLM)."""


def checked_sentence(answer: GroundedAnswer, e: dict[str, Any], earlier: Sequence[str] = (),
                     agrees: Agrees | None = None) -> ReplyPart | None:
    """The model's sentence as a reply part when it passes every check on entry ``e``
    (:func:`~hyde_tutor.tutor.checks.sentence_problem`; the entry's own examples count as shown before) and,
    the meaning check ``agrees``, shown with its translation. None (also without ``agrees``: its meaning would be
    unchecked): the entry's examples stand in."""
    korean = unescaped(answer.korean).strip("\"'«»“” ")
    own = [str(ex["ko"]) for ex in list(e.get("examples") or []) if isinstance(ex, dict) and ex.get("ko")]
    if not e.get("pattern") or sentence_problem(korean, str(e["pattern"]), own, [*earlier, *own]) is not None:
        return None
    if agrees is None:
        return None
    russian = unescaped(answer.russian)
    if len(russian) >= RUSSIAN_CHARS - 1 and not russian.endswith((".", "!", "?", "…", "»", '"')):
        russian = clip_sentences(russian, RUSSIAN_CHARS)  # cut by the cap: whole sentences or nothing
    if not RUSSIAN_TEXT.match(russian) or len(CYRILLIC.findall(russian)) < 3 or not agrees(korean, russian):
        return None
    return ReplyPart("sentence", f"Для вашей ситуации (фраза модели, проверена автоматически): {korean} — {russian}",
                     "model")


def reply_parts(answer: GroundedAnswer | None, entries: Sequence[dict[str, Any]], *, headline: int | None = None,
                margin: float | None = None, rule: HeadlineRule = "unsure",
                earlier: Sequence[str] = (), agrees: Agrees | None = None) -> list[ReplyPart]:
    """A structured reply as ordered parts: the chosen entry's :func:`entry_parts` (known once the entry is
    chosen, so they can be streamed before the model's sentence), then the model's sentence if it passed the
    checks, then the search's top entry when another heads the reply.

    ``answer`` None: the parts known before the model answers (those of :func:`early_headline`'s entry, else of
    the top entry). ``headline``: the entry number, else by ``rule`` and ``margin`` (:func:`headline_entry`).
    ``earlier``: the Korean the conversation already showed (:func:`~hyde_tutor.tutor.checks.korean_sentences`
    of its earlier turns): a model sentence repeating it is not shown. ``agrees``: the meaning check
    (:func:`~hyde_tutor.tutor.checks.meaning_check_of`); without it no model sentence is shown.
    """
    found = distinct_entries(entries)
    if not found:
        return [ReplyPart("note", "В справочнике ничего не нашлось; попробуйте переформулировать вопрос.", "tutor")]
    if answer is None:
        return entry_parts(found[(early_headline(found, margin, rule) or 1) - 1])
    number = headline if headline is not None else headline_entry(answer, found, rule, margin)
    e = found[number - 1] if 1 <= number <= len(found) else found[0]
    parts = entry_parts(e)
    sentence = checked_sentence(answer, e, earlier, agrees)  # checked against the entry that heads the reply
    parts += [sentence] if sentence is not None else []
    if e is not found[0]:  # the model passed over the search's best match: show it too, it is often the answer
        top = found[0]
        example = next((f" {ex['ko']} — {ex.get('ru', '')}".rstrip(" —") for ex in _examples(top, 1)), "")
        parts.append(ReplyPart("see_also", f"См. также **{_name(top)}**.{example}"))
    return parts


def earlier_korean(turns: Sequence[tuple[str, str]]) -> list[str]:
    """The Korean sentences of a conversation's earlier ``(role, text)`` turns (learner's and tutor's)."""
    return [k for _, text in turns for k in korean_sentences(text)]


def render_parts(parts: Sequence[ReplyPart]) -> str:
    """The reply's text: its parts, one per line."""
    return "\n".join(p.text for p in parts)


def render_answer(answer: GroundedAnswer, entries: Sequence[dict[str, Any]], *, headline: int | None = None,
                  earlier: Sequence[str] = (), agrees: Agrees | None = None) -> str:
    """The reply from a structured answer and the entries it was given (:func:`reply_parts`, one per line): the
    chosen entry (``headline``, else the model's; the top one when the number is out of range) with its own
    explanation and examples, the model's sentence only if it passed the checks."""
    return render_parts(reply_parts(answer, entries, headline=headline if headline is not None else answer.entry,
                                    earlier=earlier, agrees=agrees))


def _pattern_stems(pattern: str) -> list[str]:
    """What of a pattern shows in a conjugated sentence: ``-고 싶다`` -> ``고 싶``; ``-(으)ㄹ 수 있다`` -> ``수 있``;
    ``-아서/어서`` -> ``아서``, ``어서``."""
    stems = []
    for alt in pattern.split("/"):
        core = re.sub(r"\((?:으|이|스)\)|[-~…]", "", alt).strip()
        core = re.sub(r"^[ㄱ-ㅎ]+\s*", "", core)  # a lone jamo (ㄹ, ㄴ) fuses with the stem's last syllable
        core = re.sub("다$", "", core).strip()  # the dictionary ending is conjugated away
        long_enough = len(core.replace(" ", "")) >= 2
        core = re.sub("하$", "", core).strip() if long_enough else core  # 하다 contracts: 뻔하다 -> 뻔했어요
        if core and (long_enough or len(alt) <= 3):
            stems.append(core)
    return stems


def names_an_entry(text: str, entries: Sequence[dict[str, Any]]) -> bool:
    """Whether ``text`` names one of the found entries: its id, pattern (or the stem of it a conjugated
    sentence shows), topic, subtopic or title."""
    flat = " ".join(text.split()).lower()
    for e in distinct_entries(entries):
        names = [str(e.get(k) or "").strip().lower() for k in ("id", "pattern", "subtopic", "topic", "title")]
        if any(len(n) >= 2 and n in flat for n in names):
            return True
        if e.get("pattern") and any(stem in flat for stem in _pattern_stems(str(e["pattern"]))):
            return True
    return False


def ground_reply(text: str, entries: Sequence[dict[str, Any]]) -> tuple[str, bool]:
    """``(reply, replaced)``: ``text`` as is when no entries were found or it teaches from one (names a found
    entry and holds Korean); else the top entry, rendered, under :data:`REPLACED_LINE`."""
    found = distinct_entries(entries)
    if not found or (HANGUL.search(text) and names_an_entry(text, found)):
        return text, False
    return f"{REPLACED_LINE}\n{render_entry(found[0])}", True
