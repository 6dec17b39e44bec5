"""Logfire, imported once for every layer. A library must not nag its users: spans and metrics are
no-ops until *they* call ``logfire.configure()`` (see ``monitor.configure_logfire``)."""

from __future__ import annotations

import os

os.environ.setdefault("LOGFIRE_IGNORE_NO_CONFIG", "1")
# Inspecting a span's arguments parses the caller's source file with `executing` the first time a span
# runs there: a 100-200 ms stall of the event loop in the middle of a chat turn (measured with
# `hyde-tutor bench --load`). Set LOGFIRE_INSPECT_ARGUMENTS=true (or configure logfire) to have it back.
os.environ.setdefault("LOGFIRE_INSPECT_ARGUMENTS", "false")

import logfire  # noqa: E402

__all__ = ["logfire"]
