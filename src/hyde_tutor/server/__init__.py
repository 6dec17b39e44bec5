"""``hyde-tutor serve``: the tutor on the web (Starlette + uvicorn), a thin layer over :mod:`hyde_tutor.tutor.served`.

See docs/serving.md."""

from __future__ import annotations

from .app import ServerParts, create_app
from .build import app_from_environment, app_from_settings

__all__ = ["ServerParts", "app_from_environment", "app_from_settings", "create_app"]
