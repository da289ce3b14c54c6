"""uvicorn's h11 protocol with a deadline for every request head (slowloris).

uvicorn times out an idle keep-alive connection, but not one that opened and said nothing, nor
one that sends its request line and headers a byte at a time: each such connection holds a slot
of ``http.max_connections`` for as long as the client likes, and a thousand of them lock
everyone else out. Here a connection must deliver each request head (request line and headers)
within ``http.header_timeout`` of its first byte, or of the connection being made, or it is
closed. Bodies are bounded elsewhere (``BodyLimit``), and a response being written is not timed.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("graywire.http")


class HeadDeadlineH11(H11Protocol):
    head_timeout_s: float = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

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


def head_deadline_protocol(timeout_s: float) -> type[HeadDeadlineH11]:
    """The protocol class uvicorn is given (``http=``), with the configured deadline."""
    return type("HeadDeadlineH11", (HeadDeadlineH11,), {"head_timeout_s": timeout_s})
