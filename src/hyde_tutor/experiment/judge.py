"""The relevance judge: an LLM rates whether a served turn's top entries answer the learner's question.

A learner's 👍 is rare and noisy; a judge's score is an outcome that needs no learner action. It is sampled
(``HYDE_JUDGE__SHARE`` of turns, picked by turn id, so every worker picks the same turns), capped (calls per
hour and per day, tokens per day: per process), and never fails a turn: a failure or a late verdict leaves
the score unset, counts the call and is kept in :attr:`RelevanceJudge.stats`. Its calls and tokens go to the
turn's ``judge_calls`` / ``judge_tokens``, so the A/B report's cost per arm includes them.

The judge is a pydantic-ai agent with a structured output (:class:`JudgeVerdict`, asked as JSON in the text,
so a model without tool calls can answer too) over the prompt files ``judge_relevance`` (instructions) and
``judge_relevance_request`` (the question and the entries shown). With ``HYDE_LLM__PROVIDER=replay`` it answers
from recordings of kind ``judge`` (:mod:`hyde_tutor.llm.recordings`), which a live judge writes when given a
:class:`~hyde_tutor.llm.recorder.RecordingWriter`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ..config import JudgeSettings, LLMSettings, Settings
from ..llm.generation import agent_model_settings
from ..llm.prompts import load_prompt
from ..llm.recordings import Recording, request_sha256, utc_now
from .events import TurnRecord

if TYPE_CHECKING:
    from ..llm.backends import LLMBackend
    from ..llm.recorder import RecordingWriter
    from ..llm.tokens import TokenCounter

__all__ = ("JudgeVerdict", "JudgeBudget", "JudgeStats", "RelevanceJudge", "render_entries", "sampled", "verdict_json")

_log = logging.getLogger("hyde_tutor")
ENTRY_CHARS = 600
HOUR, DAY = 3600.0, 86400.0


class JudgeVerdict(BaseModel):
    """The judge's answer: 2 the first entry answers the question, 1 another one (or partly), 0 none."""

    score: Literal[0, 1, 2] = Field(description="2: the first entry answers the question; 1: another entry shown "
                                    "does, or only partly; 0: no entry answers it.")
    reason: str = Field(description="One short line: why.")

    @property
    def relevance(self) -> float:
        """The score on the report's 0..1 scale."""
        return self.score / 2


def sampled(turn_id: str, share: float) -> bool:
    """Whether a turn is judged: its id's hash falls within ``share`` (the same answer in every worker)."""
    position = int.from_bytes(hashlib.sha256(f"judge\x00{turn_id}".encode()).digest()[:8], "big") / 2**64
    return position < share


def render_entries(entries: list[dict[str, Any]], top_n: int) -> str:
    """The first ``top_n`` entries as the judge reads them: numbered, one ``field: value`` per line, no ids."""
    blocks = []
    for rank, entry in enumerate(entries[:top_n], start=1):
        lines = []
        for key, value in entry.items():
            if key == "id" or value in (None, "", []):
                continue
            if isinstance(value, list):
                value = "; ".join(" — ".join(str(v) for v in item.values()) if isinstance(item, dict) else str(item)
                                  for item in value)
            lines.append(f"{key}: {value}")
        text = "\n".join(lines)
        blocks.append(f"[{rank}]\n" + (text[:ENTRY_CHARS] + "…" if len(text) > ENTRY_CHARS else text))
    return "\n\n".join(blocks)


class JudgeBudget:
    """Calls per hour and per day, tokens per day, in sliding windows (thread-safe; per process)."""

    def __init__(self, settings: JudgeSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self._lock = threading.Lock()
        self._spent: deque[tuple[float, int]] = deque()  # (when, tokens) of each call in the last day

    def _trim(self, now: float) -> None:
        while self._spent and self._spent[0][0] <= now - DAY:
            self._spent.popleft()

    def take(self) -> str | None:
        """Reserve one call now; the cap it would break (``None``: reserved, pay with :meth:`spend`)."""
        s = self.settings
        with self._lock:
            now = self.clock()
            self._trim(now)
            if sum(1 for when, _ in self._spent if when > now - HOUR) >= s.max_calls_per_hour:
                return "max_calls_per_hour"
            if len(self._spent) >= s.max_calls_per_day:
                return "max_calls_per_day"
            if sum(tokens for _, tokens in self._spent) >= s.max_tokens_per_day:
                return "max_tokens_per_day"
            self._spent.append((now, 0))
            return None

    def spend(self, tokens: int) -> None:
        """Add the tokens of the call reserved last."""
        with self._lock:
            if self._spent:
                when, before = self._spent.pop()
                self._spent.append((when, before + tokens))


@dataclass
class JudgeStats:
    """What the judge did in this process (the operator view shows it)."""

    judged: int = 0
    failed: int = 0
    over_budget: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    last_error: str | None = None


class RelevanceJudge:
    """Rates served turns' top entries; :meth:`maybe_judge` is what the server calls after a turn.

    Args:
        model: any pydantic-ai model (a capable one: ``LLMBackend.agent_model``; ``FunctionModel`` in tests).
        settings: share, caps, timeout.
        llm: temperature, seed and token settings of the calls.
        model_name: names the model in recordings.
        counter: counts tokens offline when the model's own figures are estimates (replay, embedded).
        recorder: appends each live verdict as a ``judge`` recording (replayable offline).
        model_settings: the backend's extra model settings (a compatible server's token budget in the body).
        clock: the time source of the caps (tests move it).
    """

    def __init__(self, model: Any, settings: JudgeSettings | None = None, *, llm: LLMSettings | None = None,
                 model_name: str = "", counter: TokenCounter | None = None, recorder: RecordingWriter | None = None,
                 model_settings: dict[str, Any] | None = None, clock: Callable[[], float] = time.time) -> None:
        from pydantic_ai import Agent, PromptedOutput

        self.settings = settings or JudgeSettings()
        self.system = load_prompt("judge_relevance")
        self.request = load_prompt("judge_relevance_request")
        self.model_name = model_name or getattr(model, "model_name", "") or "unknown"
        self.counter = counter
        self.recorder = recorder
        self.budget = JudgeBudget(self.settings, clock)
        self.stats = JudgeStats()
        extra = agent_model_settings(llm or LLMSettings(), self.settings.max_tokens, model_settings)
        self.agent = Agent(model, instructions=self.system.text, output_type=PromptedOutput(JudgeVerdict),
                           model_settings=extra, retries=1)  # type: ignore[call-overload]

    @classmethod
    def for_backend(cls, backend: LLMBackend, settings: Settings, **kwargs: Any) -> RelevanceJudge:
        """A judge on an LLM backend (the server's): its gated model, its token counter, its extra settings."""
        return cls(backend.agent_model, settings.judge, llm=settings.llm, model_name=backend.name,
                   counter=backend.token_counter, model_settings=backend.extra_settings or None, **kwargs)

    def user_message(self, question: str, entries: list[dict[str, Any]]) -> tuple[str, str]:
        """The request's user message and the entries block in it."""
        shown = render_entries(entries, self.settings.top_n)
        return self.request.fill({"question": question.strip(), "entries": shown}), shown

    async def judge(self, question: str, entries: list[dict[str, Any]]) -> tuple[JudgeVerdict, int]:
        """One verdict and the tokens it cost (raises on a failure or after ``timeout_s``)."""
        user, shown = self.user_message(question, entries)
        run = await asyncio.wait_for(self.agent.run(user), timeout=self.settings.timeout_s)
        verdict: JudgeVerdict = run.output
        usage = run.usage
        answer = verdict.model_dump_json()
        if self.counter is not None:
            tokens = self.counter.count_request(self.system.text, user) + self.counter.count_text(answer)
        else:
            tokens = (usage.input_tokens or 0) + (usage.output_tokens or 0)
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.append, Recording(  # a file write, off the event loop
                kind="judge", query=question.strip(), perspective="relevance", text=answer, model=self.model_name,
                prompt_refs=(self.system.ref, self.request.ref), prompt_sha256=request_sha256(self.system.text, user),
                created=utc_now(), conversation=shown))
        return verdict, tokens

    async def maybe_judge(self, turn: TurnRecord, question: str, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Judge ``turn`` if it is sampled, has entries and the caps allow; never raises.

        Returns:
            The outcome fields for :meth:`~hyde_tutor.experiment.events.EventLog.update_turn` (``judge_score``,
            ``judge_calls``, ``judge_tokens``; a failed call sets no score), or ``None`` when no call was made.
        """
        if not entries or not sampled(turn.turn_id, self.settings.share):
            return None
        cap = self.budget.take()
        if cap is not None:
            self.stats.over_budget[cap] = self.stats.over_budget.get(cap, 0) + 1
            return None
        outcome: dict[str, Any] = {"judge_calls": turn.judge_calls + 1, "judge_tokens": turn.judge_tokens}
        try:
            verdict, tokens = await self.judge(question, entries)
        except Exception as exc:  # noqa: BLE001 - a judge failure never touches the learner's turn
            self.stats.failed += 1
            self.stats.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            _log.warning("relevance judge failed on turn %s: %s", turn.turn_id, self.stats.last_error)
            return outcome
        self.budget.spend(tokens)
        self.stats.judged += 1
        self.stats.tokens += tokens
        return outcome | {"judge_score": verdict.relevance, "judge_tokens": turn.judge_tokens + tokens}

    def describe(self) -> dict[str, Any]:
        """Settings and counters, JSON-ready (the operator view)."""
        s = self.stats
        return {"model": self.model_name, "share": self.settings.share, "judged": s.judged, "failed": s.failed,
                "over_budget": dict(s.over_budget), "tokens": s.tokens, "last_error": s.last_error,
                "prompt_refs": [self.system.ref, self.request.ref]}


def verdict_json(score: int, reason: str) -> str:
    """A verdict as the judge writes it (for hand-made recordings and tests)."""
    return json.dumps({"score": score, "reason": reason}, ensure_ascii=False)
