"""The chat endpoint's stream: the agent run through pydantic-ai's Vercel AI adapter, with the served turn's
cards and final reply as data parts (the turn's logic is :mod:`hyde_tutor.tutor.served`'s).

What reaches the learner: a ``data-entries`` part as soon as a search has found entries (cards: pattern,
Russian name, examples); the reply as standard ``text-start``/``text-delta``/``text-end`` parts on every
backend (a stock Vercel AI ``useChat`` client shows it); and a ``data-reply`` part at the end (the turn id to
rate, and the reply the learner keeps: grounded in the entries, or the entries and one line when the model
failed). A text reply streams as the model writes it; a structured answer's raw JSON is never sent: its head
(the chosen entry) goes out as soon as the entry is decided, right after the search when the search is sure
(:class:`~hyde_tutor.tutor.reply_stream.ReplyPacer`), and the rest when the reply is complete. The text parts
always add up to the reply kept (a reply replaced after it streamed follows as a text part of its own). Tool calls and raw tool results are not
sent (the hypotheses and the arm are the operator's: an operator's request gets them in ``operator``).
A model error's text never reaches the page; its type goes into the turn record and the log.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from pydantic_ai.ui.vercel_ai.response_types import (AbortChunk, BaseChunk, DataChunk, DoneChunk, ErrorChunk,
                                                     FinishChunk, StartChunk, TextDeltaChunk, TextEndChunk,
                                                     TextStartChunk)
from pydantic_ai.usage import UsageLimits

from ..tutor.coalesce import CoalescedText
from ..tutor.reply_stream import ReplyPacer
from ..tutor.served import ServedTurn
from .history import keep_as_shown

__all__ = ("turn_stream",)

_TEXT = (TextStartChunk, TextDeltaChunk, TextEndChunk)
_COALESCED = [CoalescedText()]  # a model's tokens reach the page as fewer deltas (tutor/coalesce.py)


class _ReplyText:
    """The reply's own text part (a structured answer's, or a replacement): opened on its first words."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.closed = False

    def say(self, text: str) -> Iterator[BaseChunk]:
        if not text or self.closed:
            return
        if self.id is None:
            self.id = f"reply-{uuid.uuid4().hex[:12]}"
            yield TextStartChunk(id=self.id)
        yield TextDeltaChunk(id=self.id, delta=text)

    def end(self) -> Iterator[BaseChunk]:
        if self.id is not None and not self.closed:
            self.closed = True
            yield TextEndChunk(id=self.id)


async def turn_stream(adapter: VercelAIAdapter[Any, Any], turn: ServedTurn, *, operator: bool, max_requests: int,
                      timeout_s: float) -> AsyncIterator[BaseChunk]:
    """The chunks of one served turn (see the module's docstring).

    The turn is recorded once whatever happens to the stream: its end runs in a task of its own, which the
    cancellation of a closed stream (uvicorn cancels the response when the learner leaves) does not reach; a
    stream closed before the run ended records the turn as it stood, marked abandoned."""
    results: list[Any] = []
    errors: list[str] = []
    ending: list[asyncio.Task[dict[str, Any]]] = []
    shown_cards: list[bool] = []

    async def on_complete(result: Any) -> None:
        results.append(result)

    async def native() -> AsyncIterator[Any]:
        # the run's usage starts from the stored conversation's: the limit is this turn's requests on top of it
        limits = UsageLimits(request_limit=max_requests + turn.prior_usage.requests)
        try:
            async for event in adapter.run_stream_native(
                    deps=turn.deps, conversation_id=turn.conversation_id, timeout=timeout_s, usage_limits=limits,
                    capabilities=_COALESCED):
                yield event
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            raise

    def end(abandoned: bool) -> asyncio.Task[dict[str, Any]]:
        """The turn's end, in its own task (kept until done: the server's shutdown waits for it)."""
        result = results[0] if results and not errors else None
        error = None if result is not None else (errors[0] if errors else
                                                 None if abandoned else "RunStopped: the run did not finish")
        task = asyncio.get_running_loop().create_task(turn.finish(result, error, abandoned=abandoned))
        turn.tutor.background.add(task)
        task.add_done_callback(turn.tutor.background.discard)
        ending.append(task)
        return task

    def entries_chunk(cards: list[dict[str, Any]]) -> DataChunk:
        if not shown_cards:
            shown_cards.append(True)
            turn.tutor.stages.add("cards", time.perf_counter() - turn.started)
        data: dict[str, Any] = {"entries": cards}
        if operator:
            data["operator"] = turn.operator_view()
        return DataChunk(type="data-entries", data=data)

    async def reply_chunks() -> AsyncIterator[BaseChunk]:
        data = await asyncio.shield(end(abandoned=False))
        for out in (*reply.say(pacer.finish(data["text"])), *reply.end()):
            yield out
        if not data["failed"] and (turn.tutor.structured or data.get("replaced")) and adapter.conversation_store:
            await keep_as_shown(adapter.conversation_store, turn.conversation_id, adapter.conversation_scope or "",
                                data["text"])
        if operator:
            data["operator"] = turn.operator_view(results[0] if results and not errors else None)
        yield DataChunk(type="data-reply", data=data)

    try:
        cards = await turn.prefetch()
        pacer, reply = turn.pacer(), _ReplyText()
        finished, run_started = False, time.perf_counter()
        async for chunk in adapter.transform_stream(native(), on_complete=on_complete):
            new = turn.new_cards()  # a search just ended (its tool result is this chunk): the cards go out now
            if new:
                yield entries_chunk(new)
            if isinstance(chunk, _TEXT):
                delta = chunk.delta if isinstance(chunk, TextDeltaChunk) else ""
                if delta:
                    turn.text_arrived()
                if turn.tutor.structured:  # the JSON is not shown: the reply's head, once its entry is decided
                    for out in reply.say(pacer.feed(delta)):
                        yield out
                    continue
                pacer.streamed(delta)
            elif isinstance(chunk, ErrorChunk):
                if not errors:
                    errors.append("ModelError: the run ended in an error event")
                continue
            elif isinstance(chunk, AbortChunk):
                errors.append("TimeoutError: the turn ran past HYDE_SERVER__TURN_TIMEOUT_S")
                continue
            elif isinstance(chunk, (FinishChunk, DoneChunk)) and not finished:
                finished = True
                turn.tutor.stages.add("run", time.perf_counter() - run_started)
                async for out in reply_chunks():
                    yield out
            elif str(getattr(chunk, "type", "")).startswith("tool-"):
                continue
            yield chunk
            if isinstance(chunk, StartChunk):
                if cards:
                    yield entries_chunk(cards)
                for out in reply.say(pacer.start()):  # the search is sure of its entry: its head goes out now
                    yield out
        if not finished:
            async for out in reply_chunks():
                yield out
    except Exception as exc:  # a broken stream (not the learner leaving): the turn failed
        if not ending:
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            end(abandoned=False)
        raise
    finally:
        if not ending:  # the stream was closed (or failed) before the turn ended: record it as it stood
            end(abandoned=True)
