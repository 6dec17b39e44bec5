"""A SIMULATED A/B experiment: simulated learners, a real split, the real tools path, outcomes from the qrels.

Nothing here is a learner. Each simulated learner (an id) asks a few questions of the bundled eval sets; the
real :class:`~hyde_tutor.experiment.assignment.Experiment` assigns the id an arm; every turn runs the tutor agent's
tools path for real (a pydantic-ai ``Agent`` with :class:`~hyde_tutor.plugin.toolset.HydeSearchToolset`, the
real retriever, store and embedder), its model replaying the RECORDED tool calls of a capable agent
(:mod:`~hyde_tutor.evaluation.agent_replay`: the query and the hypothesis it wrote). The recorded turn ends
after its tool calls, so the simulated reply is the search's TOP found entry, and the outcomes follow from the
eval set's qrels (the top found entry: the first result of the agent's first search call):

* rating (on ``rated_share`` of turns): 👍 when the top found entry is relevant, 👎 otherwise;
* grounded: a relevant entry is among the found ones (``grounded_rank``: the first one's rank);
* rephrase: when the top entry is not relevant, the learner asks again with probability ``rephrase_prob``;
* judge score (on ``judge_share`` of turns): a qrels stand-in for the relevance judge, 1 when the top entry
  is relevant, 0.5 when one at rank 2-3 is, else 0 (no LLM call, so ``judge_calls`` stays 0).

``plain_both`` makes it an A/A test: the HyDE arm's searches run plain (its arm, assignment and records stay).
:func:`drop_learners` removes some learners of one arm afterwards, a logging loss an SRM check must catch.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..plugin.deps import TutorDeps
from .events import EventLog, ExperimentEvent, MemoryEventLog, RatingEvent, TurnRecord
from .assignment import Experiment
from ..plugin.monitor import RetrievalRecord
from ..evaluation.agent_replay import AgentTurn, AgentReplayModel, ReplayStats
from ..evaluation.beir import load_beir

__all__ = ("SimQuestion", "SimulationConfig", "load_questions", "simulate", "drop_learners", "PlainSearch",
           "known_effect")

EVAL_SETS = ("grammar", "grammar_holdout", "docs", "followups")


@dataclass(frozen=True, slots=True)
class SimQuestion:
    """One question a simulated learner may ask: an eval query with a recorded agent turn, and its qrels."""

    set_name: str
    id: str
    text: str
    history: tuple[tuple[str, str], ...]
    grades: Mapping[str, int]
    """Relevant entry ids and their grades (> 0)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationConfig:
    """How the simulated learners behave (all draws from one seeded generator)."""

    learners: int = 300
    questions_per_learner: tuple[int, int] = (2, 6)
    hyde_share: float = 0.5
    experiment: str = "hyde-vs-raw"
    rated_share: float = 0.6
    rephrase_prob: float = 0.5
    judge_share: float = 0.2
    plain_both: bool = False
    """An A/A test: the HyDE arm's searches run plain too."""
    seed: int = 0


def load_questions(root: Path, turns: Mapping[str, AgentTurn], sets: Sequence[str] = EVAL_SETS) -> list[SimQuestion]:
    """The eval sets' queries that the recorded agent answered (others could not be replayed)."""
    out = []
    for name in sets:
        data = load_beir(root / name)
        for q in data.queries:
            probe = AgentTurn(q.text.strip(), (), "", (), "", history=q.history)
            grades = {doc: g for doc, g in data.qrels.get(q.id, {}).items() if g > 0}
            if probe.key in turns and grades:
                out.append(SimQuestion(name, q.id, q.text, q.history, grades))
    return out


class PlainSearch:
    """A retriever front whose every search is plain (the A/A test's HyDE arm): the rest passes through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def execute(self, request: Any) -> Any:
        return await self.inner.execute(request.replace(use_hyde=False))


@dataclass
class _Capture:
    """A monitor that keeps one turn's retrieval records."""

    records: list[RetrievalRecord] = field(default_factory=list)

    def record(self, rec: RetrievalRecord) -> None:
        self.records.append(rec)


def _share(turn_id: str) -> float:
    """A turn's deterministic position in [0, 1) (which turns the judge stand-in samples)."""
    return int.from_bytes(hashlib.sha256(turn_id.encode()).digest()[:8], "big") / 2**64


def _messages(history: Iterable[tuple[str, str]]) -> list[Any]:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    return [ModelRequest(parts=[UserPromptPart(c)]) if r == "user" else ModelResponse(parts=[TextPart(c)])
            for r, c in history]


def _hypotheses(run_messages: Iterable[Any]) -> list[str]:
    from pydantic_ai.messages import ToolCallPart

    return [str(p.args_as_dict().get("hypothesis") or "") for m in run_messages for p in getattr(m, "parts", [])
            if isinstance(p, ToolCallPart)]


def _found_in_call_order(run_messages: Sequence[Any]) -> list[str]:
    """Entry ids the searches returned, in the order of the agent's tool calls (the calls of one response run
    concurrently, so the order they finish in, which ``TutorDeps.found`` keeps, varies from run to run)."""
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    parts = [p for m in run_messages for p in getattr(m, "parts", [])]
    returns = {p.tool_call_id: p.content for p in parts if isinstance(p, ToolReturnPart)}
    found: list[str] = []
    for call in (p for p in parts if isinstance(p, ToolCallPart)):
        content = returns.get(call.tool_call_id)
        if isinstance(content, dict):
            found += [str(e.get("id")) for e in content.get("results", []) if isinstance(e, dict)]
    return found


def _judge_stand_in(found: Sequence[str], grades: Mapping[str, int]) -> float:
    if found and found[0] in grades:
        return 1.0
    return 0.5 if any(f in grades for f in found[1:3]) else 0.0


async def simulate(retriever: Any, agent_turns: Mapping[str, AgentTurn], questions: Sequence[SimQuestion],
                   config: SimulationConfig, *, log: EventLog | None = None,
                   count_tokens: Any = None) -> tuple[EventLog, ReplayStats]:
    """Run the simulated experiment; every turn, its retrievals and ratings go to ``log``.

    Args:
        retriever: a :class:`~hyde_tutor.hyde.HydeRetriever` over collections ``grammar`` and ``docs``.
        agent_turns: the recorded capable agent's tool calls (:func:`~hyde_tutor.evaluation.agent_replay.load_agent_turns`).
        questions: what the learners may ask (:func:`load_questions`).
        config: the learners' behaviour and the split.
        log: where to write: any :class:`~hyde_tutor.experiment.events.EventLog` (the server's SQL one too); a new
            :class:`MemoryEventLog` by default.
        count_tokens: counts the tokens of the hypotheses the agent wrote (``str -> int``); words by default.
    """
    from pydantic_ai import Agent

    from ..plugin.toolset import HydeSearchToolset, tutor_instructions

    if not questions:
        raise ValueError("no questions to ask: none of the eval queries has a recorded agent turn")
    log = log if log is not None else MemoryEventLog()
    count = count_tokens or (lambda text: len(text.split()))
    rng = random.Random(config.seed)
    experiment = Experiment(config.experiment, hyde_share=config.hyde_share)
    stats = ReplayStats()
    agent = Agent(AgentReplayModel(dict(agent_turns), stats=stats), deps_type=TutorDeps,
                  toolsets=[HydeSearchToolset()], instructions=tutor_instructions())
    search = PlainSearch(retriever) if config.plain_both else retriever
    log.add_experiment_event(ExperimentEvent(change="start", experiment=experiment.name,
                                             hyde_share=experiment.hyde_share, enabled=True, actor="simulation"))
    low, high = config.questions_per_learner
    for i in range(config.learners):
        subject = f"sim-learner-{config.seed}-{i:04d}"
        for j in range(rng.randint(low, high)):
            q = rng.choice(questions)
            # every draw is made whatever the search finds, so runs with the same seed ask the same questions
            rates, rephrases = rng.random() < config.rated_share, rng.random() < config.rephrase_prob
            turn_id = f"{subject}-t{j}"
            capture = _Capture()
            deps = TutorDeps(retriever=search, experiment=experiment, monitor=capture,  # type: ignore[arg-type]
                             subject_id=subject)
            started = time.perf_counter()
            failed, usage, hypotheses, found = False, None, [], []
            try:
                run = await agent.run(q.text, deps=deps, message_history=_messages(q.history))
                usage, hypotheses, found = run.usage, _hypotheses(run.new_messages()), \
                    _found_in_call_order(run.new_messages())
            except Exception:  # noqa: BLE001 - a turn the model could not answer is an outcome, not a crash
                failed, found = True, [str(e.get("id")) for e in deps.found]
            ranks = [k for k, doc in enumerate(found, start=1) if doc in q.grades]
            relevant_top = bool(found) and found[0] in q.grades
            log.add_turn(TurnRecord(
                turn_id=turn_id, subject=subject, conversation_id=f"{subject}-{q.set_name}-{q.id}",
                experiment=experiment.name, arm=experiment.arm(subject), question_chars=len(q.text), failed=failed,
                seconds=time.perf_counter() - started, grounded=bool(ranks), grounded_rank=ranks[0] if ranks else None,
                found_ids=tuple(found), agent_tokens_in=usage.input_tokens if usage else 0,
                agent_tokens_out=usage.output_tokens if usage else 0, agent_requests=usage.requests if usage else 0,
                hypothesis_tokens=sum(count(h) for h in hypotheses if h),
                rephrase=(not relevant_top) and rephrases,
                judge_score=_judge_stand_in(found, q.grades) if _share(turn_id) < config.judge_share else None))
            for record in capture.records:
                log.add_retrieval(record, turn_id)
            if rates:
                log.add_rating(RatingEvent(turn_id=turn_id, subject=subject, rating=1 if relevant_top else -1))
    return log, stats


async def known_effect(retriever: Any, agent_turns: Mapping[str, AgentTurn],
                       questions: Sequence[SimQuestion]) -> dict[str, float]:
    """What the experiment should find: each question asked once per treatment through the same path (the
    arm forced by a 100 % / 0 % share), the share whose top found entry is relevant.

    Returns:
        ``{"hyde", "raw", "difference", "questions"}``: top-1 relevance over the questions (uniform, as the
        simulated learners draw them).
    """
    out: dict[str, float] = {}
    for arm, share in (("hyde", 1.0), ("raw", 0.0)):
        config = SimulationConfig(learners=0, hyde_share=share, experiment=f"known-{arm}")
        hits = 0
        for k, q in enumerate(questions):
            log, _ = await simulate(retriever, agent_turns, [q], replace(config, learners=1, seed=k,
                                                                          questions_per_learner=(1, 1)))
            found = log.turns()[0].found_ids
            hits += bool(found) and found[0] in q.grades
        out[arm] = hits / len(questions)
    return out | {"difference": out["hyde"] - out["raw"], "questions": float(len(questions))}


def drop_learners(log: EventLog, arm: str, share: float, seed: int = 0) -> tuple[MemoryEventLog, int]:
    """A copy of ``log`` without ``share`` of ``arm``'s learners, drawn at random with ``seed``: their turns,
    the retrievals and the rating events of those turns are left out; every other turn, retrieval, rating event
    and every experiment event is copied. The deliberately broken split an SRM check must catch (as if that
    arm's events were lost for some learners).

    Returns:
        The copy and how many learners were dropped (``share`` of the arm's learners, rounded).
    """
    rng = random.Random(seed)
    learners = sorted({t.subject for t in log.turns() if t.arm == arm})
    dropped = set(rng.sample(learners, round(share * len(learners))))
    out = MemoryEventLog()
    for event in log.experiment_events():
        out.add_experiment_event(event)
    kept = set()
    for turn in log.turns():
        if turn.subject not in dropped:
            out.add_turn(turn)
            kept.add(turn.turn_id)
    for turn_id, record in log.retrievals():
        if turn_id in kept:
            out.add_retrieval(record, turn_id)
    for rating in log.ratings():
        if rating.turn_id in kept:
            out.add_rating(rating)
    return out, len(dropped)
