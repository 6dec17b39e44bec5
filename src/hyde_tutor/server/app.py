"""The ASGI app of ``hyde-tutor serve`` (Starlette): the chat page, the chat and rating endpoints, the
operator endpoints, health. A thin layer: it identifies the learner, applies the limits, and hands the turn
to :class:`~hyde_tutor.plugin.served.ServedTutor` through pydantic-ai's Vercel AI adapter.

``create_app(parts)`` takes ready parts (tests pass a stub model); :func:`app_from_settings` builds them from
settings the way ``hyde-tutor chat`` does; :func:`app_from_environment` is uvicorn's factory (each worker
builds its own parts; they share the database and the secret).
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.conversation_store import ConversationStore
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..config import Settings
from ..plugin.operations import change_experiment, experiment_status, learner_tag
from ..plugin.served import ServedTutor
from .chat import turn_stream
from .history import shown_messages
from .learners import COOKIE, BadIdentity, LearnerIdentity, RateLimiter

__all__ = ("ServerParts", "create_app")

_log = logging.getLogger("hyde_tutor.server")
STATIC = Path(__file__).parent / "static"
_CHAT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
}


@dataclass
class ServerParts:
    """What the app serves with."""

    tutor: ServedTutor
    store: ConversationStore
    settings: Settings
    identity: LearnerIdentity
    report: Callable[[Any, str | None], dict[str, Any]] | None = None
    """``(event log, experiment) -> dict``: the A/B report the operator endpoint returns."""
    closers: list[Callable[[], Any]] = field(default_factory=list)


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def create_app(parts: ServerParts) -> Starlette:
    """The served tutor as a Starlette app."""
    server = parts.settings.server
    limiter = RateLimiter(server.rate_per_minute)
    tutor, log = parts.tutor, parts.tutor.log
    in_flight = {"turns": 0}

    def learner_of(request: Request) -> tuple[str, str | None]:
        """``(learner, new cookie value or None)``; raises ``BadIdentity``."""
        hosted = parts.identity.from_host(request.headers.get("x-hyde-learner"),
                                          request.headers.get("x-hyde-host-secret"))
        if hosted:
            return hosted, None
        value = request.cookies.get(COOKIE)
        if value:
            return parts.identity.from_cookie(value), None
        return parts.identity.new_cookie()

    def with_cookie(response: Response, cookie: str | None) -> Response:
        if cookie:
            response.set_cookie(COOKIE, cookie, max_age=365 * 24 * 3600, httponly=True, samesite="strict",
                                secure=server.host not in ("127.0.0.1", "localhost", "::1"))
        return response

    def operator_refusal(request: Request) -> Response | None:
        token = server.operator_token.get_secret_value() if server.operator_token else None
        if not token:
            return _error(403, "operator endpoints are off: set HYDE_SERVER__OPERATOR_TOKEN and restart")
        given = request.headers.get("authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(given[7:].encode(), token.encode()):
            return _error(401, "operator token missing or wrong: send Authorization: Bearer <token>",
                          **{"WWW-Authenticate": "Bearer"})
        return None

    async def page(request: Request) -> Response:
        try:
            _, cookie = learner_of(request)
        except BadIdentity:
            _, cookie = parts.identity.new_cookie()  # the page replaces a bad cookie; the API refuses it
        return with_cookie(FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS), cookie)

    async def health(request: Request) -> Response:
        import asyncio

        try:
            await asyncio.wait_for(asyncio.to_thread(log.experiment_events, "__health__"), 5)
        except Exception as exc:  # noqa: BLE001 - health says what is wrong, it does not raise
            return _error(503, f"database unreachable ({type(exc).__name__})")
        return JSONResponse({"status": "ok", "turns_in_flight": in_flight["turns"]})

    async def chat(request: Request) -> Response:
        try:
            learner, cookie = learner_of(request)
        except BadIdentity as exc:
            return _error(403, str(exc))
        if int(request.headers.get("content-length") or 0) > server.max_body_bytes:
            return _error(413, f"request body over {server.max_body_bytes} bytes")
        body = await request.body()
        if len(body) > server.max_body_bytes:
            return _error(413, f"request body over {server.max_body_bytes} bytes")
        question, chat_id, problem = _read_turn(body, server.max_message_chars)
        if problem:
            return _error(422, problem)
        wait = limiter.retry_after(learner)
        if wait:
            return _error(429, f"too many messages: at most {server.rate_per_minute} a minute; wait {math.ceil(wait)} s",
                          **{"Retry-After": str(math.ceil(wait))})
        conversation_id = f"{learner_tag(learner)}-{chat_id}"
        adapter = await VercelAIAdapter.from_request(request, agent=tutor.agent, conversation_store=parts.store,
                                                     conversation_scope=learner)
        loaded = await parts.store.load(conversation_id, scope=learner)
        turn = await tutor.start_turn(learner, conversation_id, question, loaded.messages if loaded else ())

        async def counted() -> AsyncIterator[Any]:
            in_flight["turns"] += 1
            try:
                async for chunk in turn_stream(adapter, turn, operator=operator_refusal(request) is None,
                                               max_requests=server.max_requests, timeout_s=server.turn_timeout_s):
                    yield chunk
            finally:
                in_flight["turns"] -= 1

        return with_cookie(adapter.streaming_response(counted()), cookie)

    async def messages(request: Request) -> Response:
        """The learner's own stored conversation (a reloaded page shows it): by the cookie, never another's."""
        try:
            learner, cookie = learner_of(request)
        except BadIdentity as exc:
            return _error(403, str(exc))
        chat_id = request.path_params["chat_id"]
        if cookie is not None or not _CHAT_ID.fullmatch(chat_id):  # a new learner has no conversation yet
            return with_cookie(JSONResponse({"messages": []}), cookie)
        shown = await shown_messages(parts.store, f"{learner_tag(learner)}-{chat_id}", learner)
        return JSONResponse({"messages": shown})

    async def rating(request: Request) -> Response:
        from ..plugin.events import RatingEvent

        try:
            learner, _ = learner_of(request)
        except BadIdentity as exc:
            return _error(403, str(exc))
        if request.cookies.get(COOKIE) is None and request.headers.get("x-hyde-learner") is None:
            return _error(403, "no learner: open the chat page first")
        try:
            data = json.loads(await request.body())
            value, reason = int(data["rating"]), (data.get("reason") or None)
            turn_id = str(data["turn_id"])
        except (ValueError, KeyError, TypeError):
            return _error(422, 'send JSON {"turn_id": "...", "rating": 1 or -1, "reason": "optional, one line"}')
        if value not in (1, -1) or (reason is not None and (not isinstance(reason, str) or len(reason) > 300)):
            return _error(422, "rating is 1 or -1; reason is one line of at most 300 characters")
        reason = " ".join(reason.split()) if reason else None
        import asyncio

        stored = await asyncio.to_thread(log.add_rating, RatingEvent(turn_id=turn_id, subject=learner, rating=value,
                                                                     reason=reason))
        if not stored:
            return _error(404, "no such turn of yours")
        return JSONResponse({"stored": True})

    async def status(request: Request) -> Response:
        import asyncio

        return operator_refusal(request) or JSONResponse(
            await asyncio.to_thread(experiment_status, log, tutor.default_experiment))

    async def experiment(request: Request) -> Response:
        import asyncio

        if (refused := operator_refusal(request)) is not None:
            return refused
        try:
            data = json.loads(await request.body() or b"{}")
            share = data.get("share")
            event = await asyncio.to_thread(change_experiment, log, data.get("action"), tutor.default_experiment,
                                            share=None if share is None else float(share), name=data.get("name"),
                                            actor="http")
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(422, f"{exc}; send JSON {{\"action\": \"start\"|\"stop\"|\"share\", \"share\": 0.5, \"name\": \"...\"}}")
        _log.warning("experiment %s: %s share %.2f (http)", event.change, event.experiment, event.hyde_share)
        return JSONResponse(asdict(event))

    async def report(request: Request) -> Response:
        import asyncio

        if (refused := operator_refusal(request)) is not None:
            return refused
        name = request.query_params.get("experiment")
        if parts.report is None:
            return JSONResponse(await asyncio.to_thread(experiment_status, log, tutor.default_experiment))
        return JSONResponse(await asyncio.to_thread(parts.report, log, name))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await tutor.warm_up()
        yield
        await tutor.drain()  # uvicorn has let the turns in flight finish; then the judgements
        for close in parts.closers:
            close()

    hosts = list(dict.fromkeys([*server.allowed_hosts, server.host]))
    routes = [
        Route("/", page), Route("/healthz", health), Route("/api/chat", chat, methods=["POST"]),
        Route("/api/chat/{chat_id}/messages", messages), Route("/api/rating", rating, methods=["POST"]),
        Route("/api/operator/status", status), Route("/api/operator/experiment", experiment, methods=["POST"]),
        Route("/api/operator/report", report),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])


def _read_turn(body: bytes, max_chars: int) -> tuple[str, str, str | None]:
    """``(question, chat id, problem)`` of a Vercel AI chat request (``problem`` None when usable)."""
    try:
        data = json.loads(body)
        message = data["messages"][-1]
        text = "".join(p.get("text", "") for p in message["parts"] if isinstance(p, dict) and p.get("type") == "text")
        chat_id = str(data.get("id") or "")
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return "", "", "send a Vercel AI chat request: {\"id\": ..., \"messages\": [{\"role\": \"user\", \"parts\": [...]}]}"
    if message.get("role") != "user":
        return "", "", "the last message must be the learner's (role user)"
    if not text.strip():
        return "", "", "the message is empty"
    if len(text) > max_chars:
        return "", "", f"the message is {len(text)} characters; at most {max_chars} (HYDE_SERVER__MAX_MESSAGE_CHARS)"
    if not _CHAT_ID.fullmatch(chat_id):
        return "", "", "the chat id must be 1-64 letters, digits, _ or -"
    return text.strip(), chat_id, None
