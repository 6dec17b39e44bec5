"""The served drill's client connection: HTTP/1.1 over one keep-alive socket per learner, written by hand.

The drill's client runs on the server's cores (a 2-core machine has no others), so what it spends is taken from
the server's figures: httpx cost ~10 ms of CPU a turn, about a fifth of the server's own. This client reads the
same bytes (status line, headers, a ``Content-Length`` or chunked body, cookies the server sets) for a fraction
of that. It knows only what the drill needs: no TLS, no redirects, no proxies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

__all__ = ("Connection",)


class Connection:
    """One learner's connection to ``url`` (``http://host:port``); its cookies go with every request. It sets no
    timeout of its own: the caller bounds each request (``asyncio.timeout``), one timer a turn, not one a read."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.cookies: dict[str, str] = {}
        self.status = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket (mid-stream too: how a learner who leaves is seen by the server)."""
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def get(self, path: str) -> bytes:
        """GET ``path``; the whole body."""
        return b"".join([chunk async for chunk in self._request("GET", path, None)])

    async def stream_lines(self, path: str, body: Any) -> AsyncIterator[str]:
        """POST ``body`` as JSON to ``path``; the response body's lines as they arrive (``self.status`` is set
        before the first)."""
        pending = b""
        async for chunk in self._request("POST", path, json.dumps(body, ensure_ascii=False).encode()):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode()
        if pending:
            yield pending.decode()

    async def _request(self, method: str, path: str, body: bytes | None) -> AsyncIterator[bytes]:
        if self._writer is None or self._writer.is_closing() or (self._reader is not None and self._reader.at_eof()):
            # none yet, closed here, or closed by the server (an idle keep-alive connection): a new one
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._reader, self._writer
        assert reader is not None
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Accept: */*"]
        if self.cookies:
            head.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
        status_line = await self._line(reader)
        self.status = int(status_line.split(b" ", 2)[1])
        headers: dict[str, str] = {}
        while line := (await self._line(reader)).rstrip(b"\r\n"):
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip()
            if name == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
            headers[name] = value
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while size := int((await self._line(reader)).split(b";", 1)[0], 16):
                yield (await reader.readexactly(size + 2))[:-2]
            while (await self._line(reader)).strip():  # trailers, then the blank line
                pass
        elif "content-length" in headers:
            yield await reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            self.close()

    async def _line(self, reader: asyncio.StreamReader) -> bytes:
        line = await reader.readline()
        if not line:
            raise ConnectionError(f"the server at {self.host}:{self.port} closed the connection")
        return line
