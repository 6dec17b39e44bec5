"""What a request may cost the server, and who sent it.

* :func:`read_body`: a request body read as it streams, with a running byte cap: a body over the cap is refused
  as soon as the cap is passed (a declared ``Content-Length`` over it before any byte is read), so a chunked
  upload with no length never grows the server beyond the cap.
* :class:`Proxies`: the client's address and the request's scheme. ``X-Forwarded-For`` and ``X-Forwarded-Proto``
  are believed only from a peer in ``HYDE_SERVER__TRUSTED_PROXIES``; from anyone else they are ignored (a client
  could write them to pass as another address or as https).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from starlette.requests import Request

__all__ = ("BodyTooLarge", "Proxies", "read_body")


class BodyTooLarge(Exception):
    """The request body is over the cap (413)."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"request body over {cap} bytes (HYDE_SERVER__MAX_BODY_BYTES)")
        self.cap = cap


async def read_body(request: Request, cap: int) -> bytes:
    """The request's body, at most ``cap`` bytes; ``BodyTooLarge`` as soon as it is known to be longer (the rest
    is never read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge(cap)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise BodyTooLarge(cap)
    return bytes(body)


class Proxies:
    """The reverse proxies whose forwarding headers are believed (addresses or CIDR networks)."""

    def __init__(self, trusted: Sequence[str] = ()) -> None:
        self.networks = [ipaddress.ip_network(item, strict=False) for item in trusted]

    def trusts(self, address: str) -> bool:
        """Whether ``address`` is one of the trusted proxies (False for anything that is not an IP address)."""
        if not self.networks:
            return False
        try:
            ip = ipaddress.ip_address(address.strip())
        except ValueError:
            return False
        return any(ip in network for network in self.networks)

    @staticmethod
    def _peer(request: Request) -> str:
        return request.client.host if request.client else ""

    def client(self, request: Request) -> str:
        """The client's address: the peer's; from a trusted proxy, the nearest address in ``X-Forwarded-For``
        that is not itself a trusted proxy (read from the right: the left part is whatever the client wrote)."""
        peer = self._peer(request)
        if not self.trusts(peer):
            return peer or "unknown"
        hops = [hop.strip() for value in request.headers.getlist("x-forwarded-for") for hop in value.split(",")]
        hops = [hop for hop in hops if hop]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop
        return hops[0] if hops else peer

    def scheme(self, request: Request) -> str:
        """``https`` or ``http`` as the learner's browser reached the server: the connection's scheme, or, from a
        trusted proxy, its ``X-Forwarded-Proto`` (the value the proxy itself wrote: the last one)."""
        forwarded = request.headers.get("x-forwarded-proto")
        if forwarded and self.trusts(self._peer(request)):
            return forwarded.split(",")[-1].strip().lower()
        return request.url.scheme
