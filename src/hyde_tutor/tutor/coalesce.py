"""Fewer, larger text deltas for a served reply: :class:`CoalescedText`.

A hosted model streams its reply a token at a time, and each token is one event through pydantic-ai's event
pipeline, the UI adapter, the SSE encoder and the HTTP response: at 50 learners that per-token path was the
largest part of a served turn's CPU (docs/MEASUREMENTS.md, "Where a served turn's time goes"). A reader cannot
tell a token every 25 ms from a few words every 50 ms, so the server sends the text the model wrote since the
last send, at most one delta per ``window_s`` of each text part.

It transforms only what the run's consumer sees (``wrap_run_event_stream``): the run's messages, its output and
what the conversation store keeps are the model's own. The served turn passes it to its run (a run that streams
anyway); it is not part of the tutor agent, because an agent with an event-stream wrapper makes even
``agent.run()`` stream its model requests (``hyde-tutor chat`` and models without streaming would change).

The first words are not held (a part's first event goes out at once); a delta is held only until the next event
arrives, never by a timer, so text already written goes out when the next token, the part's end or the stream's
end arrives.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import PartDeltaEvent, TextPartDelta

__all__ = ("CoalescedText",)


@dataclass
class CoalescedText(AbstractCapability[Any]):
    """Join a text part's deltas that arrive within ``window_s`` of the last one sent (see the module)."""

    window_s: float = 0.05

    async def wrap_run_event_stream(self, ctx: Any, *, stream: AsyncIterable[Any]) -> AsyncIterator[Any]:
        held: PartDeltaEvent | None = None
        sent_at = 0.0
        try:
            async for event in stream:
                if _plain_text(event):
                    now = time.monotonic()
                    if held is not None and held.index == event.index:
                        held = replace(held, delta=replace(held.delta, content_delta=held.delta.content_delta
                                                           + event.delta.content_delta))
                    else:
                        if held is not None:
                            out, held = held, None
                            yield out
                        held = event
                    if now - sent_at >= self.window_s:
                        out, held, sent_at = held, None, now
                        yield out
                    continue
                if held is not None:
                    out, held = held, None
                    yield out
                sent_at = time.monotonic()
                yield event
        except Exception:
            if held is not None:  # the text written before the stream failed still reaches the consumer
                yield held
            raise
        if held is not None:
            yield held


def _plain_text(event: Any) -> bool:
    """A delta that only appends text (no citations or provider details to keep apart)."""
    return (isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta)
            and event.delta.citations_delta is None and event.delta.provider_details is None)
