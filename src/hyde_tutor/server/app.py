"""The ASGI app of ``hyde-tutor serve`` (Starlette): the chat page, the chat and rating endpoints, the
operator endpoints, health. A thin layer: it identifies the learner, applies the limits, and hands the turn
to :class:`~hyde_tutor.tutor.served.ServedTutor` through pydantic-ai's Vercel AI adapter.

``create_app(parts)`` takes ready parts (tests pass a stub model); :func:`app_from_settings` builds them from
settings the way ``hyde-tutor chat`` does; :func:`app_from_environment` is uvicorn's factory (each worker
builds its own parts; they share the database and the secret).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.conversation_store import ConversationStore
from pydantic_ai.messages import ModelMessage
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from pydantic_ai.ui.vercel_ai.request_types import RegenerateMessage
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..config import Settings
from ..experiment.events import EventLog
from ..experiment.operations import change_experiment, experiment_status, learner_tag
from ..tutor.served import ServedTutor
from .collector import tune_collector
from ..tutor.timings import TimedConversationStore
from . import bodies
from .chat import turn_stream
from .history import LoadedOnce, shown_messages
from .learners import COOKIE, BadIdentity, LearnerIdentity, RateLimiter
from .limits import BodyTooLarge, Proxies, read_body

__all__ = ("ServerParts", "create_app")

_log = logging.getLogger("hyde_tutor.server")
STATIC = Path(__file__).parent / "static"
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
    hyde_cannot_help: str | None = None
    """Why HyDE cannot help on the serving model (the embedded one): a start then needs ``"force": true``."""


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def create_app(parts: ServerParts) -> Starlette:
    """The served tutor as a Starlette app."""
    server = parts.settings.server
    limiter = RateLimiter(server.rate_per_minute)
    minting = RateLimiter(server.new_learners_per_minute)  # new learners per client address
    proxies = Proxies(server.trusted_proxies)
    tutor, log = parts.tutor, parts.tutor.log
    store = TimedConversationStore(parts.store, tutor.stages)  # the stages of GET /api/operator/timings
    in_flight = {"turns": 0}

    def learner_of(request: Request) -> str | None:
        """The learner a request names (a host application's, else its cookie's); None when it names none.
        Raises ``BadIdentity``."""
        hosted = parts.identity.from_host(request.headers.get("x-hyde-learner"),
                                          request.headers.get("x-hyde-host-secret"))
        if hosted:
            return hosted
        value = request.cookies.get(COOKIE)
        return parts.identity.from_cookie(value) if value else None

    def operator_refusal(request: Request) -> Response | None:
        token = server.operator_token.get_secret_value() if server.operator_token else None
        if not token:
            return _error(403, "operator endpoints are off: set HYDE_SERVER__OPERATOR_TOKEN and restart")
        given = request.headers.get("authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(given[7:].encode(), token.encode()):
            return _error(401, "operator token missing or wrong: send Authorization: Bearer <token>",
                          **{"WWW-Authenticate": "Bearer"})
        return None

    def too_many(wait: float, what: str) -> Response:
        return _error(429, f"{what}; wait {math.ceil(wait)} s", **{"Retry-After": str(math.ceil(wait))})

    async def page(request: Request) -> Response:
        try:
            known = learner_of(request) is not None
        except BadIdentity:
            known = False  # the page replaces a bad cookie; the API refuses it
        response = FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS)
        if known:
            return response
        wait = minting.retry_after(proxies.client(request))
        if wait:
            return too_many(wait, f"too many new learners from this address: at most {server.new_learners_per_minute} "
                                  "a minute (HYDE_SERVER__NEW_LEARNERS_PER_MINUTE)")
        _, cookie = parts.identity.new_cookie()
        response.set_cookie(COOKIE, cookie, max_age=365 * 24 * 3600, httponly=True, samesite="strict",
                            secure=proxies.scheme(request) == "https")
        return response

    async def health(request: Request) -> Response:
        checks = (("database", lambda: log.experiment_events("__health__")), ("vector store", _store_check(tutor)))
        for what, check in checks:
            try:
                await asyncio.wait_for(asyncio.to_thread(check), 5)
            except Exception as exc:  # noqa: BLE001 - health says what is wrong, it does not raise
                return _error(503, f"{what} unreachable ({type(exc).__name__})")
        return JSONResponse({"status": "ok", "turns_in_flight": in_flight["turns"],
                             "turns_not_recorded": tutor.record_failures})

    def required_learner(request: Request) -> str | Response:
        """The learner of an API request, or its refusal: the API never makes a learner (the page does)."""
        try:
            learner = learner_of(request)
        except BadIdentity as exc:
            return _error(403, str(exc))
        if learner is None:
            return _error(403, "no learner: open the chat page first (it sets the session cookie)")
        return learner

    async def chat(request: Request) -> Response:
        started = time.perf_counter()
        learner = required_learner(request)
        if isinstance(learner, Response):
            return learner
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _error(415, "send the chat request as Content-Type: application/json")
        try:
            turn_in = bodies.chat_turn(await read_body(request, server.max_body_bytes), server.max_message_chars)
        except BodyTooLarge as exc:
            return _error(413, str(exc))
        except bodies.Malformed as exc:
            return _error(422, str(exc))
        wait = limiter.retry_after(learner)
        if wait:
            return too_many(wait, f"too many messages: at most {server.rate_per_minute} a minute")
        conversation_id = f"{learner_tag(learner)}-{turn_in.chat_id}"
        loading = time.perf_counter()
        tutor.stages.add("request", loading - started)
        loaded = await store.load(conversation_id, scope=learner)
        handover = LoadedOnce(store, conversation_id, learner, loaded)
        adapter = VercelAIAdapter(agent=tutor.agent, run_input=turn_in.run_input, accept=request.headers.get("accept"),
                                  conversation_store=handover, conversation_scope=learner)
        refused = _refused_regenerate(adapter, loaded.messages if loaded else [])
        if refused:  # the adapter would refuse it: refused here, before it is a turn
            return _error(409, refused)
        turn = await tutor.start_turn(learner, conversation_id, turn_in.question, loaded.messages if loaded else (),
                                      loaded.usage if loaded else None)
        handover.turn_id = turn.turn_id  # the stored reply names its turn: a reloaded page can still rate it
        tutor.stages.add("load", time.perf_counter() - loading)

        async def counted() -> AsyncIterator[Any]:
            in_flight["turns"] += 1
            try:
                async for chunk in turn_stream(adapter, turn, operator=operator_refusal(request) is None,
                                               max_requests=server.max_requests, timeout_s=server.turn_timeout_s):
                    yield chunk
            finally:
                in_flight["turns"] -= 1
                tutor.stages.add("turn", time.perf_counter() - started)

        response = adapter.streaming_response(counted())
        if server.workers > 1:  # a kept-alive connection stays with one worker: the next turn goes to a free one
            response.headers["connection"] = "close"
        return response

    async def messages(request: Request) -> Response:
        """The learner's own stored conversation (a reloaded page shows it): by the cookie, never another's."""
        try:
            learner = learner_of(request)
        except BadIdentity as exc:
            return _error(403, str(exc))
        chat_id = request.path_params["chat_id"]
        if learner is None or not bodies.CHAT_ID.fullmatch(chat_id):  # no learner yet: no conversation
            return JSONResponse({"messages": []})
        shown = await shown_messages(store, f"{learner_tag(learner)}-{chat_id}", learner)
        if any("turn_id" in m for m in shown):
            try:
                await asyncio.to_thread(_with_ratings, log, learner, shown)
            except Exception as exc:  # noqa: BLE001 - the conversation is still shown, without the earlier ratings
                _log.warning("could not read a learner's ratings for a reloaded page: %s", type(exc).__name__)
        return JSONResponse({"messages": shown})

    async def rating(request: Request) -> Response:
        from ..experiment.events import RatingEvent

        learner = required_learner(request)
        if isinstance(learner, Response):
            return learner
        try:
            turn_id, value, reason = bodies.rating(await read_body(request, server.max_body_bytes))
        except BodyTooLarge as exc:
            return _error(413, str(exc))
        except bodies.Malformed as exc:
            return _error(422, str(exc))
        stored = await asyncio.to_thread(log.add_rating, RatingEvent(turn_id=turn_id, subject=learner, rating=value,
                                                                     reason=reason))
        if not stored:
            return _error(404, "no such turn of yours")
        return JSONResponse({"stored": True})

    async def status(request: Request) -> Response:
        return operator_refusal(request) or JSONResponse(
            await asyncio.to_thread(experiment_status, log, tutor.default_experiment))

    async def experiment(request: Request) -> Response:
        if (refused := operator_refusal(request)) is not None:
            return refused
        try:
            action, share, name, force = bodies.experiment_change(await read_body(request, server.max_body_bytes))
            event = await asyncio.to_thread(change_experiment, log, action, tutor.default_experiment, share=share,
                                            name=name, actor="http", force=force,
                                            cannot_help=parts.hyde_cannot_help)
        except BodyTooLarge as exc:
            return _error(413, str(exc))
        except (ValueError, TypeError) as exc:  # bodies.Malformed, and change_experiment's own refusals
            return _error(422, str(exc) if isinstance(exc, bodies.Malformed) else f"{exc}; {bodies.EXPERIMENT_SHAPE}")
        _log.warning("experiment %s: %s share %.2f (http)", event.change, event.experiment, event.hyde_share)
        return JSONResponse(asdict(event))

    async def timings(request: Request) -> Response:
        """Where the served turns' time went, stage by stage (``?clear=1`` starts afresh, after a warm-up)."""
        if (refused := operator_refusal(request)) is not None:
            return refused
        summary = tutor.stages.summary()
        if request.query_params.get("clear") == "1":
            tutor.stages.clear()
        return JSONResponse({"stages": summary, "turns_in_flight": in_flight["turns"]})

    async def report(request: Request) -> Response:
        if (refused := operator_refusal(request)) is not None:
            return refused
        name = request.query_params.get("experiment")
        if parts.report is None:
            return JSONResponse(await asyncio.to_thread(experiment_status, log, tutor.default_experiment))
        return JSONResponse(await asyncio.to_thread(parts.report, log, name))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await tutor.warm_up()
        restore = tune_collector(server.gc_threshold)
        try:
            yield
            await tutor.drain()  # uvicorn has let the turns in flight finish; then the judgements
            for close in parts.closers:
                close()
        finally:
            restore()

    hosts = list(dict.fromkeys([*server.allowed_hosts, server.host]))
    routes = [
        Route("/", page), Route("/healthz", health), Route("/api/chat", chat, methods=["POST"]),
        Route("/api/chat/{chat_id}/messages", messages), Route("/api/rating", rating, methods=["POST"]),
        Route("/api/operator/status", status), Route("/api/operator/experiment", experiment, methods=["POST"]),
        Route("/api/operator/report", report), Route("/api/operator/timings", timings),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])


def _with_ratings(log: EventLog, learner: str, shown: list[dict[str, Any]]) -> None:
    """Add to each served reply the learner's own last rating of its turn (``rating``: 1 or -1, and ``reason``; one
    read for the whole conversation), so a reloaded page shows what was already rated."""
    rated = log.rated(learner, [m["turn_id"] for m in shown if "turn_id" in m])
    for message in shown:
        if message.get("turn_id") in rated:
            message["rating"], message["reason"] = rated[message["turn_id"]]


def _store_check(tutor: ServedTutor) -> Callable[[], Any]:
    """A call that reaches the tutor's vector store (lists its collections), as the health check reaches the
    database: a Qdrant server that does not answer makes the server unhealthy, not only its first search."""
    store = getattr(getattr(tutor.retriever, "retriever", None), "store", None)
    return store.list_collections if store is not None else (lambda: None)


def _refused_regenerate(adapter: VercelAIAdapter[Any, Any], stored: list[ModelMessage]) -> str | None:
    """Why pydantic-ai's adapter would refuse this request (a regenerate of a user message the stored conversation
    does not hold: a stale tab, or a client making up ids), or None. Its run would end in an error, recorded as a
    failed turn of the learner's arm."""
    request = adapter.run_input
    if not isinstance(request, RegenerateMessage):
        return None
    answered = max((i for i, m in enumerate(request.messages) if m.role == "assistant"), default=-1)
    new = request.messages[answered + 1:answered + 2]
    held = {m.id for m in VercelAIAdapter.dump_messages(stored) if m.role == "user"}
    if new and new[0].id in held:
        return None
    return ("the message to regenerate is not in the stored conversation (a stale tab?): reload the page, or send "
            "it again as a new message")
