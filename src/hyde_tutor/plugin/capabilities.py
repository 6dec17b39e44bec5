"""Retrieval-first tutoring: search before the model answers, so it only has to write the answer.

Small local models do not call tools reliably (the embedded 1.5B model ends most tool-calling turns
in ``UnexpectedModelBehavior``; docs/MEASUREMENTS.md, "Chat with the embedded model"). :class:`RetrieveFirst` is a
pydantic-ai capability that runs the same searches the tools would (same experiment decision, same
monitor records) on the learner's message before the first model request, and adds the entries it
found to the instructions::

    agent = Agent(model, deps_type=TutorDeps, instructions=tutor_answer_instructions(),
                  capabilities=[RetrieveFirst()])

The agent then has no tools: one model request per turn, whose only job is the answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability

from ..llm.prompts import load_prompt
from ..retrieval.retriever import EncodedQueries
from ..corpus.rendering import format_entries, reference_block
from .toolset import HydeSearchToolset, TutorDeps, context_search, tool_request, tutor_instructions

__all__ = ["HydeTutor", "RetrieveFirst", "TutorMode", "closest_first", "format_entries", "retrieve_step",
           "tutor_answer_instructions"]

GROUNDED_ENTRY_CHARS = 900
"""The found entries' text in a structured answer's prompt (the embedded model): 900 characters (about 480 prompt
tokens in all, against 850 at 1,800) took a turn from 10.0 to 7.5 s (median, 10 questions, 2 cores) with the
headline as often relevant (docs/MEASUREMENTS.md, "Offline tutor turn")."""
_log = logging.getLogger("hyde_tutor.tutor")
TutorMode = Literal["tools", "retrieve-first"]
TUTOR_MODES: tuple[str, ...] = ("tools", "retrieve-first")


@dataclass
class RetrieveFirst(AbstractCapability[TutorDeps]):
    """Search ``grammar_collection`` and ``docs_collection`` with the user's message before the model
    answers; the found entries become part of the instructions. A search failure leaves a note in
    their place (the model then answers from its own knowledge and says so), never an error."""

    grammar_collection: str | None = "grammar"
    docs_collection: str | None = "docs"
    grammar_top_k: int = 3
    docs_top_k: int = 2
    max_chars: int = 1800
    """Cap on the entries' text: a small local model reads a long prompt slowly."""
    share_hypothesis: bool = True
    """The first search's generated hypothesis is searched in the other collection too (as a ready hypothesis, so
    that search's record names its source ``agent``; no second LLM call): a turn costs one call instead of one per
    collection. False: each collection generates its own (two calls a turn, measured no better:
    docs/MEASUREMENTS.md, "Retrieve-first at one call")."""
    order: Literal["closest", "listed"] = "closest"
    """Which collection is searched first, and so writes the turn's one hypothesis: ``closest``, the one whose
    nearest entry is nearest to the message as typed (one plain dense search per collection, a few milliseconds,
    made only when this turn will generate); ``listed``, grammar then docs. The found entries keep the listed order
    either way."""

    def __post_init__(self) -> None:
        if self.order not in ("closest", "listed"):
            raise ValueError(f"order must be 'closest' or 'listed', not {self.order!r}")

    def get_instructions(self) -> Any:
        return self._found_entries

    def instruction_parts(self) -> list[Any]:
        """What this step adds to an agent's instructions (the found entries, framed as data), for a capability
        that composes it with its own instructions."""
        return [self._found_entries]

    async def search(self, deps: TutorDeps, question: str,
                     history: tuple[tuple[str, str], ...] = ()) -> list[dict[str, Any]]:
        """The searches this step runs for ``question`` (a follow-up with the conversation in view). Their entries
        are added to ``deps.found`` in the listed order, whichever collection was searched first."""
        steps = [(tool, collection, k) for tool, collection, k in
                 (("grammar_search", self.grammar_collection, self.grammar_top_k),
                  ("docs_search", self.docs_collection, self.docs_top_k)) if collection and question]
        order = list(range(len(steps)))
        if self.share_hypothesis and self.order == "closest" and len(steps) > 1 and await _will_generate(deps):
            order = await closest_first(deps, steps, question)
        entries_of: dict[int, list[dict[str, Any]]] = {}
        shared: str | None = None
        for i in order:
            tool, collection, k = steps[i]
            request = tool_request(tool, collection, question, k, history=history, hypothesis=shared)
            entries_of[i], result = await context_search(deps, tool, request, keep_found=False)
            if self.share_hypothesis and shared is None and result is not None:
                shared = next((h.text for h in result.hypotheses if h.source == "llm"), None)
        found = [e for i in range(len(steps)) for e in entries_of.get(i, [])]
        deps.found.extend(found)
        return found

    async def _found_entries(self, ctx: RunContext[TutorDeps]) -> str:
        question = ctx.prompt if isinstance(ctx.prompt, str) else ""
        ctx.deps.begin_run(getattr(ctx, "run_id", None))  # searched once per run, not reused across runs
        cached = ctx.deps.found_for(question) if question else None
        if cached is None and question:
            cached = ctx.deps.take_prefetched(question)
            if cached is not None:  # searched before the run (the chat showed them): the run's found entries
                ctx.deps.found.extend(cached)
                ctx.deps.remember_found(question, cached)
        if cached is None:
            history = conversation(ctx.messages)
            if history and history[-1] == ("user", question):  # the current message is not history
                history = history[:-1]
            cached = await self.search(ctx.deps, question, history)
            ctx.deps.remember_found(question, cached)
        if not cached and ctx.deps.unavailable:
            return ("Поиск по справочнику сейчас недоступен: ответь по своим знаниям и скажи ученику, что "
                    "справочник недоступен.")
        if not cached:
            return "Поиск по справочнику ничего не нашёл: ответь по своим знаниям и скажи об этом ученику."
        return "Найденные статьи (опирайся на них). " + reference_block(format_entries(cached, self.max_chars))


PROBE_TIMEOUT_S = 2.0
"""How long :func:`closest_first` may take before the listed order is kept (an embedder that does not answer)."""


async def _will_generate(deps: TutorDeps) -> bool:
    """Whether this turn's searches may call the LLM (HyDE on for the subject): only then does the order matter."""
    from ..experiment.assignment import decide

    try:
        experiment = await deps.acurrent_experiment()
        return decide(None, experiment, deps.subject_id, deps.retriever.policy.enabled).use_hyde
    except Exception:  # noqa: BLE001 - a bad experiment file: the searches report it; the order does not matter
        return False


async def closest_first(deps: TutorDeps, steps: Sequence[tuple[str, str, int]], question: str,
                        timeout_s: float = PROBE_TIMEOUT_S) -> list[int]:
    """The indexes of ``steps``, ordered by how near each collection's nearest entry is to ``question`` (the top
    score of one plain dense search each, one dense encoding for all), nearest first. A collection whose probe
    fails goes last; a probe that fails everywhere or takes over ``timeout_s`` keeps the given order. Never
    raises: the order only decides which search writes the hypothesis."""
    retriever = deps.retriever.retriever
    scores: dict[int, float] = {}

    async def probe() -> None:
        dense = await asyncio.to_thread(retriever.dense.embed, [question])
        encoded = EncodedQueries(dense=dense, sparse=[{}])
        for i, (_, collection, _) in enumerate(steps):
            try:
                scores[i] = await asyncio.to_thread(_nearest, retriever, collection, encoded)
            except Exception as exc:  # an unavailable collection: its search will say so
                _log.debug("hyde-tutor: the closeness probe of %s failed: %s", collection, exc)

    try:
        await asyncio.wait_for(probe(), timeout_s)
    except Exception as exc:  # the embedder failed or is slow: the searches themselves will say so
        _log.debug("hyde-tutor: the closeness probe failed (%s): the listed order is kept", type(exc).__name__)
    return sorted(range(len(steps)), key=lambda i: -scores.get(i, float("-inf")))  # stable: ties keep the order


def _nearest(retriever: Any, collection: str, encoded: Any) -> float:
    """The top dense score of ``collection`` for the one encoded query (``-inf`` when it is empty)."""
    if not retriever.is_checked(collection):
        retriever.check_collection(collection)
    hits = retriever.store.search_batch(collection, [retriever.request(encoded, 0, 1, "dense", collection=collection)])
    return hits[0][0].score if hits and hits[0] else float("-inf")


def conversation(messages: Sequence[Any]) -> tuple[tuple[str, str], ...]:
    """A run's earlier messages as ``(role, content)`` turns: the learner's prompts and the tutor's text
    replies (tool calls and returns left out)."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    turns: list[tuple[str, str]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            turns += [("user", p.content) for p in message.parts
                      if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
        elif isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart)).strip()
            if text:
                turns.append(("assistant", text))
    return tuple(turns)


def tutor_answer_instructions() -> str:
    """The answer-only tutor's instructions, from ``prompts/tutor_answer.v<N>.md``."""
    return load_prompt("tutor_answer").text


@dataclass
class HydeTutor(AbstractCapability[TutorDeps]):
    """The Korean tutor as one pydantic-ai capability: its instructions plus the HyDE search, wired the
    way the model can use it.

    ``tools`` gives the model ``grammar_search`` and ``docs_search`` (capable models);
    ``retrieve-first`` searches before the model answers (:class:`RetrieveFirst`) and offers no tools
    (the embedded model, whose tool calls mostly fail). :meth:`for_backend` picks by the backend::

        agent = Agent(llm.agent_model, deps_type=TutorDeps, capabilities=[HydeTutor.for_backend(llm)])
    """

    mode: TutorMode = "tools"
    grammar_collection: str | None = "grammar"
    docs_collection: str | None = "docs"
    grounded: bool = False
    """retrieve-first: instructions for a structured answer (:class:`~hyde_tutor.tutor.grounding.GroundedAnswer`;
    pair it with ``output_type=NativeOutput(GroundedAnswer)``, as :func:`~hyde_tutor.tutor.chat.build_tutor_agent`
    does)."""

    def __post_init__(self) -> None:
        if self.mode not in TUTOR_MODES:
            raise ValueError(f"HydeTutor mode must be one of {', '.join(TUTOR_MODES)}, not {self.mode!r}")
        self._retrieve = RetrieveFirst(grammar_collection=self.grammar_collection, docs_collection=self.docs_collection,
                                       max_chars=GROUNDED_ENTRY_CHARS if self.grounded else RetrieveFirst.max_chars)
        # built once: a toolset's tool schemas take ~5 ms of CPU to build, and every run asks for the toolset
        # (its per-run state lives in the deps, so one toolset serves all runs, as an agent's own toolsets do)
        self._toolset = (HydeSearchToolset(grammar_collection=self.grammar_collection,
                                           docs_collection=self.docs_collection) if self.mode == "tools" else None)

    @property
    def retrieval(self) -> RetrieveFirst:
        """The searches this tutor runs on a learner's message (its collections and sizes), in either mode."""
        return self._retrieve

    @classmethod
    def for_backend(cls, backend: Any, **kwargs: Any) -> HydeTutor:
        """``retrieve-first`` for the embedded local model, ``tools`` for every other backend."""
        return cls(mode="retrieve-first" if getattr(backend, "kind", None) == "local" else "tools", **kwargs)

    def get_instructions(self) -> Any:
        if self.mode == "retrieve-first":
            base = load_prompt("tutor_grounded").text if self.grounded else tutor_answer_instructions()
            return [base, *self._retrieve.instruction_parts()]
        return tutor_instructions()

    async def before_run(self, ctx: RunContext[TutorDeps]) -> None:
        if isinstance(ctx.deps, TutorDeps):
            ctx.deps.run_usage = ctx.usage  # the run's live usage: a turn cut short still counts what it spent

    def get_toolset(self) -> Any:
        return self._toolset


def retrieve_step(agent: Any) -> RetrieveFirst:
    """The searches ``agent``'s tutor runs on a learner's message: its :class:`RetrieveFirst`, or its
    :class:`HydeTutor`'s (either mode: the tutor's collections), else a default :class:`RetrieveFirst`. The
    chat's prefetch and its search after a failed model use it, so they search what the agent searches."""
    stack = [getattr(agent, "root_capability", None)]
    while stack:
        capability = stack.pop()
        if isinstance(capability, RetrieveFirst):
            return capability
        if isinstance(capability, HydeTutor):
            return capability.retrieval
        stack.extend(getattr(capability, "capabilities", None) or ())
        if getattr(capability, "wrapped", None) is not None:
            stack.append(capability.wrapped)
    return RetrieveFirst()
