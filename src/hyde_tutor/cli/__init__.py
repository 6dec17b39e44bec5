"""The ``hyde-tutor`` command line, one module per command group:

* ``corpus``: ingest, inspect, export-beir, record
* ``search``: search
* ``evaluation``: eval, bench, ab-report
* ``chat``: chat, demo
* ``serve``: serve, experiment
"""

from __future__ import annotations

from .app import app

# importing a group registers its commands, in this order in --help
from . import corpus  # noqa: E402, F401, I001
from . import search  # noqa: E402, F401
from . import evaluation  # noqa: E402, F401
from . import chat  # noqa: E402, F401
from . import serve  # noqa: E402, F401

__all__ = ["app", "main"]


def main() -> None:  # pragma: no cover
    app()
