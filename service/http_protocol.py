"""uvicorn's h11 protocol with a deadline for every request head, and a cap per client (slowloris).

uvicorn times out an idle keep-alive connection, but not one that opened and said nothing, nor
one that sends its request line and headers a byte at a time: each such connection holds a slot
of ``http.max_connections`` for as long as the client likes, and a thousand of them lock
everyone else out. Here a connection must deliver each request head (request line and headers)
within ``http.header_timeout`` of its first byte, or of the connection being made, or it is
closed. Bodies are bounded elsewhere (``BodyLimit``), and a response being written is not timed.

A client that reconnects as fast as it is cut off still holds every slot it can open within the
deadline: so each peer address may hold at most ``http.max_connections_per_client`` at once. One
more gets a 503 that says why, and is closed at once; other clients keep their slots.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("graywire.http")


class HeadDeadlineH11(H11Protocol):
    head_timeout_s: float = 10.0
    #: Connections one peer address may hold at once; 0: no cap.
    per_client: int = 0
    #: Open connections per peer address, shared by every connection of one server.
    open_by_peer: ClassVar[Counter[str]] = Counter()
    _head_timer: asyncio.TimerHandle | None = None
    _peer: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = self.client[0] if self.client else None
        if self.per_client and peer is not None:
            if self.open_by_peer[peer] >= self.per_client:
                self._refuse(peer)
                return
            self.open_by_peer[peer] += 1
            self._peer = peer
        self._arm()

    def _refuse(self, peer: str) -> None:
        detail = (
            f"{peer} holds {self.per_client} connections already (http.max_connections_per_client): "
            "reuse them, or retry once one is closed"
        )
        body = json.dumps({"detail": detail}).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nretry-after: 1\r\n\r\n"
        )
        log.debug("%s: over %d connections: refused", peer, self.per_client)
        self.transport.write(head.encode() + body)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
        elif self.conn.their_state is h11.IDLE:
            # Part of a head has come (the first request's, or the next on a kept-alive
            # connection, whose idle timer uvicorn has just stopped): it has until the deadline.
            if self._head_timer is None:
                self._arm()
        else:
            self._disarm()  # the head is in; the body and the answer are not timed here

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._peer is not None:
            left = self.open_by_peer[self._peer] - 1
            if left > 0:
                self.open_by_peer[self._peer] = left
            else:
                del self.open_by_peer[self._peer]
            self._peer = None
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # an answer is still being written (pipelining): not this timer's business
        log.debug("%s: no complete request head within %g s: closed", self.client, self.head_timeout_s)
        self.transport.close()


def head_deadline_protocol(timeout_s: float, per_client: int = 0) -> type[HeadDeadlineH11]:
    """The protocol class uvicorn is given (``http=``), with the configured deadline and cap per
    client, and a count of open connections of its own."""
    return type(
        "HeadDeadlineH11",
        (HeadDeadlineH11,),
        {"head_timeout_s": timeout_s, "per_client": per_client, "open_by_peer": Counter()},
    )
