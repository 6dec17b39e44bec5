"""The ``hyde-tutor`` Typer app and what its commands share: settings check, errors, query files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from pydantic import ValidationError

from ..config import Settings, redact_url
from ..errors import HydeTutorError
if TYPE_CHECKING:  # imported where used: `hyde-tutor --help` does not load the engines
    from ..hyde import HydeRetriever
    from ..retrieval.retriever import Retriever

FUSION_MODES = ("rrf", "max", "mean", "score")
"""``hyde.policy.FusionMode``'s values, spelled out so the CLI starts without importing the engine."""

app = typer.Typer(add_completion=False, no_args_is_help=True, help="HyDE retrieval for Korean-tutor agents.")


@app.callback()
def _check_settings(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what hyde-tutor does (HYDE_LOG_LEVEL=INFO)."),
) -> None:
    """HyDE retrieval for Korean-tutor agents."""
    try:
        settings = Settings()
    except ValidationError as exc:
        fail(settings_error_message(exc))
    configure_logging("INFO" if verbose else settings.log_level)


def configure_logging(level: str) -> None:
    """hyde_tutor's log records on stderr at ``level`` (one handler, however often it is called)."""
    import logging

    log = logging.getLogger("hyde_tutor")
    log.setLevel(level)
    if not any(getattr(h, "hyde_tutor_handler", False) for h in log.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s hyde_tutor: %(message)s"))
        handler.hyde_tutor_handler = True  # type: ignore[attr-defined]
        log.addHandler(handler)


def settings_error_message(exc: ValidationError) -> str:
    """One line per bad setting, named as the environment variable a user sets."""
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        if loc and loc[-1] == "[key]":  # a bad key of a JSON object setting (HYDE_HYDE__DOMAINS, HYDE_SCHEMAS)
            var = "HYDE_" + "__".join(p.upper() for p in loc[:-2])
            parts.append(f"{var} has a bad key {loc[-2]!r}: {err['msg']}")
            continue
        var = "HYDE_" + "__".join(p.upper() for p in loc)
        parts.append(f"{var}={_printable(err.get('input'))!r}: {err['msg']}")
    return "bad setting " + "; ".join(parts) + " (environment or .env; .env.example lists every key and its range)"


_SECRET_NAME = re.compile("key|secret|token|password", re.IGNORECASE)


def _printable(value: Any) -> Any:
    """A refused setting as it may be printed: URLs without their passwords or secret query values, and the
    values of secret-looking keys hidden (the input of a model's check is all of its fields)."""
    if isinstance(value, dict):
        return {k: "***" if _SECRET_NAME.search(str(k)) else _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_printable(v) for v in value)
    if isinstance(value, str) and "://" in value:
        return redact_url(value)
    return value


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` in red on stderr and exit with ``code``."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def check_fusion(fusion: str | None) -> None:
    if fusion not in (None, *FUSION_MODES):
        fail(f"--fusion must be one of {', '.join(FUSION_MODES)}, not {fusion!r}.")


@contextmanager
def open_retriever() -> Iterator[Retriever]:
    """The configured retriever, closed afterwards; a library error becomes a CLI error."""
    from ..retrieval.retriever import Retriever

    retriever: Retriever | None = None
    try:
        retriever = Retriever.from_settings(Settings())
        yield retriever
    except HydeTutorError as exc:
        fail(str(exc))
    finally:
        if retriever is not None:
            retriever.close()


def open_hyde(settings: Settings | None = None) -> HydeRetriever:
    """The configured HyDE retriever (says on stderr which LLM writes the hypotheses)."""
    from ..hyde import HydeRetriever
    from ..llm.backends import backend_problem, describe_backend

    settings = settings or Settings()
    problem = backend_problem(settings)
    usable = f" — NOT USABLE: {problem}; HyDE searches fall back to plain retrieval" if problem else ""
    typer.echo(f"LLM for HyDE: {describe_backend(settings)} (pin with HYDE_LLM__PROVIDER){usable}", err=True)
    try:
        return HydeRetriever.from_settings(settings)
    except HydeTutorError as exc:
        fail(str(exc))


def read_queries(path: Path) -> list[tuple[str, str]]:
    """BEIR queries.jsonl (``_id``, ``text``) or one query per line."""
    if not path.is_file():
        fail(f"Queries file {path} does not exist.")
    out: list[tuple[str, str]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
                out.append((str(obj["_id"]), str(obj["text"])))
                continue
            except (json.JSONDecodeError, KeyError, TypeError):
                fail(f"{path}:{n}: expected a BEIR query object with _id and text.")
        out.append((str(n), line.strip()))
    return out


_LINE_BREAKS = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_line(obj: Any) -> str:
    """One JSON object on one line: the line breaks JSON leaves raw (NEL, U+2028/9) are escaped too."""
    text = json.dumps(obj, ensure_ascii=False)
    for raw, escaped in _LINE_BREAKS.items():
        text = text.replace(raw, escaped)
    return text
