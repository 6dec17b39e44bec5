"""What each HyDE call sends, owned here: the request templates filled in, and a recording rendered back into
the request it answered.

The llm layer's :class:`~hyde_tutor.llm.recordings.RecordingBook` matches a request by the hash each record
carries and knows nothing of these formats; :func:`load_recordings` hands it :func:`render_recording`, so a
record made with prompt files that changed since (a missing version, a file edited in place) is counted stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from ..llm.prompts import Prompt, parse_perspectives
from ..llm.recordings import PromptFiles, Recording, RecordingBook

__all__ = ["load_recordings", "render_condense_request", "render_followup_request", "render_hypothesis_request",
           "render_multi_request", "render_questions_request", "render_recording"]


def render_hypothesis_request(request: Prompt, query: str, perspective_instruction: str) -> str:
    """The user message of a hypothesis call: the template's ``{query}`` and ``{perspective}``, filled in one
    pass (a learner's ``{perspective}`` stays text)."""
    return request.fill({"query": query, "perspective": perspective_instruction})


def render_multi_request(request: Prompt, query: str, perspective_instructions: Sequence[str]) -> str:
    """The user message of a one-call request for N hypotheses: ``{query}``, ``{n}`` and ``{perspectives}`` (a
    numbered list)."""
    listing = "\n".join(f"{i}. {text}" for i, text in enumerate(perspective_instructions, start=1))
    return request.fill({"query": query, "n": str(len(perspective_instructions)), "perspectives": listing})


def render_followup_request(request: Prompt, conversation: str, query: str, perspective_instruction: str) -> str:
    """The user message of a hypothesis call for a follow-up: the recent conversation, the question and the
    perspective."""
    return request.fill({"conversation": conversation, "query": query, "perspective": perspective_instruction})


def render_condense_request(request: Prompt, conversation: str, query: str) -> str:
    """The user message of a condense call (a follow-up rewritten as a standalone question)."""
    return request.fill({"conversation": conversation, "query": query})


def render_questions_request(request: Prompt, document_text: str, k: int | str) -> str:
    """The user message of a write-time questions call (a document's ``{k}`` stays text)."""
    return request.fill({"document": document_text, "k": str(k)})


def render_recording(rec: Recording, prompts: PromptFiles) -> tuple[str, str]:
    """(system prompt, user message) that ``rec`` answered, from the prompt files it names."""
    system_ref, request_ref = rec.prompt_refs[:2]
    system, request = prompts.get(system_ref).text, prompts.get(request_ref)
    if rec.kind == "condense":
        return system, render_condense_request(request, rec.conversation, rec.query)
    if rec.kind == "judge":  # the relevance judge's request: the question and the entries as shown
        return system, request.fill({"question": rec.query, "entries": rec.conversation})
    if rec.kind == "questions":
        return system, render_questions_request(request, rec.query, rec.perspective)
    _, _, perspectives_ref = rec.prompt_refs[:3]  # too few refs: ValueError, the record is stale
    by_name = {p.name: p.instruction for p in parse_perspectives(prompts.get(perspectives_ref).text)}
    names = rec.perspective.split("+") if rec.kind == "hypotheses" else [rec.perspective]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"perspective {unknown[0]!r} is not in {perspectives_ref}")
    if rec.kind == "hypotheses":
        return system, render_multi_request(request, rec.query, [by_name[n] for n in names])
    if rec.conversation:
        return system, render_followup_request(request, rec.conversation, rec.query, by_name[rec.perspective])
    return system, render_hypothesis_request(request, rec.query, by_name[rec.perspective])


def load_recordings(paths: Iterable[str | Path], prompts_dir: Path | None = None) -> RecordingBook:
    """The recordings in ``paths``, each checked against the prompt files it names: those made with files that
    changed since are skipped and counted in :attr:`RecordingBook.stale`."""
    return RecordingBook.load(paths, prompts_dir, render=render_recording)
