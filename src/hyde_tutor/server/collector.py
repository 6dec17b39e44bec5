"""Python's garbage collector while the tutor serves: :func:`tune_collector` (``HYDE_SERVER__GC_THRESHOLD``;
docs/MEASUREMENTS.md, "The garbage collector while serving")."""

from __future__ import annotations

import gc
from collections.abc import Callable

__all__ = ("tune_collector",)

_TUNED: list[tuple[int, int, int]] = []
"""Python's thresholds before the first app still serving tuned them, once per app serving (apps in one process,
e.g. tests, may start and stop in any order: the last one out puts Python's settings back)."""


def tune_collector(threshold: int) -> Callable[[], None]:
    """Set Python's young-generation collection threshold to ``threshold`` and freeze the objects alive now (the
    models, the corpus, the modules: loaded at startup, never garbage) out of every later collection; returns the
    call that puts both back once no other app in the process still has them tuned. ``threshold`` 0 changes
    nothing.

    A served turn allocates ~1,400 container objects that live across its awaits; at Python's default (700) the
    collector ran about twice a turn, promoted turns in flight to the older generations and scanned them again,
    and every full collection walked the ~300,000 objects loaded at startup (docs/MEASUREMENTS.md, issue 40)."""
    if threshold <= 0:
        return lambda: None
    _TUNED.append(_TUNED[0] if _TUNED else gc.get_threshold())
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, *_TUNED[0][1:])
    restored = False

    def restore() -> None:
        nonlocal restored
        if restored:
            return
        restored = True
        original = _TUNED.pop()
        if not _TUNED:
            gc.set_threshold(*original)
            gc.unfreeze()

    return restore
