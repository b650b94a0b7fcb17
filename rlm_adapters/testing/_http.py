"""The HTTP/1.1 plumbing of the fake model servers: a real server on 127.0.0.1 in a background thread.

`ThreadedHTTPServer` binds its port, serves keep-alive connections on an event loop of its own and stops;
each request (``Content-Length`` bodies only, header names lowercased) goes to `respond`, which a subclass
implements. `head` and `write_response` write a JSON reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any, Self

# status, JSON payload (or None), raw body (or None), extra headers
Response = tuple[int, Any, bytes | None, dict[str, str]]


class ThreadedHTTPServer:
    """An HTTP/1.1 server on `host`:`port` (0 picks a free port) in a daemon thread; subclasses answer."""

    wire = "http"  # what it speaks, in its thread's name and its errors

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        """Start serving (returns when the port is bound)."""
        self._thread = threading.Thread(target=self._serve, name=f"fake-{self.wire}", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._startup_error is not None:
            raise RuntimeError(f"the fake {self.wire} server could not start: {self._startup_error}")
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def respond(
        self, writer: asyncio.StreamWriter, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> bool:
        """Answer one request on `writer`; False ends the connection (the client hung up mid-reply)."""
        raise NotImplementedError

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            self._server = loop.run_until_complete(asyncio.start_server(self._connection, self.host, self.port))
            self.port = self._server.sockets[0].getsockname()[1]
        except OSError as exc:
            self._startup_error = exc
            loop.close()  # here, not in a garbage collection at exit that may find its parts gone
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await read_request(reader)
                if request is None or not await self.respond(writer, *request):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the server is stopping with keep-alive connections open
        finally:
            with contextlib.suppress(Exception):
                writer.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """One HTTP/1.1 request (Content-Length bodies only; header names lowercased), or None when the client closed."""
    line = await reader.readline()
    if not line:
        return None
    try:
        method, path, _version = line.decode("latin-1").split(" ", 2)
    except ValueError:
        return None
    headers: dict[str, str] = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return method, path, headers, body


def head(status: int, length: int | None, headers: dict[str, str]) -> bytes:
    """A response's status line and headers; no `length`: the body is sent chunked."""
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}.get(status, "Error")
    kind = headers.get("content-type", "application/json")
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items() if name != "content-type")
    framing = "transfer-encoding: chunked" if length is None else f"content-length: {length}"
    text = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {kind}\r\n{framing}\r\n{extra}connection: keep-alive\r\n\r\n"
    return text.encode("latin-1")


def write_response(
    writer: asyncio.StreamWriter, status: int, payload: Any, raw: bytes | None, headers: dict[str, str]
) -> None:
    """Write a whole reply: `raw` as it is, else `payload` as JSON."""
    body = raw if raw is not None else json.dumps(payload).encode("utf-8")
    writer.write(head(status, len(body), headers) + body)
