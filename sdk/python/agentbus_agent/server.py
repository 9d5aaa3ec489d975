"""The HTTP server of an agent: http.server with HTTP/1.1 keep-alive, one thread a connection.

Each POST, on any path, is one request: its signature is checked on the raw body, it is decoded
and handed to the agent, and the answer goes back as JSON, or as NDJSON when the request asked
for a stream and the handler sends deltas.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class AgentServer(ThreadingHTTPServer):
    """Serves one Agent. start serves in a background thread, run in the foreground until a
    signal; stop stops accepting, lets in-flight requests finish (up to a grace period) and closes
    the connections. Used as a context manager, it is stopped on exit."""

    daemon_threads = True
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agentbus-agent-python/1"
    # Headers and body go out in separate writes; with Nagle's algorithm, a keep-alive peer's
    # delayed ACK would hold each answer's body back ~40 ms.
    disable_nagle_algorithm = True
    server: AgentServer

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout
        super().setup()
        self.server._track(self.connection, True)

    def finish(self) -> None:
        self.server._track(self.connection, False)
        super().finish()

    def do_POST(self) -> None:
        if not self.server._begin():
            self._send(503, b"the agent is stopping\n", "text/plain; charset=utf-8", close=True)
            return
        try:
            self._serve()
        finally:
            self.server._end()

    def do_GET(self) -> None:
        self._send(405, b"POST agentbus requests here\n", "text/plain; charset=utf-8", extra={"Allow": "POST"})

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
            self._send(401, f"{e}\n".encode(), "text/plain; charset=utf-8")
            return
        stream = _Stream(self)
        try:
            answer = agent.answer(json.loads(body), stream.delta)
        except (ProtocolError, ValueError) as e:  # ValueError: not JSON
            agent.log.warning("request refused: %s (webhook-id %s)", e, self.headers.get("webhook-id"))
            self._send(400, f"not an agentbus protocol 1 request: {e}\n".encode(), "text/plain; charset=utf-8")
            return
        if stream.started:
            stream.finish(answer)
        else:
            self._send(200, answer, "application/json")

    def _read_body(self) -> bytes | None:
        """The request's body, or None when it was answered for want of a usable length."""
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            # Without a length the next request on the connection cannot be found.
            self._send(411, b"Content-Length is required\n", "text/plain; charset=utf-8", close=True)
            return None
        if int(length) > self.server.max_body:
            self._send(413, b"the request is too large\n", "text/plain; charset=utf-8", close=True)
            return None
        return self.rfile.read(int(length))

    def _send(self, status: int, body: bytes, content_type: str, close: bool = False,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        self.server.agent.log.debug("%s " + format, self.address_string(), *args)


class _Stream:
    """A streamed answer: NDJSON lines in chunked encoding, begun by the first delta."""

    def __init__(self, handler: _Handler) -> None:
        self._h = handler
        self.started = False
        self._broken = False

    def delta(self, text: str) -> None:
        if not self.started:
            self.started = True
            self._h.send_response(200)
            self._h.send_header("Content-Type", "application/x-ndjson")
            self._h.send_header("Transfer-Encoding", "chunked")
            self._h.end_headers()
        self._chunk(_dumps({"delta": text}).encode() + b"\n")

    def finish(self, answer: bytes) -> None:
        self._chunk(answer + b"\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        # A caller gone away must not fail the handler: the rest is dropped, the connection
        # closed, and agentbus, which got no answer, tries the request again.
        if self._broken:
            return
        try:
            self._h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except OSError:
            self._broken = True
            self._h.close_connection = True
