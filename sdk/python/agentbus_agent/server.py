"""The HTTP server of an agent: HTTP/1.1 with keep-alive on one event loop.

Each POST, on any path, is one request: its signature is checked on the raw body, it is decoded
and handed to the agent, and the answer goes back as JSON, or as NDJSON when the request asked
for a stream and the handler sends deltas.

One thread (the loop) accepts connections, reads requests, checks and decodes them. A handler
registered with blocking=False runs on the loop and its answer is written there; any other runs
on a worker thread, which owns the connection until its answer is written and then gives it back
to the loop. Python runs one thread at a time: a thread for each connection, as http.server and
socketserver have it, spends more time handing the interpreter between threads than running
requests once tens of connections are busy.
"""

from __future__ import annotations

import email.utils
import json
import logging
import queue
import re
import selectors
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol

from .context import Context, Handler, ProtocolError, _dumps
from .signature import SignatureError, verify

#: The largest request body read, in bytes: agentbus's largest webhook body (32 MiB) in base64,
#: with room for the rest of the request.
DEFAULT_MAX_BODY = 48 << 20

#: How long an idle keep-alive connection stays open, in seconds. Longer than Go's default
#: idle timeout of pooled connections (90 s), so that the host, not the agent, closes them.
DEFAULT_IDLE_TIMEOUT = 120.0

# How long a write may wait for the peer to read, in seconds, before the connection is dropped.
_WRITE_TIMEOUT = 30.0

# What a request's line and each header may hold, and how many headers it may have.
_MAX_LINE, _MAX_HEADERS = 65536, 100
_TEXT = b"text/plain; charset=utf-8"
# How much one read of a connection may take. Under the C library's threshold for memory of its
# own mapping (128 KiB in glibc), where a larger read buffer costs three more system calls per
# read (mmap, mremap when the bytes are trimmed to what arrived, munmap).
_RECV_SIZE = 65536
_SERVER = b"agentbus-agent-python/1"
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_LINE_END = re.compile(rb"\r?\n")

# Keys of the selector's registrations other than connections.
_LISTENER, _WAKE = "listener", "wake"


class ServedAgent(Protocol):
    """What the server needs of the agent it serves; Agent is one. The server depends on this
    rather than on Agent, whose server method makes one: agent imports server, not the other
    way round."""

    name: str
    secret: str
    log: logging.Logger

    def _route(self, ctx: Context) -> Handler | None: ...

    def _blocks(self, handler: Handler | None) -> bool: ...

    def _run(self, ctx: Context, handler: Handler | None) -> bytes: ...


class AgentServer:
    """Serves one Agent. start serves in a background thread, run in the foreground until a
    signal; stop stops accepting, lets in-flight requests finish (up to a grace period) and closes
    the connections. Used as a context manager, it is stopped on exit."""

    def __init__(self, agent: ServedAgent, host: str, port: int, *, max_body: int = DEFAULT_MAX_BODY,
                 idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> None:
        self.agent = agent
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        # A host opens up to its maxConcurrent connections at once: a short backlog would refuse
        # most of such a burst.
        self._listener = socket.create_server((host, port), backlog=socket.SOMAXCONN)
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._returned: deque[_Conn] = deque()  # connections the workers gave back
        self._workers = _Workers(f"agentbus-agent-{agent.name}")
        self._cond = threading.Condition()
        self._inflight = 0
        self._draining = False
        self._closing = False
        self._loop_thread: threading.Thread | None = None
        self._conns: set[_Conn] = set()  # touched by the loop only

    @property
    def port(self) -> int:
        """The port the server listens on (the one picked, when it was given 0)."""
        return self._listener.getsockname()[1]

    def start(self) -> AgentServer:
        """Serves in a background thread and returns at once."""
        self._loop_thread = threading.Thread(target=self._loop, name=f"agentbus-agent-{self.agent.name}", daemon=True)
        self._loop_thread.start()
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
        self._wake()  # the loop closes the listener
        if threading.current_thread() is self._loop_thread:
            grace = 0  # a handler on the loop: the requests in flight cannot end while it waits
        with self._cond:
            if not self._cond.wait_for(lambda: self._inflight == 0, timeout=grace):
                self.agent.log.warning("stopping with %d requests in flight", self._inflight)
            self._closing = True
        if self._loop_thread is None:
            self._close_all()
        else:
            self._wake()
            if threading.current_thread() is not self._loop_thread:
                self._loop_thread.join()

    def __enter__(self) -> AgentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # closed: the loop is gone; or full: it will wake anyway

    def _loop(self) -> None:
        next_sweep = time.monotonic() + 1.0
        try:
            while not self._closing:
                for key, _ in self._sel.select(timeout=1.0):
                    if key.data is _LISTENER:
                        self._accept()
                    elif key.data is _WAKE:
                        self._woken()
                    else:
                        conn = key.data
                        try:
                            conn.readable()
                        except Exception:
                            # A fault of the server's own, not of a handler (the agent answers
                            # those): it costs the connection, not the loop.
                            self.agent.log.exception("serving a connection; it is closed")
                            if not conn.busy:
                                conn.close()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + 1.0
                    self._sweep()
        finally:
            self._close_all()

    def _accept(self) -> None:
        for _ in range(64):  # a burst of connections, without starving the open ones
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # closed by stop, or out of descriptors: the next loop tries again
            sock.setblocking(False)
            # Headers and body go out in one write; without Nagle's algorithm a streamed
            # answer's chunks leave at once.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(self, sock)
            self._conns.add(conn)
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _woken(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        if self._draining and self._listener.fileno() >= 0:
            self._sel.unregister(self._listener)
            self._listener.close()
        while self._returned:
            conn = self._returned.popleft()
            if conn.closed:
                self._conns.discard(conn)
                continue
            conn.busy = False
            conn.last = time.monotonic()
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            try:
                conn.process()  # a request that came in behind the one just answered
            except Exception:
                self.agent.log.exception("serving a connection; it is closed")
                if not conn.busy:
                    conn.close()

    def _sweep(self) -> None:
        """Closes the connections idle for longer than idle_timeout."""
        idle_since = time.monotonic() - self.idle_timeout
        for conn in [c for c in self._conns if not c.busy and c.last < idle_since]:
            conn.close()

    def _close_all(self) -> None:
        for conn in list(self._conns):
            if conn.busy:
                # Its worker writes to it: shutting it down fails that write, and the worker
                # closes it.
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            else:
                conn.close()
        self._conns.clear()
        try:
            self._listener.close()
        finally:
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

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

    def _give_back(self, conn: _Conn) -> None:
        """Hands a connection a worker is done with back to the loop."""
        self._returned.append(conn)
        self._wake()


class _Conn:
    """One connection: its requests one after another, while it is kept alive.

    A lean HTTP/1.1 server of what the host sends (POSTs with a Content-Length): http.server's
    parsing of headers through the email package cost more than the rest of a request.
    """

    def __init__(self, server: AgentServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.buf = bytearray()
        self.last = time.monotonic()
        self.busy = False  # a worker owns it
        self.closed = False
        self.close_connection = False
        # The request being read: its line, then its header lines; where reading goes on.
        self._lines: list[bytes] = []
        self._scan = 0
        self._head_end = -1
        self.method = ""
        self.headers: dict[str, str] = {}

    def readable(self) -> None:
        try:
            data = self.sock.recv(_RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()  # the peer closed it
            return
        self.last = time.monotonic()
        self.buf += data
        self.process()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.busy:
            try:
                self.server._sel.unregister(self.sock)
            except (KeyError, ValueError):
                pass
            self.server._conns.discard(self)
        try:
            self.sock.close()
        except OSError:
            pass

    def process(self) -> None:
        """Serves the requests complete in the buffer, on the loop, until one goes to a worker."""
        while not self.busy and not self.closed:
            if self._head_end < 0 and (not self.buf or not self._read_head()):
                return  # incomplete, or refused and closed
            body_at = self._head_end
            if self.method != "POST":
                self._head_end = -1
                del self.buf[:body_at]
                # Its body, if it has one, is not read: the connection cannot go on after it.
                body = self.headers.get("content-length", "0") != "0" or "transfer-encoding" in self.headers
                self.send(405, b"POST agentbus requests here\n", _TEXT, close=body, extra=b"Allow: POST\r\n")
                continue
            length = self.headers.get("content-length")
            if length is None or not length.isdigit() or "transfer-encoding" in self.headers:
                # Without a length the next request on the connection cannot be found.
                self.send(411, b"Content-Length is required\n", _TEXT, close=True)
                return
            n = int(length)
            if n > self.server.max_body:
                self.send(413, b"the request is too large\n", _TEXT, close=True)
                return
            if len(self.buf) < body_at + n:
                return  # the rest of the body is to come
            body = bytes(self.buf[body_at:body_at + n])
            del self.buf[:body_at + n]
            self._head_end = -1
            self._post(body)

    def _read_head(self) -> bool:
        """Reads the lines of a request's head from the buffer; False while it is incomplete.
        A head that cannot be served is answered and the connection closed."""
        buf = self.buf
        lines: list[str] | None = None
        if not self._lines:
            # The usual head, short and CRLF throughout, split at once; anything else line by
            # line.
            end = buf.find(b"\r\n\r\n", self._scan)
            if self._scan < end <= self._scan + _MAX_LINE:
                head = bytes(buf[self._scan:end])
                if not head.startswith(b"\r\n") and head.count(b"\n") == head.count(b"\r\n"):
                    lines = head.decode("latin-1").split("\r\n")
                    if len(lines) > _MAX_HEADERS + 1:
                        lines = None
                    else:
                        self._scan = end + 4
        while lines is None:
            m = _LINE_END.search(buf, self._scan)
            # A line too long, whether it has ended yet or not.
            if (m.start() if m else len(buf)) - self._scan > _MAX_LINE:
                if not self._lines:
                    self.send(414, b"the request line is too long\n", _TEXT, close=True)
                else:
                    self.send(400, b"a malformed header\n", _TEXT, close=True)
                return False
            if m is None:
                return False
            line = bytes(buf[self._scan:m.start()])
            self._scan = m.end()
            if not line:
                if not self._lines:
                    continue  # blank lines before a request are allowed
                lines = [x.decode("latin-1") for x in self._lines]
                self._lines = []
                break
            self._lines.append(line)
            if len(self._lines) > _MAX_HEADERS + 1:
                self.send(431, b"too many headers\n", _TEXT, close=True)
                return False
        end, self._scan = self._scan, 0
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self.send(400, b"not an HTTP/1.1 request\n", _TEXT, close=True)
            return False
        headers: dict[str, str] = {}
        for h in lines[1:]:
            name, colon, value = h.partition(":")
            if not colon:
                self.send(400, b"a malformed header\n", _TEXT, close=True)
                return False
            key = name.strip().lower()
            v = value.strip()
            headers[key] = headers[key] + ", " + v if key in headers else v
        self.method = parts[0]
        self.headers = headers
        conn = headers.get("connection", "").lower()
        self.close_connection = "close" in conn or (parts[2] == "HTTP/1.0" and "keep-alive" not in conn)
        self._head_end = end
        if headers.get("expect", "").lower() == "100-continue" and self.method == "POST":
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _post(self, body: bytes) -> None:
        """Checks, decodes and runs one request: its handler on the loop or on a worker."""
        server, agent = self.server, self.server.agent
        if not server._begin():
            self.send(503, b"the agent is stopping\n", _TEXT, close=True)
            return
        handed_over = False
        try:
            try:
                verify(agent.secret, self.headers, body)
            except SignatureError as e:
                agent.log.warning("request refused: %s (webhook-id %s)", e, self.headers.get("webhook-id"))
                self.send(401, f"{e}\n".encode(), _TEXT)
                return
            stream = _Stream(self)
            try:
                ctx = Context(json.loads(body), stream.delta)
            except (ProtocolError, ValueError) as e:  # ValueError: not JSON
                agent.log.warning("request refused: %s (webhook-id %s)", e, self.headers.get("webhook-id"))
                self.send(400, f"not an agentbus protocol 1 request: {e}\n".encode(), _TEXT)
                return
            handler = agent._route(ctx)
            if not agent._blocks(handler):
                self._answer(stream, agent._run(ctx, handler))
                return
            # The worker owns the connection until it gives it back: the loop stops reading it.
            self.busy = True
            server._sel.unregister(self.sock)
            handed_over = True
            server._workers.submit(lambda: self._work(stream, ctx, handler))
        finally:
            if not handed_over:
                server._end()

    def _work(self, stream: _Stream, ctx: Context, handler: Handler | None) -> None:
        """Runs a blocking handler on a worker thread and writes its answer."""
        server = self.server
        try:
            self._answer(stream, server.agent._run(ctx, handler))
        except Exception:
            server.agent.log.exception("answering a request; its connection is closed")
            self.close_connection = True
        finally:
            server._end()
            if self.close_connection and not self.closed:
                self.closed = True
                try:
                    self.sock.close()
                except OSError:
                    pass
            server._give_back(self)

    def _answer(self, stream: _Stream, answer: bytes) -> None:
        if stream.started:
            stream.finish(answer)
        else:
            self.send(200, answer, b"application/json")

    def head(self, status: int, fields: bytes) -> bytes:
        """A response's status line and headers: the server's own, then fields (each ending in
        CRLF)."""
        close = b"Connection: close\r\n" if self.close_connection else b""
        return b"HTTP/1.1 %d %s\r\nServer: %s\r\nDate: %s\r\n%s%s\r\n" % (
            status, _REASONS.get(status, b"Status"), _SERVER, _date(), fields, close)

    def send(self, status: int, body: bytes, content_type: bytes, close: bool = False, extra: bytes = b"") -> None:
        """Answers status with body, in one write; close closes the connection after it."""
        if close:
            self.close_connection = True
        self.write(self.head(status, b"Content-Type: %s\r\nContent-Length: %d\r\n%s" % (content_type, len(body), extra)) + body)
        if self.close_connection and not self.busy:
            self.close()

    def write(self, data: bytes) -> bool:
        """Writes data, waiting for the peer to read it for up to _WRITE_TIMEOUT seconds; False
        when the connection broke (it is then to be closed)."""
        if self.closed:
            return False
        try:
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            if n < len(data):
                self.sock.settimeout(_WRITE_TIMEOUT)
                try:
                    self.sock.sendall(memoryview(data)[n:])
                finally:
                    self.sock.setblocking(False)
            return True
        except OSError:
            self.close_connection = True  # the peer is gone, or reads too slowly
            return False


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

    def __init__(self, conn: _Conn) -> None:
        self._c = conn
        self.started = False
        self._broken = False

    def delta(self, text: str) -> None:
        head = b""
        if not self.started:
            self.started = True
            head = self._c.head(200, b"Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n")
        self._write(head, _dumps({"delta": text}).encode() + b"\n")

    def finish(self, answer: bytes) -> None:
        self._write(b"", answer + b"\n", last=True)
        if self._c.close_connection and not self._c.busy:
            self._c.close()

    def _write(self, head: bytes, data: bytes, last: bool = False) -> None:
        # A caller gone away must not fail the handler: the rest is dropped, the connection
        # closed, and agentbus, which got no answer, tries the request again.
        if self._broken:
            return
        if not self._c.write(head + b"%x\r\n%s\r\n" % (len(data), data) + (b"0\r\n\r\n" if last else b"")):
            self._broken = True


class _Workers:
    """Daemon threads that run blocking handlers: an idle one takes the next, a new one starts
    when none is idle, and one idle for a minute ends. Daemon threads, as a handler that never
    returns must not keep the process from exiting."""

    _IDLE = 60.0

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that one takes it
        if start:
            threading.Thread(target=self._work, args=(job,), name=f"{self._name}-worker", daemon=True).start()
        else:
            self._jobs.put(job)

    def _work(self, job: Callable[[], None]) -> None:
        while True:
            job()
            with self._lock:
                self._idle += 1
            while True:
                try:
                    job = self._jobs.get(timeout=self._IDLE)
                    break
                except queue.Empty:
                    with self._lock:
                        if self._idle > 0:  # no job is on its way to this thread
                            self._idle -= 1
                            return
