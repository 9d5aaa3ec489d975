"""The HTTP server: streamed answers, keep-alive, refusals and stopping."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import unittest
from typing import Any

from agentbus_agent import AgentServer, Context, Fail
from agentbus_agent import server as server_module

from .helpers import Client, chat, data, new_agent, serve, signed


class StreamTest(unittest.TestCase):
    def setUp(self) -> None:
        self.go_on = threading.Event()
        agent = new_agent()

        @agent.chat
        def on_chat(ctx: Context) -> Any:
            ctx.delta("You said: ")
            # The first line must reach the caller while the handler still runs.
            if ctx.text == "wait" and not self.go_on.wait(5):
                raise RuntimeError("the first delta was not received")
            ctx.delta(ctx.text)
            ctx.set_state({"said": ctx.text})
            if ctx.text == "fail":
                raise Fail(422, "cannot say that")

        @agent.data("story")
        def story(ctx: Context) -> Any:
            ctx.delta("once")
            return {"words": 1}

        @agent.data("quiet")
        def quiet(ctx: Context) -> Any:
            return "no deltas"

        self.client = Client(self, serve(self, agent).port)

    def stream(self, req: dict[str, Any], on_first_line: Any = None) -> list[Any]:
        """Posts req and returns the NDJSON answer's lines, decoded, read one at a time."""
        resp = self.client.send(req)
        self.assertEqual(200, resp.status)
        self.assertEqual("application/x-ndjson", resp.headers["Content-Type"])
        self.assertEqual("chunked", resp.headers["Transfer-Encoding"])
        lines = []
        while line := resp.readline():
            self.assertTrue(line.endswith(b"\n"), line)
            lines.append(json.loads(line))
            if len(lines) == 1 and on_first_line:
                on_first_line()
        return lines

    def test_deltas_then_the_answer(self) -> None:
        lines = self.stream(chat("wait", stream=True), on_first_line=self.go_on.set)
        self.assertEqual([{"delta": "You said: "}, {"delta": "wait"},
                          {"reply": {"text": "You said: wait"}, "state": {"said": "wait"}}], lines)

    def test_returned_text_or_data(self) -> None:
        self.assertEqual([{"delta": "once"}, {"reply": {"text": "once", "data": {"words": 1}}}],
                         self.stream(data("story", stream=True)), "data returned, text from the deltas")

    def test_failure_after_deltas(self) -> None:
        self.assertEqual([{"delta": "You said: "}, {"delta": "fail"},
                          {"error": {"status": 422, "message": "cannot say that", "retry": False}}],
                         self.stream(chat("fail", stream=True)))

    def test_not_streamed(self) -> None:
        self.assertEqual({"reply": {"text": "You said: hi"}, "state": {"said": "hi"}},
                         self.client.call(self, chat("hi")), "stream false: the deltas joined, one JSON answer")
        self.assertEqual({"reply": {"text": "no deltas"}}, self.client.call(self, data("quiet", stream=True)),
                         "stream true without deltas: one JSON answer")

    def test_keep_alive_after_a_stream(self) -> None:
        self.stream(data("story", stream=True))
        sock = self.client.conn.sock
        self.assertIsNotNone(sock)
        self.assertEqual({"reply": {"text": "no deltas"}}, self.client.call(self, data("quiet")))
        self.assertIs(sock, self.client.conn.sock)


class KeepAliveTest(unittest.TestCase):
    def setUp(self) -> None:
        self.peers: list[Any] = []
        agent = new_agent()
        agent.data("echo")(lambda ctx: ctx.data)
        self.srv = serve(self, agent)
        self.client = Client(self, self.srv.port)

    def test_requests_share_a_connection(self) -> None:
        first = self.client.post(data("echo", {"n": 1}))
        sock = self.client.conn.sock
        self.assertEqual((200, False), (first.status, first.will_close))
        self.assertEqual(str(len(first.body)), first.headers["Content-Length"])
        refused = self.client.post(b"{}", headers={"Content-Type": "application/json"})
        self.assertEqual((401, False), (refused.status, refused.will_close))
        self.assertEqual({"reply": {"data": {"n": 2}}}, self.client.call(self, data("echo", {"n": 2})))
        self.assertIs(sock, self.client.conn.sock, "all three on the first connection")
        self.assertEqual(1, len(self.srv._conns), "the server saw one connection")

    def test_refusals_that_close(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
        self.addCleanup(conn.close)
        conn.request("GET", "/agentbus")
        resp = conn.getresponse()
        self.assertEqual((405, "POST"), (resp.status, resp.headers["Allow"]))
        resp.read()
        # http.client always sends a length; a raw request shows the server's answer without one.
        conn.sock.sendall(b"POST /agentbus HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        resp = http.client.HTTPResponse(conn.sock)
        resp.begin()
        self.assertEqual((411, True), (resp.status, resp.will_close))


    def test_malformed_requests_close(self) -> None:
        for raw, status in [(b"NOT HTTP\r\n\r\n", 400), (b"POST /a HTTP/1.1\r\nno colon\r\n\r\n", 400),
                            (b"POST /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
                            (b"POST /a HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431)]:
            with socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) as sock:
                sock.sendall(raw)
                resp = http.client.HTTPResponse(sock)
                resp.begin()
                self.assertEqual((status, True), (resp.status, resp.will_close), raw[:20])
                resp.read()
                self.assertEqual(b"", sock.recv(1), "the server closed the connection")

    def test_a_refused_method_with_a_body_closes(self) -> None:
        with socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) as sock:
            sock.sendall(b"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            self.assertEqual((405, True), (resp.status, resp.will_close))

    def test_header_names_any_case(self) -> None:
        req = data("echo", {"n": 3})
        body = json.dumps(req).encode()
        headers = {k.upper(): v for k, v in signed(body).items()}
        resp = self.client.post(body, headers=headers)
        self.assertEqual(200, resp.status, resp.body)


class StopTest(unittest.TestCase):
    def test_stop_lets_in_flight_requests_finish(self) -> None:
        started = threading.Event()
        agent = new_agent()

        @agent.data("slow")
        def slow(ctx: Context) -> Any:
            started.set()
            time.sleep(0.3)
            return "done"

        srv = agent.server("127.0.0.1", 0).start()
        client = Client(self, srv.port)
        answers: list[Any] = []
        t = threading.Thread(target=lambda: answers.append(client.post(data("slow"))))
        t.start()
        self.assertTrue(started.wait(5))
        srv.stop(grace=5)
        t.join(5)
        self.assertEqual(200, answers[0].status)
        self.assertEqual({"reply": {"text": "done"}}, answers[0].json())
        with self.assertRaises(OSError):
            Client(self, srv.port).post(data("slow"))


def raw_request(obj: Any) -> bytes:
    """obj as a signed POST, the bytes of a whole HTTP/1.1 request."""
    body = json.dumps(obj).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in signed(body).items())
    return f"POST /agentbus HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def read_answers(test: unittest.TestCase, sock: socket.socket, n: int) -> list[Any]:
    """Reads n JSON answers (with a Content-Length) from sock, in order."""
    out = []
    with sock.makefile("rb") as f:
        for _ in range(n):
            test.assertTrue(f.readline().startswith(b"HTTP/1.1 200 "))
            length = 0
            while (line := f.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            out.append(json.loads(f.read(length)))
    return out


class LoopTest(unittest.TestCase):
    """Handlers on the loop (blocking=False) and on workers, side by side."""

    def setUp(self) -> None:
        self.release = threading.Event()
        self.waiting = threading.Event()
        agent = new_agent()

        @agent.data("wait")
        def wait(ctx: Context) -> Any:
            self.waiting.set()
            if not self.release.wait(5):
                raise RuntimeError("not released")
            return "waited"

        @agent.data("quick", blocking=False)
        def quick(ctx: Context) -> Any:
            return {"thread": threading.current_thread().name, "n": ctx.data}

        @agent.chat(blocking=False)
        def chat_(ctx: Context) -> Any:
            ctx.delta("a ")
            ctx.delta("b")

        self.srv = serve(self, agent)
        self.addCleanup(self.release.set)

    def test_a_waiting_handler_holds_up_no_other_connection(self) -> None:
        slow = Client(self, self.srv.port)
        answers: list[Any] = []
        t = threading.Thread(target=lambda: answers.append(slow.post(data("wait"))))
        t.start()
        self.assertTrue(self.waiting.wait(5))
        got = Client(self, self.srv.port).call(self, data("quick", 1))
        self.assertEqual(1, got["reply"]["data"]["n"], "answered while the other waits")
        self.assertTrue(got["reply"]["data"]["thread"].startswith("agentbus-agent-"), got)
        self.assertNotIn("worker", got["reply"]["data"]["thread"], "a blocking=False handler runs on the loop")
        self.release.set()
        t.join(5)
        self.assertEqual({"reply": {"text": "waited"}}, answers[0].json())

    def test_pipelined_requests_are_answered_in_order(self) -> None:
        self.release.set()
        with socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) as sock:
            sock.sendall(raw_request(data("quick", 1)) + raw_request(data("wait")) + raw_request(data("quick", 3)))
            got = read_answers(self, sock, 3)
        self.assertEqual(1, got[0]["reply"]["data"]["n"])
        self.assertEqual({"reply": {"text": "waited"}}, got[1], "a worker's answer, between the loop's")
        self.assertEqual(3, got[2]["reply"]["data"]["n"])

    def test_a_request_in_pieces(self) -> None:
        raw = raw_request(data("quick", 7))
        with socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(0, len(raw), 7):
                sock.sendall(raw[i:i + 7])
                time.sleep(0.001)
            self.assertEqual(7, read_answers(self, sock, 1)[0]["reply"]["data"]["n"])

    def test_line_feeds_without_carriage_returns(self) -> None:
        raw = raw_request(data("quick", 9))
        head, _, body = raw.partition(b"\r\n\r\n")
        with socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) as sock:
            sock.sendall(b"\r\n" + head.replace(b"\r\n", b"\n") + b"\n\n" + body)
            self.assertEqual(9, read_answers(self, sock, 1)[0]["reply"]["data"]["n"])

    def test_a_fault_of_the_server_costs_one_connection(self) -> None:
        real = server_module.Context

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a fault of the server")
        server_module.Context = broken  # type: ignore[assignment,misc]
        try:
            with self.assertLogs("agentbus_agent", level="ERROR"), \
                    socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) as sock:
                sock.sendall(raw_request(data("quick", 1)))
                self.assertEqual(b"", sock.recv(1), "that connection is closed")
        finally:
            server_module.Context = real  # type: ignore[misc]
        self.assertEqual(2, Client(self, self.srv.port).call(self, data("quick", 2))["reply"]["data"]["n"],
                         "the loop serves on")

    def test_a_stream_from_the_loop(self) -> None:
        resp = Client(self, self.srv.port).send(chat("hi", stream=True))
        self.assertEqual("application/x-ndjson", resp.headers["Content-Type"])
        self.assertEqual([{"delta": "a "}, {"delta": "b"}, {"reply": {"text": "a b"}}],
                         [json.loads(line) for line in resp.read().splitlines()])


class IdleTest(unittest.TestCase):
    def test_an_idle_connection_is_closed(self) -> None:
        agent = new_agent()
        srv = AgentServer(agent, "127.0.0.1", 0, idle_timeout=0.3).start()
        self.addCleanup(srv.stop, 5)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            began = time.monotonic()
            self.assertEqual(b"", sock.recv(1), "closed by the server")
            self.assertLess(time.monotonic() - began, 5)
