"""Signature checks: the functions on the Standard Webhooks example, and the server's 401s."""

from __future__ import annotations

import base64
import json
import time
import unittest

from agentbus_agent import SignatureError, decode_secret, new_secret, sign, verify

from .helpers import Client, data, new_agent, serve, signed

# The example of the Standard Webhooks specification.
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TS = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def spec_headers(**changes: str) -> dict[str, str]:
    h = {"webhook-id": SPEC_ID, "webhook-timestamp": str(SPEC_TS), "webhook-signature": SPEC_SIG}
    h.update(changes)
    return {k: v for k, v in h.items() if v}


class VerifyTest(unittest.TestCase):
    def test_accepts(self) -> None:
        cases = [
            ("the specification's example", spec_headers(), SPEC_TS),
            ("4 minutes later", spec_headers(), SPEC_TS + 4 * 60),
            ("by a clock 4 minutes behind", spec_headers(), SPEC_TS - 4 * 60),
            ("header names in another case", {k.upper(): v for k, v in spec_headers().items()}, SPEC_TS),
            ("a list with another version and another secret's signature",
             spec_headers(**{"webhook-signature": "v2,bm90IGl0 v1,bm90IGl0IGVpdGhlcg== " + SPEC_SIG}), SPEC_TS),
        ]
        for name, headers, now in cases:
            with self.subTest(name):
                verify(SPEC_SECRET, headers, SPEC_BODY, now=now)

    def test_rejects(self) -> None:
        cases = [
            ("a changed body", spec_headers(), b'{"test": 2432232315}', SPEC_TS, "no valid signature"),
            ("6 minutes old", spec_headers(), SPEC_BODY, SPEC_TS + 6 * 60, "more than 5 minutes"),
            ("6 minutes ahead", spec_headers(), SPEC_BODY, SPEC_TS - 6 * 60, "more than 5 minutes"),
            ("another id", spec_headers(**{"webhook-id": "msg_other"}), SPEC_BODY, SPEC_TS, "no valid signature"),
            ("a new timestamp on the old signature", spec_headers(**{"webhook-timestamp": str(SPEC_TS + 60)}),
             SPEC_BODY, SPEC_TS, "no valid signature"),
            ("no signature", spec_headers(**{"webhook-signature": ""}), SPEC_BODY, SPEC_TS, "missing"),
            ("no id", spec_headers(**{"webhook-id": ""}), SPEC_BODY, SPEC_TS, "missing"),
            ("another version only", spec_headers(**{"webhook-signature": "v2," + SPEC_SIG[3:]}), SPEC_BODY, SPEC_TS,
             "no valid signature"),
            ("a signature that is not base64", spec_headers(**{"webhook-signature": "v1,!!!"}), SPEC_BODY, SPEC_TS,
             "no valid signature"),
            ("a timestamp that is not a number", spec_headers(**{"webhook-timestamp": "-1614265330"}), SPEC_BODY,
             SPEC_TS, "not a number"),
        ]
        for name, headers, body, now, reason in cases:
            with self.subTest(name):
                with self.assertRaisesRegex(SignatureError, reason):
                    verify(SPEC_SECRET, headers, body, now=now)
        with self.subTest("another secret"), self.assertRaises(SignatureError):
            verify(new_secret(), spec_headers(), SPEC_BODY, now=SPEC_TS)

    def test_sign_makes_the_specifications_signature(self) -> None:
        self.assertEqual(SPEC_SIG, sign(SPEC_SECRET, SPEC_ID, SPEC_TS, SPEC_BODY))

    def test_decode_secret(self) -> None:
        self.assertEqual(32, len(decode_secret(new_secret())))
        for name, secret in [("no prefix", SPEC_SECRET[6:]), ("not base64", "whsec_not*base64"),
                             ("23 bytes", "whsec_" + base64.b64encode(bytes(23)).decode()),
                             ("65 bytes", "whsec_" + base64.b64encode(bytes(65)).decode())]:
            with self.subTest(name), self.assertRaises(ValueError):
                decode_secret(secret)


class ServerSignatureTest(unittest.TestCase):
    """The server answers a request it cannot verify 401, before decoding or running anything."""

    def setUp(self) -> None:
        self.calls = 0
        agent = new_agent()

        @agent.data("echo")
        def echo(ctx):  # type: ignore[no-untyped-def]
            self.calls += 1
            return ctx.data

        self.client = Client(self, serve(self, agent).port)

    def test_accepts_a_signed_request(self) -> None:
        self.assertEqual({"reply": {"data": {"a": 1}}}, self.client.call(self, data("echo", {"a": 1})))
        self.assertEqual(1, self.calls)

    def test_rejects(self) -> None:
        body = json.dumps(data("echo", {"a": 1})).encode()
        now = int(time.time())
        cases = [
            ("unsigned", {"Content-Type": "application/json"}, body, "missing"),
            ("another secret", signed(body, new_secret()), body, "no valid signature"),
            ("6 minutes old", signed(body, timestamp=now - 6 * 60), body, "more than 5 minutes"),
            ("a changed body", signed(body), body.replace(b'"a"', b'"b"'), "no valid signature"),
        ]
        for name, headers, sent, reason in cases:
            with self.subTest(name):
                a = self.client.post(sent, headers=headers)
                self.assertEqual(401, a.status)
                self.assertIn(reason, a.body.decode())
                self.assertFalse(a.will_close, "a refusal keeps the connection")
        self.assertEqual(0, self.calls)
