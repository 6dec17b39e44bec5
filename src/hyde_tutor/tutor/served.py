"""One served turn, from the learner's message to its outcomes in the event log (what ``hyde-tutor serve``
runs; the server only adapts HTTP to it).

:class:`ServedTutor` holds what every turn shares: the tutor agent, the retriever, the event log, the
experiment default, the optional relevance judge. :meth:`ServedTutor.start_turn` opens a
:class:`ServedTurn`: its id, the learner's arm in the experiment running now (the log's latest
:class:`~hyde_tutor.experiment.events.ExperimentEvent`, else the settings), the deps of the agent run. While the
run streams, :meth:`ServedTurn.new_cards` hands over the entries the searches found; at the end
:meth:`ServedTurn.finish` writes the reply the learner keeps (grounded in the entries, or the entries and one
line when the model failed), records the turn and its retrievals under one turn id, decides whether the
previous turn was rephrased, and hands the turn to the judge.
"""

from __future__ import annotations

import asyncio
import html
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.usage import RunUsage

from ..corpus.rendering import distinct_entries, format_entries
from ..errors import HydeTutorError
from ..plugin.deps import TutorDeps
from ..experiment.events import EventLog, TurnRecord
from ..experiment.assignment import Experiment, arm_uses_hyde
from .checks import meaning_check_of
from .grounding import (GroundedAnswer, HeadlineRule, earlier_korean, ground_reply, headline_entry, names_an_entry,
                        render_parts, reply_parts)
from ..plugin.monitor import Monitor, RetrievalRecord
from ..experiment.operations import current_experiment, entry_card, learner_tag, why_hyde
from ..experiment.rephrase import is_rephrase
from .reply_stream import ReplyPacer
from .timings import StageTimes
from ..plugin.toolset import compact_result
from ..plugin.capabilities import conversation, retrieve_step

__all__ = ("ServedTurn", "ServedTutor", "estimate_tokens", "hypothesis_tokens")

_log = logging.getLogger("hyde_tutor.served")


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` as a BPE tokenizer counts Russian and Korean, roughly: one per 4 UTF-8 bytes."""
    return 0 if not text else max(1, round(len(text.encode("utf-8")) / 4))


def hypothesis_tokens(messages: Sequence[ModelMessage], count: Callable[[str], int] = estimate_tokens) -> int:
    """Tokens the agent wrote as ``hypothesis`` arguments of its tool calls in ``messages``."""
    total = 0
    for message in messages:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, ToolCallPart):
                    args = part.args_as_dict()
                    if isinstance(args.get("hypothesis"), str):
                        total += count(args["hypothesis"])
    return total


class TurnMonitor(Monitor):
    """A monitor for one turn: its records in order (logfire metrics still go out; no file)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.turn_records: list[RetrievalRecord] = []

    def record(self, rec: RetrievalRecord) -> None:
        super().record(rec)
        self.turn_records.append(rec)


@dataclass
class ServedTutor:
    """What every served turn shares. Thread- and task-safe: a turn's state lives in its :class:`ServedTurn`."""

    agent: Agent[TutorDeps, Any]
    retriever: Any
    """A :class:`~hyde_tutor.hyde.HydeRetriever`."""
    log: EventLog
    default_experiment: Experiment | None = None
    """The experiment when the log holds no experiment event yet (``HYDE_EXPERIMENT__*``)."""
    judge: Any = None
    """Optional: an object with ``async maybe_judge(turn, question, entries) -> dict | None`` (outcome fields)."""
    retrieve_first: bool = False
    """The agent searches before it answers (the embedded model): the turn searches first and shows the cards."""
    count_tokens: Callable[[str], int] = estimate_tokens
    record_failures: int = 0
    """Turns the event log failed to store (logged; the learner got the reply; ``/healthz`` shows the count)."""
    headline: HeadlineRule = "unsure"
    """Which found entry heads a structured reply (the rule ``hyde-tutor chat`` uses)."""
    background: set[asyncio.Task[Any]] = field(default_factory=set, repr=False)
    stages: StageTimes = field(default_factory=StageTimes, repr=False)
    """Where the turns' time goes, stage by stage (``GET /api/operator/timings``)."""

    @property
    def structured(self) -> bool:
        """The agent answers in a structure (:class:`GroundedAnswer`): its raw text is not for the learner."""
        return self.agent.output_type is not str

    async def start_turn(self, subject: str, conversation_id: str, question: str,
                         history: Sequence[ModelMessage] = (), usage: RunUsage | None = None) -> ServedTurn:
        """Open a turn: the experiment running now decides the learner's arm for the whole turn. ``usage``: the
        stored conversation's (the run adds to it; the turn's limit and cost count only what this turn adds)."""
        database = getattr(self.log, "database", None)  # an SQL event log reads SQLite at once (SqlDatabase.read)
        reads = database.read if database is not None else asyncio.to_thread
        experiment, previous = await reads(self._arm_and_previous, subject, conversation_id)
        monitor = TurnMonitor()
        deps = TutorDeps(self.retriever, experiment, monitor, subject)
        arm = experiment.arm(subject) if experiment is not None else "unassigned"
        prior = [text for role, text in conversation(history) if role == "user"]
        return ServedTurn(self, deps, monitor, uuid.uuid4().hex, subject, conversation_id, question,
                          experiment, arm, previous, prior[-1] if prior else None, tuple(history),
                          prior_usage=usage or RunUsage())

    def _arm_and_previous(self, subject: str, conversation_id: str) -> tuple[Experiment | None, TurnRecord | None]:
        """The experiment running now and the conversation's last turn: two reads, one worker-thread hop."""
        return current_experiment(self.log, self.default_experiment), self.log.last_turn(subject, conversation_id)

    async def warm_up(self, collection: str = "grammar") -> None:
        """One plain search at startup, so the first learner does not wait for the embedder and the Korean analyser
        (kiwipiepy loads on the first text with Hangul) to load."""
        try:
            await self.retriever.search(collection, "привет 안녕하세요", top_k=1, use_hyde=False)
        except Exception as exc:  # noqa: BLE001 - a missing collection is reported by the turns themselves
            _log.warning("warm-up search of %r failed: %s", collection, type(exc).__name__)

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait (at most ``timeout_s``) for the judgements still running (at shutdown)."""
        if self.background:
            await asyncio.wait(set(self.background), timeout=timeout_s)


@dataclass
class ServedTurn:
    """One turn in flight."""

    tutor: ServedTutor
    deps: TutorDeps
    monitor: TurnMonitor
    turn_id: str
    subject: str
    conversation_id: str
    question: str
    experiment: Experiment | None
    arm: str
    previous: TurnRecord | None
    previous_question: str | None
    history: tuple[ModelMessage, ...] = ()
    prior_usage: RunUsage = field(default_factory=RunUsage)
    """The stored conversation's usage before this turn (a run's usage is the whole conversation's)."""
    started: float = field(default_factory=time.perf_counter)
    started_at: float = field(default_factory=time.time)
    """Wall-clock start: the turn's timestamp (the arm was decided then, so the turn belongs to that period)."""
    first_token: float | None = None
    shown: int = 0

    async def prefetch(self) -> list[dict[str, Any]]:
        """Retrieve-first agents: search the agent's own collections now (the run takes these entries) and return
        their cards."""
        if not self.tutor.retrieve_first:
            return []
        entries = await retrieve_step(self.tutor.agent).search(self.deps, self.question, conversation(self.history))
        self.deps.prefetch(self.question, entries)
        self.deps.found.extend(entries)
        return self.new_cards() or []

    def new_cards(self) -> list[dict[str, Any]] | None:
        """The cards of every entry found so far, when a search found more since the last call."""
        if len(self.deps.found) <= self.shown:  # a run start clears and refills the prefetched entries: no news
            return None
        self.shown = len(self.deps.found)
        return [entry_card(e) for e in distinct_entries(self.deps.found)]

    def margin(self) -> float | None:
        """How sure the search was of its top entry (None: not known)."""
        return self.deps.margins.get(str(self.deps.found[0].get("id"))) if self.deps.found else None

    def pacer(self) -> ReplyPacer:
        """What of this turn's reply may be shown before it is complete (a structured answer: its head once the
        entry is decided; a text reply: as it streams)."""
        if not self.tutor.structured:
            return ReplyPacer([], None)
        return ReplyPacer(self.deps.found, self.margin(), self.tutor.headline)

    def text_arrived(self) -> None:
        """The model's first token arrived (time to first token)."""
        if self.first_token is None:
            self.first_token = time.perf_counter()

    def operator_view(self, result: Any = None) -> dict[str, Any]:
        """What an operator sees: the arm, why HyDE ran or not per search, and the hypotheses searched."""
        hypotheses: list[dict[str, Any]] = []
        for message in result.new_messages() if result is not None else ():
            for part in getattr(message, "parts", ()):
                meta = getattr(part, "metadata", None)
                if getattr(part, "part_kind", "") == "tool-return" and isinstance(meta, dict):
                    hypotheses += [dict(h) for h in meta.get("hypotheses", ())]
        return {"arm": self.arm, "experiment": self.experiment.name if self.experiment else None,
                "running": bool(self.experiment and self.experiment.enabled),
                "hyde_by_arm": arm_uses_hyde(self.arm),
                "searches": [{"tool": r.tool, "used_hyde": r.used_hyde, "why": why_hyde(r), "results": r.results,
                              "ms": round(r.total_ms)} for r in self.monitor.turn_records],
                "hypotheses": hypotheses}

    async def finish(self, result: Any = None, error: str | None = None, *, abandoned: bool = False) -> dict[str, Any]:
        """End the turn: the reply the learner keeps, the turn and its retrievals recorded, the previous turn's
        rephrase decided, the judge called. ``result``: the agent run's result (None: the run failed, ``error``,
        or was cut short). ``abandoned``: the learner closed the stream first; the turn is recorded as it stood.
        A failure to record is logged and counted (:attr:`ServedTutor.record_failures`), never raised: the
        learner still gets the reply."""
        seconds = time.perf_counter() - self.started
        entries = list(self.deps.found)
        grounded, rank, replaced = None, None, False
        live = self.deps.run_usage  # what the run spent so far, when it did not finish
        usage = live - self.prior_usage if live is not None else None
        if result is not None:
            try:
                with self.tutor.stages.time("reply"):
                    text, replaced, grounded, rank = await asyncio.to_thread(self._reply, result.output, entries)
                usage = result.usage - self.prior_usage  # this turn's requests and tokens only
            except ValueError as exc:
                result, error = None, f"ValueError: {exc}"
        if result is None:
            if not entries and not abandoned:
                entries = await self._search_now()
            text = fallback_reply(error or "Error", entries)
        turn = TurnRecord(
            turn_id=self.turn_id, subject=self.subject, conversation_id=self.conversation_id,
            experiment=self.experiment.name if self.experiment and self.experiment.enabled else None, arm=self.arm,
            timestamp=self.started_at, question_chars=len(self.question),
            failed=result is None and (error is not None or not abandoned), abandoned=abandoned,
            seconds=round(seconds, 3),
            first_token_s=None if self.first_token is None else round(self.first_token - self.started, 3),
            grounded=grounded, grounded_rank=rank,
            found_ids=tuple(str(e.get("id")) for e in distinct_entries(entries)),
            agent_tokens_in=usage.input_tokens if usage else 0, agent_tokens_out=usage.output_tokens if usage else 0,
            agent_requests=usage.requests if usage else 0,
            hypothesis_tokens=hypothesis_tokens(result.new_messages(), self.tutor.count_tokens) if result else 0)
        if self.monitor.turn_records:
            self.tutor.stages.add("search", sum(r.total_ms for r in self.monitor.turn_records) / 1000)
        with self.tutor.stages.time("events"):
            recorded = await self._record_safely(turn)
        _log.info("turn %s learner %s arm %s %s in %.1f s", self.turn_id, learner_tag(self.subject), self.arm,
                  "abandoned" if abandoned else f"failed ({(error or 'Error').split(':', 1)[0]})" if turn.failed
                  else "answered", seconds)
        if self.tutor.judge is not None and entries and recorded:
            task = asyncio.get_running_loop().create_task(self._judge(turn, entries))
            self.tutor.background.add(task)
            task.add_done_callback(self.tutor.background.discard)
        return {"turn_id": self.turn_id, "text": text, "replaced": replaced, "failed": turn.failed}

    def _reply(self, output: Any, entries: list[dict[str, Any]]) -> tuple[str, bool, bool | None, int | None]:
        found = distinct_entries(entries)
        if isinstance(output, GroundedAnswer):
            rank = headline_entry(output, entries, self.tutor.headline, self.margin())
            parts = reply_parts(output, entries, headline=rank, earlier=earlier_korean(conversation(self.history)),
                                agrees=meaning_check_of(self.deps.retriever, self.question, conversation(self.history)))
            return render_parts(parts), False, bool(found), rank if found else None
        text, replaced = ground_reply(html.unescape(str(output or "").strip()), entries)
        if not text:
            raise ValueError("the model returned an empty answer")
        if not found:
            return text, False, None, None
        if replaced:
            return text, True, False, None
        rank = next((i for i, e in enumerate(found, 1) if names_an_entry(text, [e])), None)
        return text, False, rank is not None, rank

    async def _record_safely(self, turn: TurnRecord) -> bool:
        try:
            await asyncio.to_thread(self._record, turn)
            return True
        except Exception as exc:  # noqa: BLE001 - the learner's reply does not depend on the log
            self.tutor.record_failures += 1
            reason = getattr(exc, "orig", None) or exc  # a driver's message, without the statement's parameters
            _log.error("turn %s was not recorded (%s: %s); the learner got the reply", self.turn_id,
                       type(exc).__name__, str(reason).splitlines()[0][:200] if str(reason) else "")
            return False

    def _record(self, turn: TurnRecord) -> None:
        log = self.tutor.log
        log.add_turn(turn)
        for rec in self.monitor.turn_records:
            log.add_retrieval(rec, self.turn_id)
        if (self.previous is not None and self.previous_question is not None and not self.previous.failed
                and not self.previous.abandoned):
            # (a failed or abandoned turn may be missing from the stored conversation: the history's last question
            # may be an older one)
            before = self.previous.found_ids[0] if self.previous.found_ids else None
            now = turn.found_ids[0] if turn.found_ids else None
            log.update_turn(self.previous.turn_id,
                            rephrase=is_rephrase(self.previous_question, self.question, before, now))

    async def _judge(self, turn: TurnRecord, entries: list[dict[str, Any]]) -> None:
        try:
            outcome = await self.tutor.judge.maybe_judge(turn, self.question, distinct_entries(entries))
            if outcome:
                await asyncio.to_thread(self.tutor.log.update_turn, turn.turn_id, **outcome)
        except Exception:  # noqa: BLE001 - a judge failure never touches the learner's turn
            _log.exception("relevance judge failed on turn %s", turn.turn_id)

    async def _search_now(self) -> list[dict[str, Any]]:
        """The model failed before any search: plain search of the agent's collections on its behalf (outside the
        A/B records)."""
        step = retrieve_step(self.tutor.agent)
        found: list[dict[str, Any]] = []
        for collection, k in ((step.grammar_collection, step.grammar_top_k), (step.docs_collection, step.docs_top_k)):
            if not collection:
                continue
            try:
                result = await self.deps.retriever.search(collection, self.question, top_k=k, use_hyde=False)
            except HydeTutorError:
                continue
            found += [compact_result(d) for d in result.results]
        self.deps.found.extend(found)
        return found


def fallback_reply(error: str, entries: list[dict[str, Any]]) -> str:
    """What the learner reads when the model could not answer: one line (the error's type only) and the entries."""
    line = f"[модель не смогла ответить ({error.split(':', 1)[0]})]"
    if not entries:
        return line + "\nВ справочнике ничего не нашлось; попробуйте переформулировать вопрос."
    return line + "\nВот что нашлось в справочнике:\n" + format_entries(entries, max_chars=2400)
