"""Who is asking: a learner is a signed session cookie, or an id a trusted host application passes in.

The cookie holds a random learner id and an HMAC-SHA256 of it under the server secret; a cookie whose
signature does not match is refused (it is never read as someone's id). The learner id is the A/B subject
id: :meth:`~hyde_tutor.experiment.assignment.Experiment.arm` is a pure hash of it, so a learner stays in one arm
across requests, workers and machines that share the secret.

The secret is ``HYDE_SERVER__SECRET``; unset, it is generated once into ``HYDE_DATA_DIR/server-secret`` (mode
0600, created atomically: every worker on the machine reads the same file; several machines must set it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from collections import deque
from pathlib import Path

__all__ = ("COOKIE", "LearnerIdentity", "RateLimiter", "server_secret")

COOKIE = "hyde_learner"
_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")


def server_secret(configured: str | None, data_dir: Path) -> bytes:
    """The cookie-signing key: the configured one, else the one in ``data_dir/server-secret`` (made once)."""
    if configured:
        return configured.encode()
    path = data_dir / "server-secret"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".server-secret.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # owner-only from its first byte
        try:
            os.write(fd, secrets.token_hex(32).encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic: the first worker's secret wins, the others read it
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_text().strip().encode()


class BadIdentity(Exception):
    """A cookie or host credential that does not verify (the request is refused, 403)."""


class LearnerIdentity:
    """Signs and verifies learner cookies; accepts a host application's learner id with its secret."""

    def __init__(self, secret: bytes, host_secret: str | None = None) -> None:
        self._key = secret
        self._host_secret = host_secret

    def _sign(self, learner: str) -> str:
        mac = hmac.new(self._key, learner.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def new_cookie(self) -> tuple[str, str]:
        """A new learner: ``(learner id, cookie value)``."""
        learner = "c-" + secrets.token_hex(12)
        return learner, f"{learner}.{self._sign(learner)}"

    def from_cookie(self, value: str) -> str:
        """The learner a cookie names; ``BadIdentity`` when its signature does not match."""
        learner, _, sig = value.rpartition(".")
        if not learner or not _ID.fullmatch(learner) or not hmac.compare_digest(sig, self._sign(learner)):
            raise BadIdentity("the session cookie is not valid (tampered or signed with another key); reload the page")
        return learner

    def from_host(self, learner: str | None, presented: str | None) -> str | None:
        """The learner a host application names (``X-Hyde-Learner``), if it presents the host secret."""
        if learner is None:
            return None
        if not self._host_secret:
            raise BadIdentity("X-Hyde-Learner is refused: no host secret is configured (HYDE_SERVER__HOST_SECRET)")
        if presented is None or not hmac.compare_digest(presented.encode(), self._host_secret.encode()):
            raise BadIdentity("X-Hyde-Learner is refused: X-Hyde-Host-Secret does not match")
        if not _ID.fullmatch(learner):
            raise BadIdentity("X-Hyde-Learner must be 1-128 characters of letters, digits and _.:@-")
        return "h-" + learner


class RateLimiter:
    """At most ``per_minute`` events per key in any 60 s, in this worker's memory (the server keys its messages
    by learner, and the learners it makes by client address)."""

    def __init__(self, per_minute: int, window_s: float = 60.0) -> None:
        self.per_minute = per_minute
        self.window_s = window_s
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, learner: str) -> float:
        """0 and the event counted when allowed; else seconds until the key (a learner) may go again."""
        now = time.monotonic()
        with self._lock:
            if len(self._seen) > 100_000:  # forget idle learners
                self._seen = {k: v for k, v in self._seen.items() if v and now - v[-1] < self.window_s}
            seen = self._seen.setdefault(learner, deque())
            while seen and now - seen[0] >= self.window_s:
                seen.popleft()
            if len(seen) >= self.per_minute:
                return self.window_s - (now - seen[0])
            seen.append(now)
            return 0.0
