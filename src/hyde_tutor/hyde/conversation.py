"""Follow-up questions are searched with the conversation in view.

«А в прошедшем?» searched on its own words finds the right entry at rank 1 one time in six. Two ways in:
the raw channel searches the previous question and the follow-up together (:func:`context_query`), and a
hypothesis is written from the recent conversation (:func:`render_conversation` in the follow-up request
template), so it answers the follow-up in context.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import LLMSettings
from ..llm.generation import CallOptions, PromptedGenerator, TokenUsage, generate_text
from ..llm.prompts import load_prompt
from .requests import render_condense_request

Message = tuple[str, str]
"""``(role, content)``: role ``user`` or ``assistant``."""

RECENT_TURNS = 4
"""How many earlier messages a hypothesis request shows."""


def context_query(history: Sequence[Message], text: str, max_chars: int = 1000) -> str:
    """The follow-up searched with the learner's previous question in front of it (the question is what
    names the topic; the tutor's reply adds its own words and, measured, dilutes the search)."""
    previous = next((content for role, content in reversed(history) if role == "user"), "")
    joined = f"{previous.strip()} {text.strip()}".strip()
    return joined[-max_chars:] if len(joined) > max_chars else joined


def last_said(history: Sequence[Message], role: str) -> str:
    """The last message of ``role`` in ``history``, its whitespace collapsed ("" when there is none)."""
    return next((" ".join(content.split()) for r, content in reversed(history) if r == role), "")


ConversationMode = Literal["message", "context", "fused", "reply", "auto"]
"""How the raw channel searches a message that has a conversation before it: ``message`` alone; ``context``
(the previous question in front of it); ``fused``: the message alone and with its context, both searched, the
rankings fused; ``reply``: the message alone, after the tutor's last reply (which names what it taught), and
after the whole previous exchange (question and reply), the three fused with equal weights (the previous question
alone, as in ``context``, measured worse in that fusion); ``auto``: ``reply`` for a message that reads as a
follow-up (:func:`looks_like_followup`), any other message alone, so a new question mid-chat ranks as it does
alone."""
CONVERSATION_MODES: tuple[str, ...] = ("message", "context", "fused", "reply", "auto")
DEFAULT_CONVERSATION_MODE: ConversationMode = "auto"
CONVERSATION_RRF_K = 5
"""RRF k of the conversation's searches: a low k lets a document one search ranks first lead (chosen with the
weights on data/eval/conversations and data/eval/followups: docs/MEASUREMENTS.md, "Conversation search
without an LLM"; re-chosen on their tuning half alone in issue 39: nothing beat it by two dialogues, so kept)."""
MESSAGE_TOP_WITHIN = 2
"""The message's own top entry is kept within this rank of the fused ranking: «А в прошедшем времени?» alone
finds -았/었-, the conversation's searches the entry taught before; the learner sees both (measured: no cost to
recall@1 or @5 on either conversation set)."""
REPLY_CHARS = 300
"""How much of the tutor's last reply goes in front of the message (its headline: the entry it taught)."""

_WORD = re.compile(r"[а-яёa-z]+|[가-힣]+", re.IGNORECASE)
_OPENERS = ("а", "и", "ну", "но", "тогда", "значит", "так", "то", "или")
_POINTERS = frozenset("это этот эта эти этого этому этим этой того тому тем той так такой такое такая такие тоже "
                      "там туда тут здесь тогда же его её ее их он она они оно".split())
_SAY = "сказать|будет|перевести|спросить|ответить|написать|выразить"
"""The verbs of «как <verb> …», a question's frame: :func:`looks_like_followup` reads them (and «попросить») as a
question of its own, :func:`without_frame` takes them (and «описать») off the front."""
_FRAMES = re.compile(rf"\b(как\s+({_SAY}|попросить|по-корейски)|что\s+(значит|означает|такое)|чем\s+отличаются|"
                     r"в\s+чём\s+разница|когда\s+(говорят|используют|употребляют))\b", re.IGNORECASE)
_STOP = frozenset("а и но ну или да нет не ни же ли бы как что чем чего кто где когда куда если то это так там "
                  "в во на с со к ко о об от до за из у по для про при без через над под же ещё еще уже "
                  "я ты мы вы он она оно они мне меня мой моя моё мои мной нам нас вам вас ему ей им их его её "
                  "можно нужно надо будет было был была были есть быть тоже очень просто вот тогда значит "
                  "какой какая какое какие который которая сказать говорить скажу".split())


def content_words(text: str) -> list[str]:
    """The message's own words that could name a topic: not particles, pronouns, question words or cues."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOP and w not in _POINTERS
            and (len(w) > 2 or "가" <= w[0] <= "힣")]


_QUOTED = re.compile(r"«[^»]*»|\"[^\"]*\"|„[^“]*“")


def opens_like_followup(text: str) -> bool:
    """Whether the message's first word is a continuation's («А…», «И…», «Тогда…»)."""
    first = _WORD.search(text)
    return first is not None and first.group(0).lower() in _OPENERS


def looks_like_followup(text: str) -> bool:
    """Whether a message leans on the conversation before it: it opens like a continuation («А если…»,
    «И…», «Тогда…») or points back («это», «так», «тоже») without a question frame of its own («как
    сказать, что…» with its content, or «как сказать «…»» with a quoted phrase), or it is too short to name a
    topic. A quoted phrase is what the learner wants said: its words do not point back. Deliberately
    conservative: a message read as new is searched exactly as on its own."""
    words = [w.lower() for w in _WORD.findall(text)]
    if not words:
        return False
    unquoted = _QUOTED.sub(" ", text)
    own = content_words(text)
    quoted = unquoted != text and bool(content_words(" ".join(_QUOTED.findall(text))))
    framed = bool(_FRAMES.search(unquoted)) and (len(own) >= 3 or quoted)
    opener = opens_like_followup(text)
    pointer = any(w.lower() in _POINTERS for w in _WORD.findall(unquoted))
    if framed and not pointer:
        return False
    named = any("가" <= ch <= "힣" for ch in text)  # a Korean pattern or sentence of its own
    return opener or (pointer and len(own) <= 3) or (len(own) <= 1 and not named)


_QUESTION_FRAME = re.compile(
    r"^\s*(?:(?:а|и|кстати,?|другой вопрос[:.,]?)\s+)*"
    r"(?:как\s+(?:по-корейски\s+)?(?:мне\s+)?(?:правильно\s+)?"
    rf"(?:{_SAY}|описать)(?:\s+по-корейски)?"
    r"|как\s+по-корейски)\s*(?:,?\s*что\s+|:\s*)?", re.IGNORECASE)


def without_frame(text: str) -> str:
    """The message without its leading question frame: «Как сказать, что я чуть не опоздал на поезд?» → «я чуть
    не опоздал на поезд?». Searched as typed, «сказать, что» makes the reported-speech entries (-다고 하다,
    -(으)라고 하다) look relevant to every such question; the learner's content is what names the construction.
    Unchanged when fewer than two words would remain («Как сказать наоборот?»)."""
    frame = _QUESTION_FRAME.match(text)
    rest = text[frame.end():] if frame else text
    return rest if len(rest.split()) >= 2 else text


def reads_as_followup(history: Sequence[Message], text: str, mode: ConversationMode = DEFAULT_CONVERSATION_MODE) -> bool:
    """Whether the raw channel searches ``text`` with the conversation (``mode`` and the detector decide)."""
    return bool(history) and mode != "message" and (mode != "auto" or looks_like_followup(text))


def conversation_queries(history: Sequence[Message], text: str, mode: ConversationMode = DEFAULT_CONVERSATION_MODE,
                         max_chars: int = 1000) -> tuple[tuple[str, float], ...]:
    """What the raw channel searches for ``text`` after ``history``: ``(query, RRF weight)`` pairs, fused
    (:data:`CONVERSATION_RRF_K`) when there are several (see :data:`ConversationMode`). A message that is not
    read as a follow-up is searched alone, without its question frame (:func:`without_frame`)."""
    if not reads_as_followup(history, text, mode):
        return ((without_frame(text), 1.0),)
    joined = context_query(history, text, max_chars)
    text = text.strip()
    reply = last_said(history, "assistant")[:REPLY_CHARS]
    if mode == "context" or joined == text and not reply:
        return ((joined, 1.0),)
    if mode == "fused" or not reply:
        return ((text, 1.0), (joined, 1.0)) if joined != text else ((text, 1.0),)
    previous = last_said(history, "user")
    return ((text, 1.0), (f"{reply} {text}"[-max_chars:], 1.0), (f"{previous} {reply} {text}".strip()[-max_chars:], 1.0))


def fuse_rankings(rankings: Sequence[Sequence[str]], weights: Sequence[float]) -> list[tuple[str, float]]:
    """The conversation's searches (the message's own first, as :func:`conversation_queries` orders them) as one
    ranking of ``(doc id, score)``: weighted RRF (:data:`CONVERSATION_RRF_K`), the message's own top entry kept
    within :data:`MESSAGE_TOP_WITHIN`."""
    from .fusion import reciprocal_rank_fusion

    fused = reciprocal_rank_fusion(rankings, CONVERSATION_RRF_K, list(weights))
    ids = [doc_id for doc_id, _ in fused]
    if len(rankings) > 1 and rankings[0] and rankings[0][0] in ids[MESSAGE_TOP_WITHIN:]:
        fused.insert(MESSAGE_TOP_WITHIN - 1, fused.pop(ids.index(rankings[0][0])))
    return fused


def render_conversation(history: Sequence[Message], turns: int = RECENT_TURNS) -> str:
    """The recent conversation as lines ``Ученик: …`` / ``Репетитор: …`` (each message capped)."""
    names = {"user": "Ученик", "assistant": "Репетитор"}
    return "\n".join(f"{names.get(role, role)}: {' '.join(content.split())[:400]}"
                     for role, content in list(history)[-turns:])


class Condenser(PromptedGenerator):
    """Rewrites a follow-up into a standalone question with the LLM (``prompts/condense.v<N>.md``), for search:
    «А в прошедшем?» after a question about wanting to go to Korea becomes a question that names both.

    One text request per follow-up through the backend's model (its gate, streaming and settings); a failed or
    empty reply gives ``None``, and the caller searches the previous question with the follow-up instead.
    """

    def __init__(self, model: Any, model_name: str, *, llm: LLMSettings | None = None,
                 options: CallOptions | None = None, max_tokens: int = 96) -> None:
        super().__init__(model, model_name, load_prompt("condense"), load_prompt("condense_request"), llm=llm,
                         max_tokens=max_tokens, options=options)

    @classmethod
    def for_backend(cls, backend: Any, llm: LLMSettings) -> Condenser:
        return cls(backend.model, backend.name, llm=llm, options=backend.call_options)

    @property
    def prompt_refs(self) -> tuple[str, str]:
        return (self.prompt.ref, self.request.ref)

    def user_prompt(self, history: Sequence[Message], text: str) -> str:
        return render_condense_request(self.request, render_conversation(history), text)

    async def condense(self, history: Sequence[Message], text: str, timeout_s: float = 30.0) -> Condensed:
        """The standalone question (None: no history, a failed call, an empty or runaway reply) and its cost."""
        if not history:
            return Condensed(None)
        out = await generate_text(self.call, self.user_prompt(history, text), timeout_s=timeout_s)
        return Condensed(standalone_question(out.text or ""), out.usage, out.failure or out.error)


@dataclass(frozen=True, slots=True)
class Condensed:
    """A condense call's outcome."""

    question: str | None
    usage: TokenUsage = field(default_factory=TokenUsage)
    failure: str | None = None


def standalone_question(reply: str, max_chars: int = 300) -> str | None:
    """The question in a condense reply: its first non-empty line without a label or quotes; None if empty or
    longer than ``max_chars`` (a model that started answering instead)."""
    for line in reply.splitlines():
        line = line.strip().strip("«»\"'").strip()
        if line.lower().startswith("самостоятельный вопрос:"):
            line = line.split(":", 1)[1].strip().strip("«»\"'").strip()
        if line:
            return line if len(line) <= max_chars else None
    return None
