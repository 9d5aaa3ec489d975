"""examples/echo.py, run as its own process the way its README runs it."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
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
        self.assertEqual(["echo", "verify", "status", "sleep", "count", "complete", "state", "host"], reg["webhooks"])
        self.assertEqual(["echo", "sum", "count", "history", "sleep", "steps", "ask", "answer", "fail", "remind", "tick", "relay"],
                         [m["name"] for m in reg["methods"]])
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
        # As Go reads them: an optional sign, JSON keys ignoring case.
        self.assertEqual((201, "application/json", {"status": 201}), self.response(webhook("status", params={"code": "+201"})))
        self.assertEqual((200, text, "Q"), self.response(webhook("verify", b'{"Challenge":"Q"}')))
        self.assertEqual((400, text, "missing challenge"), self.response(webhook("verify", b'{"challenge":5}')))
        # JSON as Go writes it: <, > and & escaped.
        self.assertEqual('{"params":{},"body":"\\u003ca\\u003e \\u0026","size":5,"sha256":"%s"}' % hashlib.sha256(b"<a> &").hexdigest(),
                         self.call(webhook("echo", b"<a> &"))["response"]["body"])

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

    def test_complete_and_host(self) -> None:
        state = {"count": 2, "acks": 0, "sleeps": 0}
        done = self.call(webhook("complete", state=state))
        self.assertEqual({"response": {"status": 200, "contentType": "application/json",
                                       "body": '{"completed":true,"runId":"run-1"}'}, "complete": True}, done,
                         "it completes the instance and leaves its state")
        self.assertNotIn("complete", self.call(webhook("count")), "count does not complete")
        self.assertEqual({"response": {"status": 200, "contentType": "application/json",
                                       "body": '{"hostId":"host-9","runId":"run-2"}'}},
                         self.call(webhook("host", hostId="host-9", runId="run-2", state=state)),
                         "host changes nothing")

    def test_data_methods(self) -> None:
        self.assertEqual({"reply": {"data": {"a": [1]}}}, self.call(data("echo", {"a": [1]})))
        self.assertEqual({"reply": {"data": {}}}, self.call(data("Echo")))
        self.assertEqual({"reply": {"data": {"sum": 5}}}, self.call(data("sum", {"values": [2, 3]})))
        self.assertEqual({"reply": {"data": {"slept": 1}}}, self.call(data("sleep", {"ms": 1})))
        self.assertEqual({"error": {"status": 409, "message": "busy", "retry": False}},
                         self.call(data("fail", {"status": 409, "message": "busy"})))
        self.assertEqual({"error": {"status": 500, "message": "fail was asked to fail", "retry": False}},
                         self.call(data("fail", {})))

    def steps(self, req: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Sends req as agentbus does, again after each step with the step in its journal;
        returns the journal and the final answer."""
        journal: list[dict[str, Any]] = []
        while True:
            answer = self.call(dict(req, journal=journal))
            if "step" not in answer:
                return journal, answer
            journal = journal + [answer["step"]]

    def test_steps(self) -> None:
        state = {"count": 1, "acks": 0, "sleeps": 0, "steps": [4]}
        journal, answer = self.steps(data("steps", {"n": 3, "sleepMs": 1}, attempt=2, hostId="host-2", state=state))
        ran = {"attempt": 2, "hostId": "host-2"}
        self.assertEqual([{"name": f"step {i}", "result": ran} for i in (1, 2, 3)], journal)
        self.assertEqual({"reply": {"data": {"steps": 3, "attempt": 2, "ran": [ran] * 3}},
                          "state": {"count": 1, "acks": 0, "sleeps": 0, "steps": [5, 1, 1]}}, answer,
                         "the final answer counts each step once")
        with self.subTest("a step recorded by an earlier attempt comes back as recorded"):
            earlier = {"name": "step 1", "result": {"attempt": 1, "hostId": "host-1"}}
            answer = self.call(data("steps", {"n": 2}, attempt=2, hostId="host-2", journal=[earlier]))
            self.assertEqual({"step": {"name": "step 2", "result": ran}}, answer)
        self.assertEqual({"runId": "run-1", "state": {"count": 1, "acks": 0, "sleeps": 0, "steps": [5, 1, 1]}},
                         self.response(webhook("state", state={"count": 1, "acks": 0, "sleeps": 0, "steps": [5, 1, 1]}))[2])
        bounds = "steps needs n from 1 to 100 and sleepMs from 0 to 60000, n times sleepMs at most 300000"
        for p in [{"n": 0}, {"n": 101}, {"n": 1, "sleepMs": 60001}, {"n": 6, "sleepMs": 60000}, {"n": 1, "sleepMs": -1}]:
            with self.subTest(p):
                self.assertEqual({"error": {"status": 400, "message": bounds, "retry": False}}, self.call(data("steps", p)))

    def test_ask(self) -> None:
        self.assertEqual({"wait": {"name": "answer", "chat": True, "methods": ["answer"], "signals": ["answer"]}},
                         self.call(data("ask", {"question": "Which colour?"})))
        self.assertEqual({"wait": {"name": "answer", "chat": True, "methods": ["answer"], "signals": ["answer"], "timeoutMs": 60000}},
                         self.call(data("ask", {"question": "Which colour?", "timeoutS": 60})))
        at = "2099-01-01T00:00:00Z"
        for event, want in [
            ({"type": "chat", "text": "blue", "participantId": "ada", "at": at}, {"answer": "blue", "by": "ada"}),
            ({"type": "data", "method": "answer", "data": {"colour": "red"}, "participantId": "bob", "at": at},
             {"answer": {"colour": "red"}, "by": "bob"}),
            ({"type": "signal", "method": "answer", "data": "green", "at": at}, {"answer": "green", "by": ""}),
            ({"type": "timeout", "at": at}, {}),
        ]:
            with self.subTest(event["type"]):
                answer = self.call(data("ask", {"question": "Which colour?"}, journal=[{"name": "answer", "result": event}]))
                self.assertEqual({"reply": {"data": {"question": "Which colour?", "type": event["type"], **want}}}, answer)
        self.assertEqual({"error": {"status": 400, "message": "ask needs a question of 1 to 4096 bytes of text", "retry": False}},
                         self.call(data("ask", {"question": "é" * 2049})))
        self.assertEqual({"error": {"status": 400, "message": "ask's timeoutS is 1 to 518400", "retry": False}},
                         self.call(data("ask", {"question": "?", "timeoutS": 518401})))
        self.assertEqual({"error": {"status": 409, "message": "nothing was asked: answer ends the wait of an ask in the same conversation",
                                    "retry": False}}, self.call(data("answer", {"colour": "blue"})))

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
        started = self.call(data("tick", {"seconds": 90}))
        self.assertEqual({"reply": {"data": {"ticking": True, "every": "1m30s"}},
                          "state": {"count": 0, "acks": 0, "sleeps": 0, "ticking": True},
                          "timers": [{"name": "tick", "every": "90s", "method": "tick"}]}, started)
        due = data("tick", None, state={"count": 1, "acks": 0, "sleeps": 0, "ticks": 4, "ticking": True})
        due["message"]["timer"] = "tick"
        self.assertEqual({"state": {"count": 1, "acks": 0, "sleeps": 0, "ticks": 5, "ticking": True},
                          "posts": [{"text": "tick 5", "data": {"tick": 5}}]}, self.call(due))
        # The state webhook shows Echo's counters only.
        self.assertEqual({"runId": "run-1", "state": {"count": 1, "acks": 0, "sleeps": 0, "ticks": 4}},
                         self.response(webhook("state", state=due["state"]))[2])
        self.assertEqual({"reply": {"data": {"ticking": False, "stopped": True}},
                          "state": {"count": 0, "acks": 0, "sleeps": 0, "ticking": False}, "cancelTimers": ["tick"]},
                         self.call(data("tick", {"stop": True}, state=started["state"])))
        self.assertEqual({"reply": {"data": {"ticking": False, "stopped": False}}, "cancelTimers": ["tick"]},
                         self.call(data("tick", {"stop": True})))
        self.assertEqual({"error": {"status": 400, "message": "seconds is at least 1", "retry": False}},
                         self.call(data("tick", {"seconds": -1})))

    def test_bad_parameters(self) -> None:
        """Parameters of the wrong kind fail as Go's Echo decodes them, with its messages."""
        for method, params, message in [
            ("sum", {"values": "x"}, "field values must be a JSON array"),
            ("sum", {"values": [1, "a"]}, "field values must be a JSON number"),
            ("sleep", {"ms": 1.5}, "field ms must be a JSON whole number"),
            ("fail", {"status": "x"}, "field status must be a JSON whole number"),
            ("tick", {"stop": 1}, "field stop must be a JSON boolean"),
            ("echo", [1], "must be a JSON object"),
        ]:
            with self.subTest(method=method, params=params):
                self.assertEqual({"error": {"status": 400, "message": f"bad parameters for {method}: {message}", "retry": False}},
                                 self.call(data(method, params)))
        self.assertEqual({"reply": {"data": {"sum": 3}}}, self.call(data("sum", {"Values": [1, None, 2]})),
                         "keys match ignoring case; null is 0")

    def test_chat(self) -> None:
        self.assertEqual({"reply": {"text": "You said: hello"}}, self.call(chat("hello")))
        resp = self.client.send(chat("hello  there\n", stream=True))
        self.assertEqual("application/x-ndjson", resp.headers["Content-Type"])
        self.assertEqual([{"delta": "You "}, {"delta": "said: "}, {"delta": "hello  "}, {"delta": "there\n"},
                          {"reply": {"text": "You said: hello  there\n"}}],
                         [json.loads(line) for line in resp.read().splitlines()])

    def test_chat_calls_a_method(self) -> None:
        self.assertEqual({"reply": {"text": 'sum returned {"sum":5}'}}, self.call(chat('call sum {"values":[2,3]}')))
        self.assertEqual({"reply": {"text": 'count returned {"count":3,"runId":"run-1"}'},
                          "state": {"count": 3, "acks": 0, "sleeps": 0}},
                         self.call(chat("call count", state={"count": 2})))
        self.assertEqual({"reply": {"text": 'fail returned {"error":{"message":"no","status":409}}'}},
                         self.call(chat('call fail {"status":409,"message":"no"}')))
        # A method that makes steps: the chat stops at each, and answers once they are recorded.
        self.assertEqual({"step": {"name": "step 1", "result": {"attempt": 1, "hostId": "host-1"}}},
                         self.call(chat('call steps {"n":1}')))
        self.assertEqual({"reply": {"text": 'steps returned {"attempt":1,"ran":[{"attempt":1,"hostId":"host-1"}],"steps":1}'},
                          "state": {"count": 0, "acks": 0, "sleeps": 0, "steps": [1]}},
                         self.call(chat('call steps {"n":1}', journal=[{"name": "step 1", "result": {"attempt": 1, "hostId": "host-1"}}])))
        # Anything else is echoed: a method it does not have, arguments that are no JSON object.
        for text in ["call nothing {}", "call sum [1]", "call sum {"]:
            self.assertEqual({"reply": {"text": "You said: " + text}}, self.call(chat(text)))

    def test_history(self) -> None:
        self.assertEqual({"history": {"name": "history", "size": 2, "scope": "shop"}},
                         self.call(data("history", {"size": 2, "scope": "shop"})))
        self.assertEqual({"history": {"name": "history", "size": 20}}, self.call(data("history", {"size": -1})), "the default")
        self.assertEqual({"history": {"name": "history", "size": 100}}, self.call(data("history", {"size": 500})), "at most 100")
        msgs = [{"text": "You said: first", "direction": 1}, {"text": "first", "direction": 0}]
        self.assertEqual({"reply": {"data": {"messages": msgs}}},
                         self.call(data("history", {"size": 2}, journal=[{"name": "history", "result": {"messages": msgs}}])))
        self.assertEqual({"error": {"status": 400, "message": "bad parameters for history: field size must be a JSON whole number", "retry": False}},
                         self.call(data("history", {"size": "2"})))

    def test_relay(self) -> None:
        self.assertEqual({"call": {"name": "relay", "agent": "Test", "activation": "b", "method": "count"}},
                         self.call(data("relay", {"activation": "b", "method": "count"})))
        self.assertEqual({"call": {"name": "relay", "agent": "Other", "workflowType": "Conversational", "activation": "b",
                                   "method": "sum", "params": {"values": [1]}}},
                         self.call(data("relay", {"agent": "Other", "workflowType": "Conversational", "activation": "b",
                                                  "method": "sum", "params": {"values": [1]}})))
        wf = "default:Echo:Supervisor Workflow:b"
        self.assertEqual({"call": {"name": "relay", "workflowId": wf, "method": "count"}},
                         self.call(data("relay", {"workflowId": wf, "method": "count"})))
        journal = [{"name": "relay", "result": {"count": 1, "runId": "r"}}]
        self.assertEqual({"reply": {"data": {"result": {"count": 1, "runId": "r"}}}},
                         self.call(data("relay", {"activation": "b", "method": "count"}, journal=journal)))
        failed = [{"name": "relay", "error": {"status": 404, "message": "agent \"Echo\" has no Data method \"nope\""}}]
        self.assertEqual({"error": {"status": 404, "message": failed[0]["error"]["message"], "retry": False}},
                         self.call(data("relay", {"activation": "b", "method": "nope"}, journal=failed)))
        self.assertEqual({"error": {"status": 400, "message": "relay needs a method", "retry": False}},
                         self.call(data("relay", {"activation": "b"})))

    def test_file(self) -> None:
        content = b"a file's content\n"
        f = {"name": "notes.txt", "contentType": "text/plain", "size": len(content),
             "sha256": hashlib.sha256(content).hexdigest(), "content": base64.b64encode(content).decode()}
        self.assertEqual({"reply": {"text": f"Received notes.txt ({len(content)} bytes)", "data": {
            "fileName": "notes.txt", "contentType": "text/plain", "size": len(content),
            "sha256": hashlib.sha256(content).hexdigest()}}},
            self.call(request("File", message={"text": "", "file": f})))
        self.assertEqual({"reply": {"text": "No file data received."}},
                         self.call(request("File", message={"text": "", "file": {"name": "x", "size": 0}})))
        self.assertEqual({"reply": {"text": "Invalid file format. Please ensure the file is base64 encoded."}},
                         self.call(request("File", message={"text": "", "file": {"name": "x", "size": 0, "invalid": True}})))

    def test_stops_on_sigterm(self) -> None:
        proc = subprocess.Popen([sys.executable, str(ECHO), "--port", "0", "--secret", SECRET],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        read_json(proc.stdout)
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
        self.assertEqual(0, proc.returncode, stderr)
