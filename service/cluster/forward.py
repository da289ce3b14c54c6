"""Requests only the leader can answer, passed on to it by any other replica.

Every replica answers what the shared database holds (incidents, the drain list, nodes, the
audit log, silences). Two kinds of request need the leader: every change (POST, PUT, PATCH,
DELETE: an acknowledgement, a silence, an exclusion, an undrain, a push of NCCL timings), which
only the holder of the fencing token may write; and the reads of what only its detectors know
(ports, links, the fabric grid, the sources, the jobs' timings). A follower relays those to the
leader's advertised URL, token and body as they came, and relays the answer back, so a client
or a load balancer in front of the replicas need not know which one leads.

A request already relayed once is never relayed again (leadership moving mid-request): it gets
a 503 with ``Retry-After``, as does a request while no leader is known or reachable.
"""

from __future__ import annotations

import json
import logging
import ssl
from typing import TYPE_CHECKING

import httpx
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from graywire.service.cluster.node import ClusterNode

log = logging.getLogger("graywire.cluster")

#: Reads answered from the leader's detector state, not from the database.
LEADER_READS = ("/api/v1/ports", "/api/v1/links", "/api/v1/fabric/", "/api/v1/sources", "/api/v1/jobs")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FORWARDED_HEADER = "x-graywire-forwarded-by"
#: Not passed on: they describe one hop, not the request.
_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
     "transfer-encoding", "upgrade", "host", "content-length", "content-encoding"}
)  # fmt: skip
TIMEOUT_S = 30.0


def needs_leader(method: str, path: str) -> bool:
    if not path.startswith("/api/"):
        return False
    if method not in READ_METHODS:
        return True
    return any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in LEADER_READS)


class ForwardToLeader:
    """ASGI middleware: relay what only the leader answers, when this replica does not lead."""

    def __init__(self, app: ASGIApp, relay: LeaderRelay) -> None:
        self.app = app
        self.relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or self.relay.node.is_leader
            or not needs_leader(scope["method"], scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        await self.relay(scope, receive, send)


class LeaderRelay:
    """Relays one request to the leader and its answer back; one HTTP client for all."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self._client: httpx.AsyncClient | None = None
        #: Requests relayed, and relays that failed (no leader, leader unreachable).
        self.forwarded = 0
        self.failed = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        view = self.node.view
        if FORWARDED_HEADER in headers:
            await self._unavailable(
                send,
                f"relayed here by {headers[FORWARDED_HEADER]}, but {self.node.member_id} does not lead "
                "either: the lead is moving; retry shortly",
            )
            return
        if not view.lease_live or not view.leader_url or view.leader == self.node.member_id:
            await self._unavailable(
                send, "no replica leads right now (a takeover is under way); retry shortly"
            )
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        query = scope.get("query_string", b"").decode("latin-1")
        url = view.leader_url + scope["path"] + (f"?{query}" if query else "")
        out = [(k, v) for k, v in headers.items() if k.lower() not in _HOP]
        out.append((FORWARDED_HEADER, self.node.member_id))
        try:
            answer = await self.client.request(
                scope["method"], url, content=body, headers=out, timeout=TIMEOUT_S
            )
        except httpx.HTTPError as e:
            self.failed += 1
            log.warning(
                "forwarding %s %s to the leader %s failed: %s", scope["method"], scope["path"], view.leader, e
            )
            await self._unavailable(
                send, f"the leader {view.leader} ({view.leader_url}) is unreachable; retry shortly"
            )
            return
        self.forwarded += 1
        reply = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in answer.headers.items()
            if k.lower() not in _HOP
        ]
        reply.append((b"content-length", str(len(answer.content)).encode()))
        await send({"type": "http.response.start", "status": answer.status_code, "headers": reply})
        await send({"type": "http.response.body", "body": answer.content})

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            tls = self.node.settings.tls
            verify: ssl.SSLContext | bool = True
            if tls.enabled:  # the leader's certificate, by the configured CA or the system's
                verify = ssl.create_default_context(cafile=str(tls.ca) if tls.ca is not None else None)
                if tls.client_ca is not None:  # mutual TLS: this replica shows its own certificate
                    verify.load_cert_chain(str(tls.certfile), str(tls.keyfile))
            self._client = httpx.AsyncClient(follow_redirects=False, verify=verify)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _unavailable(self, send: Send, detail: str) -> None:
        self.failed += 1
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"2"),
                   (b"content-length", str(len(body)).encode())]  # fmt: skip
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
