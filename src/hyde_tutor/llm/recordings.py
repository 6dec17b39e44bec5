"""Recorded generations: write a capable model's answers once, replay them offline.

A recording stands in for an API call. ``hyde-tutor record`` runs the configured LLM over a set of
queries (or documents, for write-time questions) and appends one JSON line per generation::

    {"kind": "hypothesis", "domain": "grammar", "query": "...", "perspective": "rule", "text": "...",
     "model": "openai:gpt-4.1", "prompt_refs": ["hypothesis_grammar@v1", "hypothesis_request@v1",
     "perspectives@v1"], "prompt_sha256": "...", "created": "2026-11-24T06:00:00Z"}

The ``replay`` provider (``HYDE_LLM__PROVIDER=replay``) serves those texts through a pydantic-ai
``FunctionModel``, so the pipeline runs the same agent code path as with any other backend. A request
is matched by what the model was sent: each record carries the hash of its system prompt and user message.
A request nobody recorded raises :class:`NotRecordedError`, which the pipeline treats like any LLM failure
(fallback reason ``not_recorded``). This module knows no request format: the layer that owns them
(:mod:`hyde_tutor.hyde.requests`) passes a renderer, and a record whose prompt files changed since it was made
(same name and version, different text) is then found stale: it is skipped, and counted in
:attr:`RecordingBook.stale`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from ..errors import HydeTutorError
from .prompts import Prompt, load_prompt

RecordKind = Literal["hypothesis", "hypotheses", "questions", "condense", "judge"]
RECORD_KINDS: tuple[str, ...] = ("hypothesis", "hypotheses", "questions", "condense", "judge")
__all__ = [
    "NotRecordedError",
    "Recording",
    "RecordingBook",
    "ReplayModel",
    "default_recordings_paths",
    "PromptFiles",
    "RecordRenderer",
]

RecordRenderer = Callable[["Recording", "PromptFiles"], tuple[str, str]]
"""Renders a record back into the (system prompt, user message) it answered, from the prompt files it names
(the layer that owns the request formats provides one: :func:`hyde_tutor.hyde.requests.render_recording`)."""


class NotRecordedError(HydeTutorError):
    """The replay provider has no recording for this request (fallback reason ``not_recorded``)."""


class RecordingFormatError(HydeTutorError, ValueError):
    """A recordings file has a line that is not a recording."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recording:
    """One recorded generation."""

    kind: RecordKind
    """``hypothesis`` (query-time HyDE, one perspective), ``hypotheses`` (one call answering N
    perspectives), ``questions`` (write-time learner questions), ``condense`` (a follow-up rewritten as a
    standalone question; ``conversation`` holds the conversation shown) or ``judge`` (a relevance verdict on a
    served turn's entries: ``query`` is the learner's question, ``conversation`` the entries as shown,
    ``perspective`` ``relevance``, ``text`` the verdict's JSON)."""
    query: str
    """The learner's question; for ``questions``, the document text as it was shown to the model."""
    perspective: str
    """The perspective's name (``rule``, ``example``, ...); for ``hypotheses``, the names joined by ``+``
    (``rule+example``); for ``questions``, K as a string."""
    text: str
    """What the model answered, unnormalised."""
    model: str
    """Who wrote it, labelled honestly (``openai:gpt-4.1``, ``frontier-llm-stand-in``, ...)."""
    prompt_refs: tuple[str, ...]
    """``name@vN`` of every prompt file used: system prompt, request template, perspectives."""
    domain: str = ""
    """The generator's domain (``grammar``, ``docs``, ``passage``); empty for questions."""
    prompt_sha256: str = ""
    """Hash of the rendered system prompt + user message when recorded: detects edited prompt files."""
    created: str = ""
    """ISO 8601 UTC time of the generation."""
    conversation: str = ""
    """A follow-up's recent conversation as the request showed it (``Ученик: …`` lines); empty otherwise."""

    @property
    def key(self) -> tuple[str, str, str, tuple[str, ...]]:
        """(kind, query [+ conversation], perspective, prompt refs): what identifies a generation."""
        query = self.query.strip() + (f"\x00{self.conversation}" if self.conversation else "")
        return (self.kind, query, self.perspective, self.prompt_refs)

    def to_json(self) -> str:
        row = asdict(self)
        row["prompt_refs"] = list(self.prompt_refs)
        return json.dumps(row, ensure_ascii=False)

    @classmethod
    def from_obj(cls, obj: Any) -> Recording:
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        missing = [k for k in ("query", "perspective", "text", "model", "prompt_refs") if k not in obj]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
        refs = obj["prompt_refs"]
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            raise ValueError("prompt_refs must be a list of 'name@vN' strings")
        kind = obj.get("kind", "hypothesis")
        if kind not in RECORD_KINDS:
            raise ValueError(f"kind must be one of {', '.join(RECORD_KINDS)}, not {kind!r}")
        return cls(kind=kind, query=str(obj["query"]), perspective=str(obj["perspective"]), text=str(obj["text"]),
                   model=str(obj["model"]), prompt_refs=tuple(refs), domain=str(obj.get("domain", "")),
                   prompt_sha256=str(obj.get("prompt_sha256", "")), created=str(obj.get("created", "")),
                   conversation=str(obj.get("conversation", "")))


def request_sha256(system: str, user: str) -> str:
    return hashlib.sha256(f"{system.strip()}\x00{user.strip()}".encode()).hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# -- the prompt files a record names -----------------------------------------------------------------

def _parse_ref(ref: str) -> tuple[str, int]:
    name, _, version = ref.partition("@v")
    if not name or not version.isdigit():
        raise ValueError(f"bad prompt ref {ref!r} (want name@vN)")
    return name, int(version)


class PromptFiles:
    """Prompt files by ref (``name@vN``), loaded once (a missing version raises :class:`HydeTutorError`)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._cache: dict[str, Prompt] = {}

    def get(self, ref: str) -> Prompt:
        if ref not in self._cache:
            name, version = _parse_ref(ref)
            self._cache[ref] = load_prompt(name, version, self.directory)
        return self._cache[ref]


# -- reading ------------------------------------------------------------------------------------------

def iter_recordings(path: Path, *, strict: bool = True) -> Iterator[Recording]:
    """Records in one JSONL file. A torn last line (an interrupted append) is skipped; any other bad
    line raises :class:`RecordingFormatError` naming the file and line, unless ``strict=False``."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield Recording.from_obj(json.loads(line))
        except (ValueError, json.JSONDecodeError) as exc:
            torn_tail = no == len(lines) and not text.endswith("\n")
            if strict and not torn_tail:
                raise RecordingFormatError(f"{path}:{no}: not a recording ({exc}). Fix or delete that line.") from exc


def default_recordings_paths() -> list[Path]:
    """Every ``*.jsonl`` under ``./data/recordings``, else under the checkout's ``data/recordings``."""
    for directory in (Path("data/recordings"), Path(__file__).resolve().parents[3] / "data" / "recordings"):
        if directory.is_dir():
            found = sorted(directory.glob("*.jsonl"))
            if found:
                return found
    return []


def resolve_recordings_paths(spec: str | Sequence[str | Path] | None) -> list[Path]:
    """``path[,path…]`` (files or folders of ``*.jsonl``); ``None``/empty means the bundled recordings."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        paths = default_recordings_paths()
        if not paths:
            raise HydeTutorError("No recordings found under data/recordings/. Record some with `hyde-tutor record`, "
                                 "or point HYDE_LLM__RECORDINGS at JSONL files.")
        return paths
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s) for s in spec]
    out: list[Path] = []
    for item in filter(None, items):
        p = Path(item)
        if p.is_dir():
            out += sorted(p.glob("*.jsonl"))
        elif p.is_file():
            out.append(p)
        else:
            raise HydeTutorError(f"Recordings file {p} does not exist (HYDE_LLM__RECORDINGS={spec!r}).")
    if not out:
        raise HydeTutorError(f"No *.jsonl recordings in {spec!r}.")
    return out


@dataclass(slots=True)
class RecordingBook:
    """Recordings indexed by the exact request they answer (system prompt + user message)."""

    by_request: dict[str, Recording] = field(default_factory=dict)
    stale: int = 0
    """Records skipped because their prompt files changed since recording (or are missing)."""
    models: tuple[str, ...] = ()

    @classmethod
    def load(cls, paths: Iterable[str | Path], prompts_dir: Path | None = None, *,
             render: RecordRenderer | None = None) -> RecordingBook:
        """The records in ``paths``, indexed by the hash of the request each one answered (later files and lines
        win). A record is stale, skipped and counted, when a prompt file it names is missing, when it carries no
        request hash, or, given ``render``, when the request rendered from today's prompt files differs from the
        recorded one (a file edited in place). Without ``render`` such a record is kept but can never match: a
        live request carries the edited text."""
        prompts = PromptFiles(prompts_dir)
        book = cls()
        models: dict[str, None] = {}
        for path in paths:
            for rec in iter_recordings(Path(path)):
                try:
                    sha = request_sha256(*render(rec, prompts)) if render else rec.prompt_sha256
                    for ref in rec.prompt_refs:
                        prompts.get(ref)
                except (HydeTutorError, ValueError):
                    book.stale += 1  # a prompt version that is not here any more
                    continue
                if not sha or (rec.prompt_sha256 and rec.prompt_sha256 != sha):
                    book.stale += 1  # no hash to match by, or the prompt file was edited in place after recording
                    continue
                book.by_request[sha] = rec
                models[rec.model] = None
        book.models = tuple(models)
        return book

    def __len__(self) -> int:
        return len(self.by_request)

    def lookup(self, system: str, user: str) -> Recording | None:
        return self.by_request.get(request_sha256(system, user))

    @property
    def label(self) -> str:
        return "+".join(self.models) or "empty"


# -- the replay model -----------------------------------------------------------------------------

def _request_texts(messages: Sequence[Any], info: Any) -> tuple[str, str]:
    from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart

    system = getattr(info, "instructions", None) or ""
    user = ""
    for msg in messages:
        if isinstance(msg, ModelRequest):
            system = msg.instructions or system
            for part in msg.parts:
                if isinstance(part, SystemPromptPart) and not system:
                    system = part.content
                elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    user = part.content
    return system, user


def ReplayModel(book: RecordingBook, *, model_name: str = "replay") -> Any:  # noqa: N802 - a model factory
    """A pydantic-ai ``FunctionModel`` that answers from ``book``; an unrecorded request raises
    :class:`NotRecordedError` (the HyDE pipeline falls back with reason ``not_recorded``)."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    def answer(messages: list[Any], info: Any) -> Any:
        system, user = _request_texts(messages, info)
        rec = book.lookup(system, user)
        if rec is None:
            raise NotRecordedError(
                "The replay provider has no recording for this request (query, perspective and prompt files must "
                "match a recorded generation). Record it with `hyde-tutor record`, or use a live LLM provider."
            )
        return ModelResponse(parts=[TextPart(rec.text)], model_name=rec.model)

    return FunctionModel(answer, model_name=model_name)
