"""Counting tokens offline, for backends whose responses carry no usable usage figures.

The ``replay`` provider answers from recordings (pydantic-ai's ``FunctionModel`` only estimates tokens
from word counts) and the embedded server reports no usage on a stream. For both, a search's cost is
counted with a real tokenizer that needs no network: the embedded Qwen2.5 GGUF's vocabulary, loaded
alone (``vocab_only``: no weights in memory). The counts are labelled ``counted:<tokenizer>`` wherever
they appear, so they are never mistaken for a provider's billed figures.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Protocol

_log = logging.getLogger("hyde_tutor")


class TokenCounter(Protocol):
    """Counts the tokens of a chat request and of a reply."""

    name: str

    def count_request(self, system: str, user: str) -> int: ...

    def count_text(self, text: str) -> int: ...


class GGUFVocabCounter:
    """Tokens as a llama.cpp model would count them: the GGUF's vocabulary only, rendered in ChatML
    (the embedded Qwen2.5's chat template) for requests."""

    def __init__(self, gguf: Path, name: str) -> None:
        from llama_cpp import Llama

        self.name = name
        self._lock = threading.Lock()  # one tokenizer context, not documented as thread-safe
        with _quiet_stderr():  # llama.cpp prints a context warning from C even with verbose=False
            self._llama = Llama(model_path=str(gguf), vocab_only=True, verbose=False)

    def _count(self, text: str) -> int:
        with self._lock:
            return len(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def count_request(self, system: str, user: str) -> int:
        chatml = (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                  "<|im_start|>assistant\n")
        return self._count(chatml)

    def count_text(self, text: str) -> int:
        return self._count(text) if text else 0


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the duration (C code writes there directly)."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


_counters: dict[str, TokenCounter | None] = {}
_counters_lock = threading.Lock()


def gguf_counter(gguf: Path | Callable[[], Path], name: str) -> TokenCounter | None:
    """A GGUF's tokenizer, loaded once per process under ``name``; None when llama-cpp-python or the file
    is missing (the reason is logged once; usage then falls back to what the response reports)."""
    with _counters_lock:
        if name not in _counters:
            try:
                path = gguf() if callable(gguf) else gguf
                _counters[name] = GGUFVocabCounter(path, name)
            except Exception as exc:  # noqa: BLE001 - a missing tokenizer must not fail a search
                _counters[name] = None
                _log.warning("hyde-tutor: no offline tokenizer %s (%s: %s); token usage is the response's own "
                             "figure", name, type(exc).__name__, exc)
        return _counters[name]


def qwen_counter(models_dir: Path) -> TokenCounter | None:
    """The embedded Qwen2.5's tokenizer: the yardstick for replayed generations."""
    from .server import qwen_path

    return gguf_counter(lambda: qwen_path(models_dir), "qwen2.5-gguf-vocab")
