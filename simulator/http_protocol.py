"""uvicorn's httptools protocol with a bound on the size of a request's head.

httptools buffers a header value in full before handing it over, and uvicorn sets no limit
on it (h11 has one, at some cost in speed), so a client could make the gateway hold
megabytes of header. This protocol counts the bytes received while a request's head is
being read and answers ``431 Request Header Fields Too Large`` (and closes) past
``MAX_HEAD_BYTES``.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024
"""Request line plus headers; browsers and proxies stay well under 16 KiB."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses a request head over ``MAX_HEAD_BYTES``.

    Two checks: while a head is still arriving, the bytes received so far (so a header that
    never ends is cut early); once it is complete, its exact size (url and headers).
    """

    _reading_head = True
    _head_bytes = 0
    _refused = False

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._reading_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._reading_head and self._head_bytes > MAX_HEAD_BYTES:
            self._refuse_head()

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._head_bytes = 0
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > MAX_HEAD_BYTES:
            self._refuse_head()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        super().on_message_complete()
        self._reading_head = True  # the next request on this connection starts its head

    def _refuse_head(self) -> None:
        self._refused = True
        self._reading_head = False
        if self.transport.is_closing():
            return
        message = f"the request's headers are over {MAX_HEAD_BYTES // 1024} KiB"
        self.logger.warning("Refused a request: %s.", message)
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: text/plain; charset=utf-8\r\n"
            b"content-length: " + str(len(message)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + message.encode()
        )
        self.transport.close()
