"""uvicorn's HTTP/1.1 connection with a deadline for what a client sends.

uvicorn closes a keep-alive connection that stays idle after a response, but not one that never sends a
request, nor one that sends half a request line, half its headers or half its body and then waits: each holds a
socket and a buffer for as long as the client likes. Here a client has ``REQUEST_SECONDS`` from the
connection's start (and from each response) to send a whole request; a request that has arrived whole is
bounded by the server's own timeout instead.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_SECONDS = 10.0


class BoundedH11Protocol(H11Protocol):
    request_deadline: asyncio.TimerHandle | None = None  # armed from the connection's start

    def connection_made(self, transport) -> None:  # uvicorn narrows asyncio's BaseTransport to Transport
        super().connection_made(transport)
        self.arm_request_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.arm_request_deadline()

    def arm_request_deadline(self) -> None:
        if self.request_deadline is not None:
            self.request_deadline.cancel()
        self.request_deadline = self.loop.call_later(REQUEST_SECONDS, self.close_if_still_sending)

    def close_if_still_sending(self) -> None:
        """Close a connection whose client is still sending (or has sent nothing) since the deadline was set."""
        self.request_deadline = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.request_deadline is not None:
            self.request_deadline.cancel()
        super().connection_lost(exc)
