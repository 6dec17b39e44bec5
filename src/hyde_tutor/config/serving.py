"""Settings of the served tutor: ``hyde-tutor serve`` (``HYDE_SERVER__*``) and the relevance judge of its turns
(``HYDE_JUDGE__*``). Part of :class:`hyde_tutor.config.Settings`; kept in their own module for size."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, Field, SecretStr, field_validator

__all__ = ("JudgeSettings", "ServerSettings")


class JudgeSettings(BaseModel):
    """The relevance judge of served turns (an LLM rating whether the top results answer the question)."""

    share: float = Field(0.1, ge=0, le=1, description="Share of served turns judged, picked by turn id (0 = off).")
    top_n: int = Field(3, ge=1, le=10, description="How many of the turn's top entries the judge sees.")
    max_calls_per_hour: int = Field(120, ge=0, description="Judge calls per hour, per process (0 = none).")
    max_calls_per_day: int = Field(1000, ge=0, description="Judge calls per day (24 h), per process.")
    max_tokens_per_day: int = Field(1_000_000, ge=0, description="Judge tokens (in + out) per day, per process.")
    max_tokens: int = Field(200, ge=32, le=2048, description="Token cap of one verdict.")
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one judge call (a late verdict is a failure).")


class ServerSettings(BaseModel):
    """``hyde-tutor serve`` (docs/serving.md): the web tutor, its database and its guards."""

    database_url: str | None = Field(None, description="SQLAlchemy URL of the conversations and events database; "
                                     "unset = SQLite data_dir/served.db; postgresql://user:pw@host/db (psycopg 3).")
    host: str = Field("127.0.0.1", description="Address uvicorn listens on.")
    port: int = Field(8000, ge=1, le=65535, description="Port uvicorn listens on.")
    workers: int = Field(1, ge=1, le=64, description="uvicorn workers; with the embedded store each serves its own read-only copy.")
    secret: SecretStr | None = Field(None, description="Signs learner cookies; unset = data_dir/server-secret.")
    operator_token: SecretStr | None = Field(None, description="Bearer token of the operator endpoints (unset: 403).")
    host_secret: SecretStr | None = Field(None, description="Lets a host app name the learner (X-Hyde-Learner).")
    allowed_hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1", "localhost", "[::1]"],
                                     description="Host header values served (DNS-rebinding guard), JSON list.")
    max_message_chars: int = Field(2000, ge=10, le=100_000, description="Longest learner message (422 beyond).")
    max_body_bytes: int = Field(65_536, ge=1024, description="Largest request body (413 beyond).")
    rate_per_minute: int = Field(20, ge=1, description="Messages per learner per minute, per worker (429 beyond).")
    new_learners_per_minute: int = Field(30, ge=1, description="New learners (the chat page opened without a "
                                         "session cookie) per client address per minute, per worker (429 beyond).")
    trusted_proxies: list[str] = Field(default_factory=list, description="Addresses or networks (CIDR) of the "
                                       "reverse proxies in front, JSON list: only a request from one of them has its "
                                       "X-Forwarded-For (client address) and X-Forwarded-Proto (https) believed.")
    max_requests: int = Field(6, ge=1, le=50, description="Model requests per turn.")
    turn_timeout_s: float = Field(300.0, gt=0, description="A turn running longer is stopped.")
    gc_threshold: int = Field(20_000, ge=0, description="Python's young-generation garbage-collection threshold "
                              "while serving, and the objects loaded at startup frozen out of collections (0: "
                              "Python's own settings, 700). At 700 the collector ran about twice a turn and took "
                              "~10 % of a worker's CPU (docs/MEASUREMENTS.md, issue 40).")

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item.strip(), strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies: {item!r} is not an IP address or network "
                                 "(e.g. \"127.0.0.1\", \"10.0.0.0/8\")") from None
        return [item.strip() for item in value]
