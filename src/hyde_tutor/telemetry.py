"""Logfire, imported once for every layer. A library must not nag its users: spans and metrics are
no-ops until *they* call ``logfire.configure()`` (see ``monitor.configure_logfire``)."""

from __future__ import annotations

import os

os.environ.setdefault("LOGFIRE_IGNORE_NO_CONFIG", "1")

import logfire  # noqa: E402

__all__ = ["logfire"]
