"""Helpers of the kit's tests: an agent's real server on 127.0.0.1 and a client that signs
requests as agentbus does, over one keep-alive connection."""

from __future__ import annotations

import http.client
import json
import time
import unittest
import uuid
from dataclasses import dataclass
from typing import Any

from agentbus_agent import Agent, AgentServer, new_secret, sign

SECRET = new_secret()


def request(type_: str = "Data", *, message: dict[str, Any] | None = None, webhook: dict[str, Any] | None = None,
            **fields: Any) -> dict[str, Any]:
    """A protocol 1 request object as agentbus sends it; fields override the defaults."""
    r: dict[str, Any] = {
        "protocol": 1, "type": type_, "agent": "Test", "tenantId": "default",
        "workflowId": "default:Test:Supervisor Workflow:shop", "workflowType": "Supervisor Workflow",
        "activation": "shop", "runId": "run-1", "hostId": "host-1", "participantId": "ada", "requestId": "req-1", "attempt": 1,
        "deadline": "2099-01-01T00:00:30.000Z", "stream": False, "state": None, "message": message,
        "webhook": webhook, "journal": [],
    }
    r.update(fields)
    return r


def data(method: str, params: Any = None, **fields: Any) -> dict[str, Any]:
    """A Data request calling method with params."""
    return request("Data", message={"text": method, "method": method, "data": params, "scope": "", "hint": "",
                                    "timer": ""}, **fields)


def chat(text: str, **fields: Any) -> dict[str, Any]:
    """A Chat request saying text; message, when given, replaces the message."""
    fields.setdefault("message", {"text": text, "scope": "", "hint": "", "timer": ""})
    return request("Chat", **fields)


def signed(body: bytes, secret: str = SECRET, msg_id: str | None = None, timestamp: int | None = None) -> dict[str, str]:
    """The headers agentbus sends with body."""
    msg_id = msg_id or "msg_" + uuid.uuid4().hex
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {"Content-Type": "application/json", "Agentbus-Protocol": "1", "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp), "webhook-signature": sign(secret, msg_id, timestamp, body)}


@dataclass
class Answer:
    """An HTTP answer as the client read it."""

    status: int
    headers: http.client.HTTPMessage
    body: bytes
    will_close: bool

    def json(self) -> Any:
        return json.loads(self.body)


class Client:
    """Posts to an agent's server over one keep-alive HTTP/1.1 connection."""

    def __init__(self, test: unittest.TestCase, port: int, secret: str = SECRET) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.secret = secret
        test.addCleanup(self.conn.close)

    def send(self, obj: Any, *, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        """Posts obj (bytes as they are, else as JSON), signed unless headers are given, and
        returns the response unread."""
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.conn.request("POST", "/agentbus", body=body, headers=signed(body, self.secret) if headers is None else headers)
        return self.conn.getresponse()

    def post(self, obj: Any, *, headers: dict[str, str] | None = None) -> Answer:
        """Posts obj and reads the whole answer."""
        resp = self.send(obj, headers=headers)
        return Answer(resp.status, resp.headers, resp.read(), resp.will_close)

    def call(self, test: unittest.TestCase, obj: Any) -> dict[str, Any]:
        """Posts a request that must be answered 200 with a JSON object, and returns it."""
        a = self.post(obj)
        test.assertEqual(200, a.status, a.body)
        test.assertEqual("application/json", a.headers["Content-Type"])
        test.assertEqual(str(len(a.body)), a.headers["Content-Length"])
        out = a.json()
        test.assertIsInstance(out, dict)
        return out


def serve(test: unittest.TestCase, agent: Agent) -> AgentServer:
    """Serves agent on a free port of 127.0.0.1 until the test ends."""
    srv = agent.server("127.0.0.1", 0).start()
    test.addCleanup(srv.stop, 5)
    return srv


def new_agent(name: str = "Test") -> Agent:
    """An agent with the tests' secret and no handlers."""
    return Agent(name, SECRET)
