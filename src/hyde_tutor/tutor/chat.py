"""The example tutoring agent, one chat turn that always ends in a reply, and a terminal chat loop.

Two ways to wire the search into the tutor (``ChatMode``):

* ``tools``: the model calls ``grammar_search`` / ``docs_search`` itself (capable models);
* ``retrieve-first``: :class:`~hyde_tutor.retrieve_first.RetrieveFirst` searches before the model answers and the
  model only writes the answer (the embedded model, which does not call tools reliably; docs/MEASUREMENTS.md).

:func:`answer_turn` never raises for a model failure: the learner gets the entries found and one line saying so.
"""

from __future__ import annotations

import asyncio
import html
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic_ai import Agent, NativeOutput
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.usage import UsageLimits

from ..plugin.monitor import Monitor, RetrievalRecord
from ..corpus.rendering import entry_label, format_entries
from ..plugin.capabilities import TUTOR_MODES, HydeTutor, TutorMode, conversation
from ..errors import HydeTutorError
from .checks import meaning_check_of
from .context_fit import REPLY_LINES, FitContext
from .turn import Turn
from .grounding import (GroundedAnswer, HeadlineRule, earlier_korean, ground_reply, headline_entry, render_parts,
                        reply_parts, with_answer_cap)
from ..plugin.toolset import TutorDeps, compact_result

_log = logging.getLogger("hyde_tutor")
ChatMode = TutorMode
CHAT_MODES = TUTOR_MODES


def default_chat_mode(backend: Any) -> ChatMode:
    """``retrieve-first`` for the embedded model (measured: its tool calls mostly fail), else ``tools``."""
    return HydeTutor.for_backend(backend).mode


CHAT_TEMPERATURE = 0.0
"""The tutor's sampling temperature, set on every turn's model call (the embedded server's own default, 0.8,
made its choice of entry change from run to run; docs/MEASUREMENTS.md, "Offline tutor turn")."""


AGENT_NAME = "hyde-tutor"  # an agent with no name looks for itself in its caller's variables on every run


def build_tutor_agent(
    model: Any, model_settings: dict[str, Any] | None = None, *, mode: ChatMode | Literal["auto"] = "tools",
    grounded: bool | None = None, temperature: float | None = CHAT_TEMPERATURE, history_turns: int = 1,
    fit: FitContext | None = None,
) -> Agent[TutorDeps, Any]:
    """A Russian-speaking Korean tutor wired with the HyDE search (:class:`HydeTutor`).

    Args:
        model: a pydantic-ai model, or an :class:`~hyde_tutor.llm.LLMBackend` (its model and settings are used).
        model_settings: extra model settings (the backend's, when ``model`` is a backend).
        mode: ``tools``, ``retrieve-first``, or ``auto`` (:func:`default_chat_mode` of the backend).
        grounded: retrieve-first asks for a structured answer (:class:`GroundedAnswer`, rendered with the
            chosen entry by :func:`answer_turn`); None: for the embedded local model, whose free text is
            not reliably grounded. Every reply still passes :func:`~hyde_tutor.tutor.grounding.ground_reply`.
        temperature: the sampling temperature of every model call (None: the server's default).
        history_turns: earlier exchanges the model sees (:class:`~hyde_tutor.tutor.context_fit.FitContext`;
            with the embedded model every request is also fitted to its context window; a structured answer's
            model sees an earlier reply's headline only, no Korean sentence to repeat).
        fit: the request fitting itself (default: :meth:`FitContext.for_backend` with ``history_turns``).
    """
    backend = model if hasattr(model, "extra_settings") and hasattr(model, "kind") else None
    if backend is not None:
        model, model_settings = backend.agent_model, model_settings or backend.extra_settings
    settings = dict(model_settings or {})
    if temperature is not None:
        settings["temperature"] = temperature
    chosen = HydeTutor.for_backend(backend).mode if mode == "auto" else mode
    if grounded is None:
        grounded = getattr(backend, "kind", None) == "local"
    structured = chosen == "retrieve-first" and grounded  # a structured choice among the found entries
    settings = with_answer_cap(settings) if structured else settings
    fit = fit or FitContext.for_backend(backend, settings, history_turns, reply_lines=1 if structured else REPLY_LINES)
    if structured:
        tutor = HydeTutor(mode="retrieve-first", grounded=True)
        return Agent(model, deps_type=TutorDeps, capabilities=[tutor, fit], output_type=NativeOutput(GroundedAnswer),  # type: ignore[arg-type]
                     model_settings=settings or None, retries=2, name=AGENT_NAME)  # type: ignore[arg-type]
    return Agent(model, deps_type=TutorDeps, capabilities=[HydeTutor(mode=chosen), fit],  # type: ignore[arg-type]
                 model_settings=settings or None, retries=2, name=AGENT_NAME)  # type: ignore[arg-type]


def answer_turn(agent: Agent[TutorDeps, str], deps: TutorDeps, question: str,
                history: Sequence[ModelMessage] = (), *, max_requests: int = 6,
                on_found: Callable[[list[dict[str, Any]], list[RetrievalRecord]], None] | None = None,
                on_text: Callable[[str], None] | None = None, headline: HeadlineRule = "unsure") -> Turn:
    """Answer one learner message. Never raises for a model failure.

    ``max_requests`` caps model requests per turn: small local models can loop on tool calls.
    ``on_found`` (retrieve-first agents): search first and hand over what was found before the model
    starts, so a chat shows the entries while the model is still writing. ``on_text`` streams a text
    reply as it is generated (pydantic-ai ``run_stream_events``); a structured answer is not streamed.
    ``headline``: which found entry heads a structured reply (:data:`~hyde_tutor.tutor.grounding.HeadlineRule`;
    docs/MEASUREMENTS.md, "Offline tutor turn").
    """
    started = time.perf_counter()
    deps.clear_found()
    deps.margins.clear()
    before = deps.monitor.total if deps.monitor else 0
    if on_found is not None:
        entries = _prefetch(deps, question, history, agent)
        on_found(entries, _new_records(deps.monitor, before))
    first_token: float | None = None
    parts: tuple[Any, ...] = ()
    streaming = on_text is not None and agent.output_type is str
    try:
        if on_text is not None:  # a structured answer streams too: not shown as it comes, but timed
            result, first_token = _run_streaming(agent, deps, question, history, max_requests,
                                                 on_text if streaming else None)
        else:
            result = _turn_loop().run_until_complete(agent.run(
                question, deps=deps, message_history=list(history), usage_limits=UsageLimits(request_limit=max_requests)))
        answer = result.output if isinstance(result.output, GroundedAnswer) else None
        if answer is not None:
            top = str(deps.found[0].get("id")) if deps.found else ""
            number = headline_entry(answer, deps.found, headline, deps.margins.get(top))
            parts = tuple(reply_parts(answer, deps.found, headline=number, earlier=earlier_korean(conversation(history)),
                                      agrees=meaning_check_of(deps.retriever, question, conversation(history))))
            text, replaced = render_parts(parts), False
        else:
            text, replaced = ground_reply(html.unescape(str(result.output or "").strip()), deps.found)
        if not text:
            raise ValueError("the model returned an empty answer")
    except Exception as exc:  # noqa: BLE001 - whatever the model does, the turn ends with a reply
        reason = f"{type(exc).__name__}: {str(exc)[:160]}"
        text = _fallback_reply(agent, deps, question, reason)
        return Turn(text=text, model_error=reason, records=tuple(_new_records(deps.monitor, before)),
                    seconds=time.perf_counter() - started, found=tuple(deps.found), messages=tuple(history),
                    prompt_tokens=deps.prompt_tokens)
    calls = tuple(f"{p.tool_name}({p.args_as_json_str()})" for m in result.new_messages()
                  for p in getattr(m, "parts", []) if isinstance(p, ToolCallPart))
    return Turn(text=text, tool_calls=calls, records=tuple(_new_records(deps.monitor, before)),
                seconds=time.perf_counter() - started, found=tuple(deps.found),
                messages=_as_shown(result.all_messages(), text, answer is not None or replaced),
                replaced=replaced, streamed=streaming,
                first_token_s=None if first_token is None else first_token - started,
                answer=answer, prompt_tokens=deps.prompt_tokens, parts=parts)


def _as_shown(messages: Sequence[ModelMessage], text: str, rewritten: bool) -> tuple[ModelMessage, ...]:
    """The conversation with the tutor's last reply as the learner saw it (a structured answer rendered with its
    entry, a replaced reply's replacement): the next turn's search reads what was taught, by name."""
    import dataclasses
    from pydantic_ai.messages import ModelResponse, TextPart

    out = list(messages)
    if rewritten and out and isinstance(out[-1], ModelResponse):
        out[-1] = dataclasses.replace(out[-1], parts=[TextPart(content=text)])
    return tuple(out)


def _fallback_reply(agent: Agent[TutorDeps, str], deps: TutorDeps, question: str, reason: str) -> str:
    _log.warning("tutor turn: the model could not answer: %s", reason)
    entries = list(deps.found)
    if not entries:  # the model failed before any search: search on its behalf (plain, not recorded as A/B)
        entries = _search_now(deps, question, agent)
    kind = reason.split(":", 1)[0]  # the type only: the message may carry API bodies or file paths
    line = f"[модель не смогла ответить ({kind})]"
    if not entries:
        return line + "\nВ справочнике ничего не нашлось; попробуйте переформулировать вопрос."
    return line + "\nВот что нашлось в справочнике:\n" + format_entries(entries, max_chars=2400)


_loops = threading.local()


def _turn_loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop for chat turns, made on first use and kept: the searches, the model's requests
    and its HTTP connections of every turn stay on one loop (a new loop per turn would strand them)."""
    loop = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = asyncio.new_event_loop()
    return loop


def _run_streaming(agent: Agent[TutorDeps, Any], deps: TutorDeps, question: str, history: Sequence[ModelMessage],
                   max_requests: int, on_text: Callable[[str], None] | None) -> tuple[Any, float | None]:
    """The agent run with its text parts handed to ``on_text`` (when given) as they arrive; (result, the time
    the model's first token arrived)."""
    from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

    first: list[float] = []

    def emit(text: str) -> None:
        if text:
            if not first:
                first.append(time.perf_counter())
            if on_text is not None:
                on_text(text)

    async def run() -> Any:
        async with agent.run_stream_events(question, deps=deps, message_history=list(history),
                                           usage_limits=UsageLimits(request_limit=max_requests)) as events:
            async for event in events:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    emit(event.part.content)
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    emit(event.delta.content_delta)
            return events.result

    result = _turn_loop().run_until_complete(run())
    return result, (first[0] if first else None)


def _prefetch(deps: TutorDeps, question: str, history: Sequence[ModelMessage] = (), agent: Any = None) -> list[dict[str, Any]]:
    """The agent's retrieve-first searches (same collections, sizes, decision, records and results as in the
    run, the conversation in view), done now. Never raises: a failure is said as ``unavailable``."""
    from ..plugin.capabilities import conversation, retrieve_step

    try:
        entries = _turn_loop().run_until_complete(retrieve_step(agent).search(deps, question, conversation(history)))
    except Exception as exc:  # noqa: BLE001 - the turn goes on: the model is told the reference is unavailable
        _log.warning("tutor turn: the search before the model failed", exc_info=True)
        entries = []
        deps.unavailable.append(f"search failed ({type(exc).__name__})")
    deps.prefetch(question, entries)
    return entries


def _search_now(deps: TutorDeps, question: str, agent: Any = None) -> list[dict[str, Any]]:
    """Plain search of the agent's grammar then docs collections for ``question``, outside an agent run and
    outside the A/B records, on the chat's event loop (a second loop would strand the model's HTTP connections)."""
    from ..plugin.capabilities import retrieve_step

    step = retrieve_step(agent)

    async def both() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for collection, k in ((step.grammar_collection, step.grammar_top_k), (step.docs_collection, step.docs_top_k)):
            if not collection:
                continue
            try:
                result = await deps.retriever.search(collection, question, top_k=k, use_hyde=False)
            except HydeTutorError:
                continue
            found += [compact_result(d) for d in result.results]
        return found

    try:
        return _turn_loop().run_until_complete(both())
    except Exception:  # noqa: BLE001 - the reply must still be written (e.g. called inside a running loop)
        return []


def ru_plural(n: int, one: str, few: str, many: str) -> str:
    """The Russian word form for ``n``: 1 результат, 3 результата, 5 результатов (11-14 take ``many``)."""
    if n % 10 == 1 and n % 100 != 11:
        return one
    if 2 <= n % 10 <= 4 and not 12 <= n % 100 <= 14:
        return few
    return many


def warm_up_in_background(hr: Any, collections: Sequence[str], stop: threading.Event | None = None) -> threading.Thread:
    """Load the embedder, the Korean analyser and ``collections`` in a daemon thread while the learner types the
    first question (:meth:`HydeRetriever.warm_up`, the GC left as it is). Without it the chat's first follow-up
    waited 2–3 s for its search: the tutor's reply is the first Korean text, and kiwipiepy loads then. A
    collection that fails is left for the turns to report. ``stop`` (set before closing ``hr``, then join the
    thread): no further collection is started."""

    def run() -> None:
        for collection in collections:
            if stop is not None and stop.is_set():
                return
            try:
                hr.warm_up([collection], freeze_gc=False)
            except Exception as exc:  # noqa: BLE001 - a missing collection: the turn's own search says so
                _log.debug("hyde-tutor: warming up %s failed: %s", collection, exc)

    thread = threading.Thread(target=run, name="hyde-tutor-warm-up", daemon=True)
    thread.start()
    return thread


def chat_loop(agent: Agent[TutorDeps, str], deps: TutorDeps, read: Callable[[], str | None],
              write: Callable[[str], None], max_requests: int = 6, *, show_time: bool = False,
              search_first: bool = False, stream: Callable[[str], None] | None = None) -> int:
    """Read a line, answer it, show the tool calls and HyDE use; stop at EOF or /exit. Returns turns taken.

    ``search_first`` (retrieve-first agents): the searches and what they found are shown as soon as they
    are done, before the model starts writing (with the embedded model that is seconds earlier).
    ``stream`` (a terminal): a text reply is written through it token by token as it is generated, and the
    time to the first token is shown with the time per turn."""
    history: tuple[ModelMessage, ...] = ()
    turns = 0
    while True:
        line = read()
        if line is None or line.strip() in ("/exit", "/quit"):
            return turns
        if not line.strip():
            continue
        shown: list[RetrievalRecord] = []

        def found_now(entries: list[dict[str, Any]], records: list[RetrievalRecord]) -> None:
            _show_records(records, write)
            shown.extend(records)
            if entries:
                write("  найдено: " + "; ".join(entry_label(e) for e in entries[:4]))
            write("  (модель пишет ответ…)")

        turn = answer_turn(agent, deps, line.strip(), history, max_requests=max_requests,
                           on_found=found_now if search_first else None, on_text=stream)
        history = turn.messages
        for call in turn.tool_calls:
            write(f"  → {call}")
        _show_records([r for r in turn.records if r not in shown], write)
        if turn.found and turn.model_error is None and not search_first:
            write("  найдено: " + "; ".join(entry_label(e) for e in turn.found[:4]))
        if turn.streamed and turn.model_error is None:
            write("")  # end the streamed line
            if turn.replaced:  # what streamed did not teach from the entries: the replacement follows
                write(turn.text)
        else:
            write(turn.text)
        if show_time:
            ttft = f", первый токен через {turn.first_token_s:.1f} с" if turn.first_token_s is not None else ""
            write(f"  ({turn.seconds:.1f} с{ttft})")
        turns += 1


WHY_NO_HYDE = {"default": "выключен по умолчанию", "experiment_off": "выключен по умолчанию",
               "explicit": "выключен запросом", "experiment": "группа эксперимента без HyDE"}
"""Who decided against HyDE, in the chat's words (the record keeps the code)."""


def _show_records(records: Sequence[RetrievalRecord], write: Callable[[str], None]) -> None:
    for rec in records:
        why = rec.fallback_reason or ("пропущен: поиск уверен" if rec.skipped else WHY_NO_HYDE.get(rec.reason, rec.reason))
        how = "HyDE" if rec.used_hyde else f"без HyDE ({why})"
        write(f"  ← {rec.tool}: {rec.results} {ru_plural(rec.results, 'результат', 'результата', 'результатов')}, "
              f"{how}, arm={rec.arm}, {rec.total_ms:.0f} мс")


def _new_records(monitor: Monitor | None, before: int) -> list[RetrievalRecord]:
    new = monitor.total - before if monitor else 0
    if monitor is None or new <= 0:
        return []
    return sorted(monitor.records(), key=lambda r: r.timestamp)[-new:]
