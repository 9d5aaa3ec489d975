"""The HTTP server of an agent: HTTP/1.1 with keep-alive, one thread a connection.

Each POST, on any path, is one request: its signature is checked on the raw body, it is decoded
and handed to the agent, and the answer goes back as JSON, or as NDJSON when the request asked
for a stream and the handler sends deltas.
"""

from __future__ import annotations

import email.utils
import json
import signal
import socket
import socketserver
import threading
import time
from http import HTTPStatus
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .agent import ProtocolError, _dumps
from .signature import SignatureError, verify

if TYPE_CHECKING:
    from .agent import Agent

#: The largest request body read, in bytes: agentbus's largest webhook body (32 MiB) in base64,
#: with room for the rest of the request.
DEFAULT_MAX_BODY = 48 << 20

#: How long an idle keep-alive connection stays open, in seconds. Longer than Go's default
#: idle timeout of pooled connections (90 s), so that the host, not the agent, closes them.
DEFAULT_IDLE_TIMEOUT = 120.0

# How often serve_forever looks for a stop: the longest stop waits for it.
_POLL = 0.05


class AgentServer(socketserver.ThreadingTCPServer):
    """Serves one Agent. start serves in a background thread, run in the foreground until a
    signal; stop stops accepting, lets in-flight requests finish (up to a grace period) and closes
    the connections. Used as a context manager, it is stopped on exit."""

    daemon_threads = True
    allow_reuse_address = True
    # A host opens up to its maxConcurrent connections at once; socketserver's backlog of 5
    # would refuse most of such a burst.
    request_queue_size = socket.SOMAXCONN
    # Connections are closed by stop, not joined: an idle keep-alive connection would hold it.
    block_on_close = False

    def __init__(self, agent: Agent, host: str, port: int, *, max_body: int = DEFAULT_MAX_BODY,
                 idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> None:
        self.agent = agent
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self._cond = threading.Condition()
        self._inflight = 0
        self._draining = False
        self._serving = False
        self._conns: set[socket.socket] = set()
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        """The port the server listens on (the one picked, when it was given 0)."""
        return self.server_address[1]

    def start(self) -> AgentServer:
        """Serves in a background thread and returns at once."""
        self._serving = True
        threading.Thread(target=self.serve_forever, args=(_POLL,), name=f"agentbus-agent-{self.agent.name}", daemon=True).start()
        return self

    def run(self, grace: float = 30.0, ready: Callable[[], None] | None = None) -> None:
        """Serves until SIGINT or SIGTERM, then stops (see stop). ready, if given, is called once
        it serves and the signals stop it: the moment to announce it."""
        stop = threading.Event()
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, lambda *_: stop.set())
        try:
            self.start()
            if ready is not None:
                ready()
            while not stop.wait(0.5) and not self._draining:
                pass  # stopped by a signal, or by stop from another thread
        finally:
            self.stop(grace)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self, grace: float = 30.0) -> None:
        """Stops accepting connections, answers new requests on open ones 503 (agentbus tries
        them again), waits up to grace seconds for in-flight requests, then closes every
        connection."""
        with self._cond:
            if self._draining:
                return
            self._draining = True
        if self._serving:
            self.shutdown()
        with self._cond:
            if not self._cond.wait_for(lambda: self._inflight == 0, timeout=grace):
                self.agent.log.warning("stopping with %d requests in flight", self._inflight)
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the peer
        self.server_close()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _begin(self) -> bool:
        """Counts a request in flight; False once stopping."""
        with self._cond:
            if self._draining:
                return False
            self._inflight += 1
            return True

    def _end(self) -> None:
        with self._cond:
            self._inflight -= 1
            self._cond.notify_all()

    def _track(self, conn: socket.socket, open_: bool) -> None:
        with self._cond:
            if open_:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)


class _Handler(socketserver.StreamRequestHandler):
    """One connection: its requests one after another, while it is kept alive.

    A lean HTTP/1.1 server of what the host sends (POSTs with a Content-Length): http.server's
    parsing of headers through the email package cost more than the rest of a request.
    """

    # Headers and body go out in one write; without Nagle's algorithm a streamed answer's
    # chunks leave at once.
    disable_nagle_algorithm = True
    server: AgentServer

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout
        super().setup()
        self.server._track(self.connection, True)
        self.headers: dict[str, str] = {}
        self.close_connection = False

    def finish(self) -> None:
        self.server._track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass  # the peer is gone

    def handle(self) -> None:
        try:
            while not self.close_connection:
                method = self._read_head()
                if method is None:
                    return
                if method == "POST":
                    self._post()
                else:
                    # Its body, if it has one, is not read: the connection cannot go on after it.
                    body = self.headers.get("content-length", "0") != "0" or "transfer-encoding" in self.headers
                    self._send(405, b"POST agentbus requests here\n", _TEXT, close=body, extra=b"Allow: POST\r\n")
        except OSError:
            pass  # an idle connection timed out, the peer went away, or stop closed it

    def _read_head(self) -> str | None:
        """Reads a request's line and headers; None when the connection is to be closed (the
        peer closed it, or the request was refused here)."""
        line = self.rfile.readline(_MAX_LINE + 1)
        while line in (b"\r\n", b"\n"):
            line = self.rfile.readline(_MAX_LINE + 1)  # blank lines before a request are allowed
        if not line:
            return None
        if len(line) > _MAX_LINE:
            self._send(414, b"the request line is too long\n", _TEXT, close=True)
            return None
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self._send(400, b"not an HTTP/1.1 request\n", _TEXT, close=True)
            return None
        headers: dict[str, str] = {}
        for _ in range(_MAX_HEADERS + 1):
            h = self.rfile.readline(_MAX_LINE + 1)
            if h in (b"\r\n", b"\n", b""):
                break
            name, colon, value = h.partition(b":")
            if not colon or len(h) > _MAX_LINE:
                self._send(400, b"a malformed header\n", _TEXT, close=True)
                return None
            key = name.strip().lower().decode("latin-1")
            v = value.strip().decode("latin-1")
            headers[key] = headers[key] + ", " + v if key in headers else v
        else:
            self._send(431, b"too many headers\n", _TEXT, close=True)
            return None
        self.headers = headers
        conn = headers.get("connection", "").lower()
        self.close_connection = "close" in conn or (parts[2] == b"HTTP/1.0" and "keep-alive" not in conn)
        if headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return parts[0].decode("latin-1")

    def _post(self) -> None:
        if not self.server._begin():
            self._send(503, b"the agent is stopping\n", _TEXT, close=True)
            return
        try:
            self._serve()
        finally:
            self.server._end()

    def _serve(self) -> None:
        """Reads, verifies and decodes one request, runs its handler and answers."""
        body = self._read_body()
        if body is None:
            return
        agent = self.server.agent
        try:
            verify(agent.secret, self.headers, body)
        except SignatureError as e:
            agent.log.warning("request refused: %s (webhook-id %s)", e, self.headers.get("webhook-id"))
            self._send(401, f"{e}\n".encode(), _TEXT)
            return
        stream = _Stream(self)
        try:
            answer = agent.answer(json.loads(body), stream.delta)
        except (ProtocolError, ValueError) as e:  # ValueError: not JSON
            agent.log.warning("request refused: %s (webhook-id %s)", e, self.headers.get("webhook-id"))
            self._send(400, f"not an agentbus protocol 1 request: {e}\n".encode(), _TEXT)
            return
        if stream.started:
            stream.finish(answer)
        else:
            self._send(200, answer, b"application/json")

    def _read_body(self) -> bytes | None:
        """The request's body, or None when it was answered for want of a usable length."""
        length = self.headers.get("content-length")
        if length is None or not length.isdigit() or "transfer-encoding" in self.headers:
            # Without a length the next request on the connection cannot be found.
            self._send(411, b"Content-Length is required\n", _TEXT, close=True)
            return None
        n = int(length)
        if n > self.server.max_body:
            self._send(413, b"the request is too large\n", _TEXT, close=True)
            return None
        body = self.rfile.read(n)
        if len(body) < n:
            raise ConnectionError("the request's body was cut off")
        return body

    def _head(self, status: int, fields: bytes) -> bytes:
        """A response's status line and headers: the server's own, then fields (each ending in
        CRLF)."""
        close = b"Connection: close\r\n" if self.close_connection else b""
        return b"HTTP/1.1 %d %s\r\nServer: %s\r\nDate: %s\r\n%s%s\r\n" % (
            status, _REASONS.get(status, b"Status"), _SERVER, _date(), fields, close)

    def _send(self, status: int, body: bytes, content_type: bytes, close: bool = False, extra: bytes = b"") -> None:
        """Answers status with body, in one write; close closes the connection after it."""
        if close:
            self.close_connection = True
        head = self._head(status, b"Content-Type: %s\r\nContent-Length: %d\r\n%s" % (content_type, len(body), extra))
        self.wfile.write(head + body)


# What a request's line and each header may hold, and how many headers it may have.
_MAX_LINE, _MAX_HEADERS = 65536, 100
_TEXT = b"text/plain; charset=utf-8"
_SERVER = b"agentbus-agent-python/1"
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}

_date_cache: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    """The Date header's value, made once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, email.utils.formatdate(now, usegmt=True).encode())
    return _date_cache[1]


class _Stream:
    """A streamed answer: NDJSON lines in chunked encoding, begun by the first delta."""

    def __init__(self, handler: _Handler) -> None:
        self._h = handler
        self.started = False
        self._broken = False

    def delta(self, text: str) -> None:
        head = b""
        if not self.started:
            self.started = True
            head = self._h._head(200, b"Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n")
        self._write(head, _dumps({"delta": text}).encode() + b"\n")

    def finish(self, answer: bytes) -> None:
        self._write(b"", answer + b"\n", last=True)

    def _write(self, head: bytes, data: bytes, last: bool = False) -> None:
        # A caller gone away must not fail the handler: the rest is dropped, the connection
        # closed, and agentbus, which got no answer, tries the request again.
        if self._broken:
            return
        try:
            self._h.wfile.write(head + b"%x\r\n%s\r\n" % (len(data), data) + (b"0\r\n\r\n" if last else b""))
        except OSError:
            self._broken = True
            self._h.close_connection = True
