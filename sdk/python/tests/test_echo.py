"""examples/echo.py, run as its own process the way its README runs it."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import subprocess
import sys
import threading
import unittest
from pathlib import Path
from typing import Any

from .helpers import SECRET, Client, chat, data, request

ECHO = Path(__file__).resolve().parent.parent / "examples" / "echo.py"


def webhook(method: str, body: bytes = b"", params: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    return request("Webhook", webhook={"method": method, "params": params or {}, "headers": {},
                                       "contentType": "application/json", "body": base64.b64encode(body).decode()},
                   **fields)


def read_json(stream: Any) -> Any:
    """Reads one indented JSON object, up to its closing line, from a text stream."""
    lines = []
    for line in stream:
        lines.append(line)
        if line == "}\n":
            break
    return json.loads("".join(lines))


class EchoTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.proc = subprocess.Popen([sys.executable, str(ECHO), "--port", "0", "--secret", SECRET],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cls.registration = read_json(cls.proc.stdout)
        cls.port = int(cls.registration["url"].rsplit(":", 1)[1].split("/")[0])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.proc.terminate()
        cls.proc.communicate(timeout=10)

    def setUp(self) -> None:
        self.client = Client(self, self.port)

    def call(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.client.call(self, req)

    def response(self, req: dict[str, Any]) -> tuple[int, str, Any]:
        """A webhook's response: status, content type and body (decoded when JSON)."""
        r = self.call(req)["response"]
        body = r.get("body", "")
        return r.get("status", 200), r.get("contentType", ""), json.loads(body) if r.get("contentType") == "application/json" else body

    def test_registration(self) -> None:
        reg = self.registration
        self.assertEqual(("EchoPy", True, True, SECRET), (reg["name"], reg["chat"], reg["file"], reg["secret"]))
        self.assertEqual(["echo", "verify", "status", "sleep", "count", "state"], reg["webhooks"])
        self.assertEqual(["echo", "sum", "count", "sleep", "fail", "remind", "tick"], [m["name"] for m in reg["methods"]])
        self.assertEqual(["Supervisor Workflow", "Conversational"], reg["workflowTypes"])
        self.assertTrue(reg["url"].startswith("http://127.0.0.1:") and reg["url"].endswith("/agentbus"))

    def test_registration_flag(self) -> None:
        out = subprocess.run([sys.executable, str(ECHO), "--registration", "--secret", SECRET, "--url", "https://echo.example/ab"],
                             capture_output=True, text=True, timeout=30, check=True)
        self.assertEqual("https://echo.example/ab", json.loads(out.stdout)["url"])

    def test_webhook_echo(self) -> None:
        body = '{"item":"tea","qty":2}'.encode()
        self.assertEqual((200, "application/json", {"params": {"order": "17"}, "body": body.decode(), "size": 22,
                                                    "sha256": hashlib.sha256(body).hexdigest()}),
                         self.response(webhook("echo", body, {"order": "17"})))
        binary = b"\xff\xfe\x00"
        self.assertEqual({"params": {}, "bodyBase64": "//4A", "size": 3, "sha256": hashlib.sha256(binary).hexdigest()},
                         self.response(webhook("echo", binary))[2])

    def test_webhook_verify_and_status(self) -> None:
        text = "text/plain; charset=utf-8"
        self.assertEqual((200, text, "abc123"), self.response(webhook("verify", params={"challenge": "abc123"})))
        self.assertEqual((200, text, "xyz"), self.response(webhook("verify", b'{"challenge":"xyz"}')))
        self.assertEqual((400, text, "missing challenge"), self.response(webhook("verify")))
        self.assertEqual((418, "application/json", {"status": 418}), self.response(webhook("status", params={"code": "418"})))
        self.assertEqual(400, self.response(webhook("status", params={"code": "99"}))[0])

    def test_count_keeps_state(self) -> None:
        first = self.call(webhook("count"))
        self.assertEqual({"count": 1, "runId": "run-1"}, json.loads(first["response"]["body"]))
        self.assertEqual({"count": 1, "acks": 0, "sleeps": 0}, first["state"])
        second = self.call(data("count", {}, state=first["state"]))
        self.assertEqual({"reply": {"data": {"count": 2, "runId": "run-1"}}, "state": {"count": 2, "acks": 0, "sleeps": 0}},
                         second)
        self.assertEqual({"runId": "run-1", "state": {"count": 2, "acks": 0, "sleeps": 0}},
                         self.response(webhook("state", state=second["state"]))[2])
        self.assertNotIn("state", self.call(webhook("state")), "state changes nothing")

    def test_data_methods(self) -> None:
        self.assertEqual({"reply": {"data": {"a": [1]}}}, self.call(data("echo", {"a": [1]})))
        self.assertEqual({"reply": {"data": {}}}, self.call(data("Echo")))
        self.assertEqual({"reply": {"data": {"sum": 5}}}, self.call(data("sum", {"values": [2, 3]})))
        self.assertEqual({"reply": {"data": {"slept": 1}}}, self.call(data("sleep", {"ms": 1})))
        self.assertEqual({"error": {"status": 409, "message": "busy", "retry": False}},
                         self.call(data("fail", {"status": 409, "message": "busy"})))
        self.assertEqual({"error": {"status": 500, "message": "fail was asked to fail", "retry": False}},
                         self.call(data("fail", {})))

    def test_remind(self) -> None:
        answer = self.call(data("remind", {"text": "stretch", "ms": 60000}, requestId="r1"))
        timer = answer["timers"][0]
        self.assertEqual({"name": "remind:r1", "method": "remind", "data": {"text": "stretch", "ms": 60000}},
                         {k: v for k, v in timer.items() if k != "at"})
        self.assertEqual({"timer": "remind:r1", "dueAt": timer["at"]}, answer["reply"]["data"])
        due = data("remind", {"text": "stretch", "ms": 60000})
        due["message"].update(timer="remind:r1", scope="health")
        self.assertEqual({"posts": [{"text": "stretch", "scope": "health"}]}, self.call(due))
        self.assertEqual(400, self.call(data("remind", {"ms": 5}))["error"]["status"])

    def test_tick(self) -> None:
        self.assertEqual({"reply": {"data": {"ticking": True, "every": "1m30s"}},
                          "timers": [{"name": "tick", "every": "90s", "method": "tick"}]},
                         self.call(data("tick", {"seconds": 90})))
        due = data("tick", None, state={"count": 1, "acks": 0, "sleeps": 0, "ticks": 4})
        due["message"]["timer"] = "tick"
        self.assertEqual({"state": {"count": 1, "acks": 0, "sleeps": 0, "ticks": 5},
                          "posts": [{"text": "tick 5", "data": {"tick": 5}}]}, self.call(due))
        self.assertEqual({"reply": {"data": {"ticking": False}}, "cancelTimers": ["tick"]},
                         self.call(data("tick", {"stop": True})))

    def test_chat(self) -> None:
        self.assertEqual({"reply": {"text": "You said: hello"}}, self.call(chat("hello")))
        resp = self.client.send(chat("hello there", stream=True))
        self.assertEqual("application/x-ndjson", resp.headers["Content-Type"])
        self.assertEqual([{"delta": "You "}, {"delta": "said: "}, {"delta": "hello "}, {"delta": "there"},
                          {"reply": {"text": "You said: hello there"}}],
                         [json.loads(line) for line in resp.read().splitlines()])

    def test_file(self) -> None:
        content = b"a file's content\n"
        files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _file_handler(content))
        threading.Thread(target=files.serve_forever, args=(0.05,), daemon=True).start()
        self.addCleanup(files.server_close)
        self.addCleanup(files.shutdown)
        f = {"name": "notes.txt", "contentType": "text/plain", "size": len(content),
             "url": f"http://127.0.0.1:{files.server_address[1]}/files/notes.txt"}
        self.assertEqual({"reply": {"text": f"Received notes.txt ({len(content)} bytes)", "data": {
            "fileName": "notes.txt", "contentType": "text/plain", "size": len(content),
            "sha256": hashlib.sha256(content).hexdigest()}}},
            self.call(request("File", message={"text": "", "file": f})))
        self.assertEqual({"reply": {"text": "No file data received."}},
                         self.call(request("File", message={"text": "", "file": dict(f, size=0)})))

    def test_stops_on_sigterm(self) -> None:
        proc = subprocess.Popen([sys.executable, str(ECHO), "--port", "0", "--secret", SECRET],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        read_json(proc.stdout)
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
        self.assertEqual(0, proc.returncode, stderr)


def _file_handler(content: bytes) -> type[http.server.BaseHTTPRequestHandler]:
    class Files(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def log_message(self, *args: Any) -> None:
            pass
    return Files
