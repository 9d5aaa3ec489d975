"""The HTTP server: streamed answers, keep-alive, refusals and stopping."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import unittest
from typing import Any

from agentbus_agent import Context, Fail

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
