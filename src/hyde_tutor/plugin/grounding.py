"""Replies that teach from the entries the search found, by construction.

The embedded 1.5B model, asked for free text, answers «Нужно сказать: я хочу поехать в Пусан.» with the
right entry in front of it and not one Korean character, or refuses. So with it the tutor asks for a
structured answer (:class:`GroundedAnswer`: which found entry, a Korean sentence for the learner's
situation, a short Russian explanation), constrained token by token through llama.cpp's JSON-schema
grammar (pydantic-ai ``NativeOutput``), and :func:`render_answer` writes the reply from it TOGETHER WITH
the chosen entry: its pattern, its name and its own examples always appear, whatever the model wrote.

For any model and any reply (capable models in tools mode write free text), :func:`ground_reply` is the
last guard: when entries were found and the reply names none of them or holds no Korean, it is replaced
by the top entry, rendered, with one line saying so.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..corpus.rendering import distinct_entries

__all__ = ["GroundedAnswer", "HeadlineRule", "distinct_entries", "ground_reply", "headline_entry", "render_answer",
           "render_entry", "with_answer_cap"]

HANGUL = re.compile("[가-힣]")
CYRILLIC = re.compile("[а-яёА-ЯЁ]")
MAX_ENTRIES = 5
MIN_KOREAN_SYLLABLES = 3
REPLACED_LINE = "[ответ модели не опирался на найденные статьи; вот самая подходящая из них]"


class GroundedAnswer(BaseModel):
    """The tutor's structured answer: the chosen entry and what to say, in Korean and in Russian."""

    entry: int = Field(ge=1, le=MAX_ENTRIES, description="Номер статьи из списка найденных, по которой ты отвечаешь.")
    korean: str = Field(max_length=120, description="Корейская фраза для ситуации ученика, по этой конструкции.")
    explanation: str = Field(max_length=240, description="1–2 коротких предложения по-русски: почему эта "
                                                        "конструкция и как её построить.")


def _name(e: dict[str, Any]) -> str:
    if e.get("pattern"):
        return " — ".join(str(x) for x in (e.get("pattern"), e.get("name")) if x)
    return ": ".join(str(x) for x in (e.get("topic"), e.get("subtopic")) if x) or str(e.get("title") or e.get("id"))


def render_entry(e: dict[str, Any], max_examples: int = 2) -> str:
    """One found entry as the learner reads it: its name, its explanation, its own Korean examples."""
    lines = [f"**{_name(e)}**"]
    text = str(e.get("explanation") or e.get("content") or e.get("text") or "").strip()
    if text:
        lines.append(text[:400] + ("…" if len(text) > 400 else ""))
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


def render_answer(answer: GroundedAnswer, entries: Sequence[dict[str, Any]], *, headline: int | None = None) -> str:
    """The reply from a structured answer and the entries it was given: the chosen entry (``headline``, else
    the model's; the top one when the number is out of range) named first, the model's Korean sentence if it
    is Korean and built on that entry, its explanation if it is Russian and about that entry (else the
    entry's own), then the entry's examples."""
    found = distinct_entries(entries)
    korean, explanation = html.unescape(answer.korean).strip(), html.unescape(answer.explanation).strip()
    if not found:
        return explanation or "В справочнике ничего не нашлось."
    number = answer.entry if headline is None else headline
    e = found[number - 1] if 1 <= number <= len(found) else found[0]
    if headline is not None and headline != answer.entry:  # the model wrote about another entry
        explanation = ""
    lines = [f"Подойдёт **{_name(e)}**."]
    if len(HANGUL.findall(korean)) >= MIN_KOREAN_SYLLABLES and uses_pattern(korean, str(e.get("pattern") or "")):
        lines.append(f"По-корейски: {korean}")  # a sentence (not a stray particle) built on the chosen entry
    if len(CYRILLIC.findall(explanation)) >= max(10, len(explanation) // 3):
        lines.append(explanation)
    elif e.get("explanation"):
        lines.append(str(e["explanation"])[:300])
    examples = [f"Пример: {ex['ko']} — {ex.get('ru', '')}".rstrip(" —")
                for ex in list(e.get("examples") or [])[:2] if isinstance(ex, dict) and ex.get("ko")]
    lines += examples
    if not examples and len(HANGUL.findall(korean)) < MIN_KOREAN_SYLLABLES:  # a document without examples: its own text
        lines.append(render_entry(e))
    if e is not found[0]:  # the model passed over the search's best match: show it too, it is often the answer
        top = found[0]
        example = next((f" {ex['ko']} — {ex.get('ru', '')}".rstrip(" —") for ex in list(top.get("examples") or [])[:1]
                        if isinstance(ex, dict) and ex.get("ko")), "")
        lines.append(f"См. также **{_name(top)}**.{example}")
    return "\n".join(lines)


def uses_pattern(korean: str, pattern: str) -> bool:
    """Whether a sentence can be built on ``pattern``: it shares a syllable with the pattern's own (its
    dictionary ``다`` aside). The embedded model, asked for a sentence on the chosen entry, wrote
    «그러니까 가야해요» for 을/를, -았/었었- and -(으)려고 하다 alike: such a line is not shown. Loose on
    purpose (가서 passes for -아서/어서); a pattern with no syllable of its own (``-ㄹ``) always passes."""
    own = set(re.findall("[가-힣]", pattern)) - {"다"}
    return not own or any(syllable in korean for syllable in own)


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
