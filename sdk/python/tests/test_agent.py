"""Dispatch, answers and failures, through the agent's real server."""

from __future__ import annotations

import base64
import datetime as dt
import json
import unittest
from typing import Any

from agentbus_agent import Agent, Context, Fail, Reply, Response, Retry

from .helpers import SECRET, Client, chat, data, new_agent, request, serve


class DispatchTest(unittest.TestCase):
    """Each request type reaches its handler, which sees the request's fields."""

    def setUp(self) -> None:
        self.seen: list[Context] = []
        agent = new_agent()

        @agent.chat
        def on_chat(ctx: Context) -> Any:
            self.seen.append(ctx)
            return "You said: " + ctx.text

        @agent.file
        def on_file(ctx: Context) -> Any:
            self.seen.append(ctx)
            return Reply(f"got {ctx.file.name}" if ctx.file else "no file")

        @agent.data("Sum", description="Adds numbers.")
        def on_sum(ctx: Context) -> Any:
            self.seen.append(ctx)
            return {"sum": sum(ctx.data["values"])}

        @agent.data("both")
        def on_both(ctx: Context) -> Any:
            return Reply("six", {"n": 6})

        @agent.data("nothing")
        def on_nothing(ctx: Context) -> Any:
            return None

        @agent.webhook("hook")
        def on_hook(ctx: Context) -> Any:
            self.seen.append(ctx)
            return Response(201, ctx.body, ctx.content_type)

        @agent.webhook("plain")
        def on_plain(ctx: Context) -> Any:
            return {"params": ctx.params}

        self.client = Client(self, serve(self, agent).port)

    def test_chat(self) -> None:
        answer = self.client.call(self, chat("hi", state={"count": 2}, attempt=3, requestId="r-9",
                                             message={"text": "hi", "scope": "orders", "hint": "short", "timer": "t"}))
        self.assertEqual({"reply": {"text": "You said: hi"}}, answer)
        ctx = self.seen[0]
        self.assertEqual(("Chat", "hi", "orders", "short", "t"), (ctx.type, ctx.text, ctx.scope, ctx.hint, ctx.timer))
        self.assertEqual(({"count": 2}, 3, "r-9", "ada"), (ctx.state, ctx.attempt, ctx.request_id, ctx.participant))
        self.assertEqual(("default", "shop", "run-1", "host-1", "Supervisor Workflow"),
                         (ctx.tenant_id, ctx.activation, ctx.run_id, ctx.host_id, ctx.workflow_type))
        self.assertEqual(dt.datetime(2099, 1, 1, 0, 0, 30, tzinfo=dt.timezone.utc), ctx.deadline)
        self.assertGreater(ctx.remaining() or 0, 0)
        self.assertFalse(ctx.stream)

    def test_data(self) -> None:
        self.assertEqual({"reply": {"data": {"sum": 6}}}, self.client.call(self, data("sum", {"values": [1, 2, 3]})))
        self.assertEqual("sum", self.seen[0].method)
        with self.subTest("the method matches case-insensitively, and is the text when method is empty"):
            r = data("SUM", {"values": [1]})
            r["message"]["method"] = ""
            self.assertEqual({"reply": {"data": {"sum": 1}}}, self.client.call(self, r))
        with self.subTest("text and data"):
            self.assertEqual({"reply": {"text": "six", "data": {"n": 6}}}, self.client.call(self, data("both")))
        with self.subTest("no reply"):
            self.assertEqual({}, self.client.call(self, data("nothing")))

    def test_file(self) -> None:
        f = {"name": "a.txt", "contentType": "text/plain", "size": 3, "sha256": "ba7816bf", "content": "YWJj"}
        answer = self.client.call(self, request("File", message={"text": "caption", "file": f}))
        self.assertEqual({"reply": {"text": "got a.txt"}}, answer)
        ctx = self.seen[0]
        self.assertEqual(("a.txt", "text/plain", 3, "ba7816bf", b"abc", False),
                         (ctx.file.name, ctx.file.content_type, ctx.file.size, ctx.file.sha256, ctx.file.content,
                          ctx.file.invalid))
        self.assertEqual(b"abc", ctx.file.read())
        self.assertEqual("caption", ctx.text)

        # A file over 4 MiB comes without content; one sent without valid content has none either.
        self.client.call(self, request("File", message={"file": {"name": "big", "size": 5 << 20, "sha256": "00"}}))
        self.assertIsNone(self.seen[1].file.content)
        with self.assertRaises(ValueError):
            self.seen[1].file.read()
        self.client.call(self, request("File", message={"file": {"name": "x", "size": 0, "invalid": True}}))
        self.assertEqual((True, b""), (self.seen[2].file.invalid, self.seen[2].file.read()))
        bad = self.client.post(request("File", message={"file": {"name": "x", "size": 1, "content": "%%"}}))
        self.assertEqual(400, bad.status, "content that is not base64 is no protocol request")

    def test_webhook(self) -> None:
        binary = bytes(range(256))
        answer = self.client.call(self, request("Webhook", webhook={
            "method": "hook", "params": {"order": "17"}, "headers": {"X-Trace": "abc"},
            "contentType": "application/octet-stream", "body": base64.b64encode(binary).decode()}))
        self.assertEqual({"response": {"status": 201, "contentType": "application/octet-stream",
                                       "bodyBase64": base64.b64encode(binary).decode()}}, answer)
        ctx = self.seen[0]
        self.assertEqual(("Webhook", "hook", {"order": "17"}), (ctx.type, ctx.method, ctx.params))
        self.assertEqual(binary, ctx.body)
        self.assertEqual("abc", ctx.header("x-trace"))
        with self.subTest("text body, params and headers given as lists"):
            answer = self.client.call(self, request("Webhook", webhook={
                "method": "hook", "params": {"order": ["17", "18"]}, "headers": {"Accept": ["a", "b"]},
                "contentType": "text/plain", "body": base64.b64encode("héllo".encode()).decode()}))
            self.assertEqual({"response": {"status": 201, "contentType": "text/plain",
                                           "bodyBase64": base64.b64encode("héllo".encode()).decode()}}, answer)
            self.assertEqual(({"order": "17"}, "a, b"), (self.seen[1].params, self.seen[1].header("accept")))
        with self.subTest("a returned value is JSON"):
            answer = self.client.call(self, request("Webhook", webhook={"method": "plain", "params": {"a": "1"}}))
            self.assertEqual({"response": {"status": 200, "contentType": "application/json",
                                           "body": '{"params":{"a":"1"}}'}}, answer)

    def test_unknown_methods(self) -> None:
        no_such = {"error": {"status": 404, "message": "the agent has no such method", "retry": False}}
        self.assertEqual(no_such, self.client.call(self, data("nope")))
        self.assertEqual(no_such, self.client.call(self, request("Webhook", webhook={"method": "Hook"})),
                         "webhook methods match exactly")
        bare = Client(self, serve(self, new_agent("Bare")).port)
        self.assertEqual(no_such, bare.call(self, chat("hi")))
        self.assertEqual(no_such, bare.call(self, request("File", message={"file": None})))


class EffectsTest(unittest.TestCase):
    """State, posts, timers and tells go into the answer."""

    def setUp(self) -> None:
        self.agent = new_agent()
        self.client = Client(self, serve(self, self.agent).port)

    def answer(self, handler: Any, req: dict[str, Any] | None = None) -> dict[str, Any]:
        name = f"m{len(self.agent._methods)}"
        self.agent.data(name)(handler)
        return self.client.call(self, req or data(name))

    def test_state(self) -> None:
        def count(ctx: Context) -> Any:
            n = (ctx.state or {}).get("count", 0) + 1
            ctx.set_state({"count": n})
            return n
        self.assertEqual({"reply": {"data": 3}, "state": {"count": 3}},
                         self.answer(count, data("m0", state={"count": 2})))
        self.assertEqual({"reply": {"text": "same"}}, self.answer(lambda ctx: "same"), "no set_state, no state")

        def clear(ctx: Context) -> Any:
            ctx.set_state(None)
        self.assertEqual({"state": None}, self.answer(clear))

    def test_posts_timers_tells(self) -> None:
        at = dt.datetime(2099, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)

        def act(ctx: Context) -> Any:
            ctx.post("ready")
            ctx.post(data={"n": 1}, participant="bob", scope="orders", hint="h")
            ctx.set_timer("once", after_ms=60000, method="remind", data={"text": "stretch"})
            ctx.set_timer("at", at=at, text="wake up")
            ctx.set_timer("every", every=dt.timedelta(minutes=1), method="tick")
            ctx.set_timer("half", every=dt.timedelta(milliseconds=1500), method="tick")
            ctx.set_timer("cron", cron="0 30 9 * * MON-FRI", time_zone="Europe/Paris", method="tick")
            ctx.cancel_timer("old")
            ctx.tell(activation="b", method="count", data={})
            ctx.tell("Echo", workflow_id="default:Echo:Supervisor Workflow:c", text="hello")
        self.assertEqual({
            "posts": [{"text": "ready"}, {"participantId": "bob", "data": {"n": 1}, "scope": "orders", "hint": "h"}],
            "timers": [
                {"name": "once", "afterMs": 60000, "method": "remind", "data": {"text": "stretch"}},
                {"name": "at", "at": "2099-01-02T03:04:05+00:00", "text": "wake up"},
                {"name": "every", "every": "60s", "method": "tick"},
                {"name": "half", "every": "1500ms", "method": "tick"},
                {"name": "cron", "cron": "0 30 9 * * MON-FRI", "timeZone": "Europe/Paris", "method": "tick"},
            ],
            "cancelTimers": ["old"],
            "tells": [{"activation": "b", "type": "Data", "method": "count", "data": {}},
                      {"agent": "Echo", "workflowId": "default:Echo:Supervisor Workflow:c", "type": "Chat",
                       "text": "hello"}],
        }, self.answer(act))

    def test_complete(self) -> None:
        def finish(ctx: Context) -> Any:
            ctx.set_state({"done": True})
            ctx.post("bye")
            ctx.complete()
            return ctx.host_id
        self.assertEqual({"reply": {"text": "host-7"}, "state": {"done": True}, "posts": [{"text": "bye"}], "complete": True},
                         self.answer(finish, data("m0", hostId="host-7")))
        self.assertNotIn("complete", self.answer(lambda ctx: "on"), "without complete() the instance goes on")

        def webhook(ctx: Context) -> Any:
            ctx.complete()
            ctx.complete()
        self.agent.webhook("done")(webhook)
        self.assertEqual({"response": {"status": 200}, "complete": True},
                         self.client.call(self, request("Webhook", webhook={"method": "done"})))

        def streamed(ctx: Context) -> Any:
            ctx.delta("last ")
            ctx.delta("words")
            ctx.complete()
        self.agent.chat(streamed)
        a = self.client.post(chat("hi", stream=True))
        self.assertEqual("application/x-ndjson", a.headers["Content-Type"])
        self.assertEqual({"reply": {"text": "last words"}, "complete": True}, json.loads(a.body.splitlines()[-1]),
                         "a streamed answer completes in its last line")

    def test_host_id_of_an_older_host(self) -> None:
        req = data("m0")
        del req["hostId"]
        self.assertEqual({"reply": {"text": ""}}, self.answer(lambda ctx: ctx.host_id, req))

    def test_one_answer_names_a_timer_once(self) -> None:
        def reschedule(ctx: Context) -> Any:
            ctx.set_timer("a", after_ms=1, text="first")
            ctx.cancel_timer("a")  # cancels the set above, and the instance's timer
            ctx.cancel_timer("b")
            ctx.set_timer("b", after_ms=2, text="again")  # replaces: no cancel needed
        self.assertEqual({"timers": [{"name": "b", "afterMs": 2, "text": "again"}], "cancelTimers": ["a"]},
                         self.answer(reschedule))

    def test_invalid_effects_fail_the_handler(self) -> None:
        for name, act in [
            ("two schedules", lambda ctx: ctx.set_timer("t", after_ms=1, cron="* * * * * *", text="x")),
            ("no message", lambda ctx: ctx.set_timer("t", after_ms=1)),
            ("naive at", lambda ctx: ctx.set_timer("t", at=dt.datetime(2099, 1, 1), text="x")),
            ("tell without a target", lambda ctx: ctx.tell(method="m")),
            ("empty post", lambda ctx: ctx.post()),
        ]:
            with self.subTest(name), self.assertLogs("agentbus_agent", "ERROR"):
                self.assertEqual({"error": {"status": 500, "message": "the handler failed", "retry": False}},
                                 self.answer(act))


class FailureTest(unittest.TestCase):
    """Fail, Retry and other exceptions become the answer's error, dropping the effects."""

    def setUp(self) -> None:
        agent = new_agent()

        def effects(ctx: Context) -> None:
            ctx.set_state({"x": 1})
            ctx.post("p")
            ctx.set_timer("t", after_ms=1, text="x")
            ctx.tell(activation="b", text="t")
            ctx.complete()

        @agent.data("fail")
        def fail(ctx: Context) -> Any:
            effects(ctx)
            raise Fail(ctx.data["status"], "no such order")

        @agent.data("retry")
        def retry(ctx: Context) -> Any:
            effects(ctx)
            raise Retry("the model did not answer")

        @agent.data("crash")
        def crash(ctx: Context) -> Any:
            effects(ctx)
            raise KeyError("secret detail")

        @agent.data("unencodable")
        def unencodable(ctx: Context) -> Any:
            return {"set": {1, 2}}

        @agent.webhook("fail")
        def fail_webhook(ctx: Context) -> Any:
            raise Fail(409, "conflict")

        self.client = Client(self, serve(self, agent).port)

    def test_fail(self) -> None:
        self.assertEqual({"error": {"status": 422, "message": "no such order", "retry": False}},
                         self.client.call(self, data("fail", {"status": 422})))
        self.assertEqual({"error": {"status": 500, "message": "no such order", "retry": False}},
                         self.client.call(self, data("fail", {"status": 302})), "a status outside 400-599 is 500")
        self.assertEqual({"error": {"status": 409, "message": "conflict", "retry": False}},
                         self.client.call(self, request("Webhook", webhook={"method": "fail"})))

    def test_retry(self) -> None:
        self.assertEqual({"error": {"status": 503, "message": "the model did not answer", "retry": True}},
                         self.client.call(self, data("retry")))

    def test_exception(self) -> None:
        for method, cause in [("crash", "KeyError: 'secret detail'"), ("unencodable", "set is not JSON serializable")]:
            with self.subTest(method), self.assertLogs("agentbus_agent", "ERROR") as logs:
                answer = self.client.call(self, data(method))
                self.assertEqual({"error": {"status": 500, "message": "the handler failed", "retry": False}}, answer)
                self.assertIn(cause, logs.output[0], "the cause is logged, never answered")


class StepsTest(unittest.TestCase):
    """Durable steps and waits: replayed from the journal, a new one stops the handler with the
    step to record or the wait."""

    def setUp(self) -> None:
        self.agent = new_agent()
        self.client = Client(self, serve(self, self.agent).port)
        self.runs: list[str] = []

    def host(self, method: str, params: Any = None, **fields: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Sends the request as agentbus does: again after each step the answer asks to record,
        with the step in its journal. Returns the journal and the last answer."""
        journal: list[dict[str, Any]] = []
        for _ in range(20):
            answer = self.client.call(self, data(method, params, journal=journal, **fields))
            if "step" not in answer:
                return journal, answer
            self.assertEqual({"step"}, set(answer), "a step's answer holds the step only")
            journal = journal + [answer["step"]]
        self.fail("more than 20 steps")

    def test_steps_replay(self) -> None:
        @self.agent.data("three")
        def three(ctx: Context) -> Any:
            ctx.set_state({"before": True})  # made again on every run: only the final answer's counts
            results = []
            for i in range(1, 4):
                def run(i: int = i) -> Any:
                    self.runs.append(f"step {i}")
                    return {"i": i, "attempt": ctx.attempt}
                results.append(ctx.step(f"step {i}", run))
            ctx.post("done")
            return {"ran": results}
        journal, answer = self.host("three", attempt=2)
        self.assertEqual(["step 1", "step 2", "step 3"], self.runs, "each step's function ran once")
        self.assertEqual([{"name": f"step {i}", "result": {"i": i, "attempt": 2}} for i in range(1, 4)], journal)
        self.assertEqual({"reply": {"data": {"ran": [{"i": i, "attempt": 2} for i in range(1, 4)]}},
                          "state": {"before": True}, "posts": [{"text": "done"}]}, answer)
        with self.subTest("the journal's result counts, not what the function would give"):
            journal[1] = {"name": "step 2", "result": "from another run"}
            ran = self.client.call(self, data("three", journal=journal))["reply"]["data"]["ran"]
            self.assertEqual("from another run", ran[1])
            self.assertEqual(3, len(self.runs), "no step ran again")

    def test_step_failure_is_recorded(self) -> None:
        @self.agent.data("failing")
        def failing(ctx: Context) -> Any:
            def refuse() -> Any:
                self.runs.append("refuse")
                raise Fail(409, "taken")
            try:
                ctx.step("reserve", refuse)
            except Fail as e:
                return {"refused": e.status, "message": e.message}
        journal, answer = self.host("failing")
        self.assertEqual([{"name": "reserve", "error": {"status": 409, "message": "taken"}}], journal)
        self.assertEqual({"reply": {"data": {"refused": 409, "message": "taken"}}}, answer)
        self.assertEqual(["refuse"], self.runs)

    def test_step_exceptions_go_through(self) -> None:
        @self.agent.data("flaky")
        def flaky(ctx: Context) -> Any:
            return ctx.step("call", lambda: (_ for _ in ()).throw(Retry("the model did not answer")))

        @self.agent.data("crash")
        def crash(ctx: Context) -> Any:
            return ctx.step("call", lambda: {}["missing"])
        self.assertEqual({"error": {"status": 503, "message": "the model did not answer", "retry": True}},
                         self.client.call(self, data("flaky")))
        with self.assertLogs("agentbus_agent", "ERROR"):
            self.assertEqual({"error": {"status": 500, "message": "the handler failed", "retry": False}},
                             self.client.call(self, data("crash")))

    def test_swallowing_handlers_still_step(self) -> None:
        @self.agent.data("broad")
        def broad(ctx: Context) -> Any:
            try:
                return ctx.step("one", lambda: 1)
            except Exception:
                return "swallowed"

        @self.agent.data("bare")
        def bare(ctx: Context) -> Any:
            try:
                ctx.step("one", lambda: 1)
            except BaseException:  # noqa: B036 - what the test is about
                pass
            ctx.step("two", lambda: 2)  # stops again at once: the first step is the answer
            raise Fail(400, "too late")
        self.assertEqual({"step": {"name": "one", "result": 1}}, self.client.call(self, data("broad")))
        self.assertEqual({"step": {"name": "one", "result": 1}}, self.client.call(self, data("bare")))

    def test_mismatch_fails_the_request(self) -> None:
        @self.agent.data("m")
        def m(ctx: Context) -> Any:
            try:
                return ctx.step("other", lambda: 1)
            except Exception:
                return "swallowed"
        with self.assertLogs("agentbus_agent", "ERROR"):
            answer = self.client.call(self, data("m", journal=[{"name": "first", "result": 1}]))
        self.assertEqual(500, answer["error"]["status"])
        self.assertIn("step 1 is 'other' in this run, but 'first' in the journal", answer["error"]["message"])

    def test_wait_and_sleep(self) -> None:
        @self.agent.data("ask")
        def ask(ctx: Context) -> Any:
            ev = ctx.wait("answer", chat=True, methods=["answer"], signals=("answer",), timeout=dt.timedelta(minutes=1))
            ctx.sleep(1.5)
            ctx.sleep(0)  # no wait at all
            return ev
        self.assertEqual({"wait": {"name": "answer", "chat": True, "methods": ["answer"], "signals": ["answer"], "timeoutMs": 60000}},
                         self.client.call(self, data("ask")))
        event = {"type": "chat", "text": "blue", "participantId": "ada", "requestId": "r2", "at": "2099-01-01T00:00:00Z"}
        journal = [{"name": "answer", "result": event}]
        self.assertEqual({"wait": {"name": "sleep", "timeoutMs": 1500}}, self.client.call(self, data("ask", journal=journal)))
        journal.append({"name": "sleep", "result": {"type": "timeout", "at": "2099-01-01T00:00:02Z"}})
        self.assertEqual({"reply": {"data": event}}, self.client.call(self, data("ask", journal=journal)))

    def test_streamed_step(self) -> None:
        @self.agent.chat
        def chat_(ctx: Context) -> Any:
            ctx.delta("thinking ")
            n = ctx.step("count", lambda: 3)
            ctx.delta(f"{n}")
        a = self.client.post(chat("hi", stream=True))
        lines = [json.loads(x) for x in a.body.splitlines()]
        self.assertEqual([{"delta": "thinking "}, {"step": {"name": "count", "result": 3}}], lines)
        a = self.client.post(chat("hi", stream=True, journal=[{"name": "count", "result": 3}]))
        self.assertEqual({"reply": {"text": "thinking 3"}}, json.loads(a.body.splitlines()[-1]))

    def test_misuse(self) -> None:
        for name, handler in [
            ("an empty name", lambda ctx: ctx.step("", lambda: 1)),
            ("a name too long", lambda ctx: ctx.step("x" * 257, lambda: 1)),
            ("a control character", lambda ctx: ctx.step("a\nb", lambda: 1)),
            ("a result that is not JSON", lambda ctx: ctx.step("s", lambda: {1, 2})),
            ("a result too large", lambda ctx: ctx.step("s", lambda: "x" * (256 << 10))),
            ("a result too large as Go encodes it", lambda ctx: ctx.step("s", lambda: "<" * (50 << 10))),
            ("nested steps", lambda ctx: ctx.step("outer", lambda: ctx.step("inner", lambda: 1))),
            ("an effect in a step", lambda ctx: ctx.step("s", lambda: ctx.post("hi"))),
            ("a wait for nothing", lambda ctx: ctx.wait("w")),
            ("a wait too long", lambda ctx: ctx.wait("w", timeout=7 * 24 * 3600)),
            ("a method without a name", lambda ctx: ctx.wait("w", methods=[""])),
            ("methods as one str", lambda ctx: ctx.wait("w", methods="answer")),
        ]:
            with self.subTest(name), self.assertLogs("agentbus_agent", "ERROR"):
                method = f"misuse{len(self.agent._methods)}"
                self.agent.data(method)(handler)
                self.assertEqual({"error": {"status": 500, "message": "the handler failed", "retry": False}},
                                 self.client.call(self, data(method)))
        with self.subTest("the largest result"):
            self.agent.data("large")(lambda ctx: ctx.step("s", lambda: "x" * ((256 << 10) - 2)))
            self.assertEqual(256 << 10, len(json.dumps(self.client.call(self, data("large"))["step"]["result"])))
        with self.subTest("at most 1000 steps"), self.assertLogs("agentbus_agent", "ERROR"):
            journal = [{"name": "s", "result": 1}] * 1000
            self.agent.data("thousand")(lambda ctx: [ctx.step("s", lambda: 1) for _ in range(1001)])
            self.assertEqual(500, self.client.call(self, data("thousand", journal=journal))["error"]["status"])

    def test_call(self) -> None:
        @self.agent.data("relay")
        def relay(ctx: Context) -> Any:
            try:
                out = ctx.call("count", "count", {"by": 1}, activation="b")
            except Fail as e:
                return {"failed": e.status, "message": e.message}
            other = ctx.call("other", "echo", workflow_id="t:Other:Supervisor Workflow:x")
            return {"count": out, "other": other}
        self.assertEqual({"call": {"name": "count", "agent": "Test", "activation": "b", "method": "count", "params": {"by": 1}}},
                         self.client.call(self, data("relay")), "the agent is this one by default")
        journal = [{"name": "count", "result": {"count": 1}}]
        self.assertEqual({"call": {"name": "other", "workflowId": "t:Other:Supervisor Workflow:x", "method": "echo"}},
                         self.client.call(self, data("relay", journal=journal)), "a workflow id names the agent")
        journal.append({"name": "other", "result": None})
        self.assertEqual({"reply": {"data": {"count": {"count": 1}, "other": None}}}, self.client.call(self, data("relay", journal=journal)))
        for status in (404, 202):
            failed = [{"name": "count", "error": {"status": status, "message": "no"}}]
            self.assertEqual({"reply": {"data": {"failed": status, "message": "no"}}}, self.client.call(self, data("relay", journal=failed)))

    def test_history(self) -> None:
        @self.agent.data("read")
        def read(ctx: Context) -> Any:
            return {"messages": ctx.history("thread", size=2, scope="shop"), "all": ctx.history("all")}
        self.assertEqual({"history": {"name": "thread", "size": 2, "scope": "shop"}}, self.client.call(self, data("read")))
        msgs = [{"text": "hi", "direction": 0}]
        journal = [{"name": "thread", "result": {"messages": msgs}}]
        self.assertEqual({"history": {"name": "all", "size": 20}}, self.client.call(self, data("read", journal=journal)))
        journal.append({"name": "all", "result": {"messages": []}})
        self.assertEqual({"reply": {"data": {"messages": msgs, "all": []}}}, self.client.call(self, data("read", journal=journal)))

    def test_call_and_history_misuse(self) -> None:
        for name, handler in [
            ("a call without a method", lambda ctx: ctx.call("c", "")),
            ("a call without a name", lambda ctx: ctx.call("", "count")),
            ("params that are not JSON", lambda ctx: ctx.call("c", "count", {1, 2})),
            ("a call in a step", lambda ctx: ctx.step("s", lambda: ctx.call("c", "count"))),
            ("a history of 0", lambda ctx: ctx.history("h", size=0)),
            ("a history of 101", lambda ctx: ctx.history("h", size=101)),
        ]:
            with self.subTest(name), self.assertLogs("agentbus_agent", "ERROR"):
                method = f"misuse{len(self.agent._methods)}"
                self.agent.data(method)(handler)
                self.assertEqual({"error": {"status": 500, "message": "the handler failed", "retry": False}},
                                 self.client.call(self, data(method)))
        with self.subTest("a mismatch"), self.assertLogs("agentbus_agent", "ERROR"):
            self.agent.data("mismatch")(lambda ctx: ctx.call("c", "count"))
            answer = self.client.call(self, data("mismatch", journal=[{"name": "h", "result": {"messages": []}}]))
            self.assertIn("step 1 is 'c' in this run, but 'h' in the journal", answer["error"]["message"])

    def test_journal_checked(self) -> None:
        self.agent.data("echo")(lambda ctx: len(ctx.journal))
        self.assertEqual({"reply": {"data": 0}}, self.client.call(self, data("echo", journal=None)), "null: an older host")
        req = data("echo")
        del req["journal"]
        self.assertEqual({"reply": {"data": 0}}, self.client.call(self, req), "absent: an older host")
        self.assertEqual({"reply": {"data": 1}}, self.client.call(self, data("echo", journal=[{"name": "x", "result": None}])),
                         "a journal the handler does not read is ignored")
        for bad in [{"name": "x"}, [1], [{"result": 1}], [{"name": "x", "error": "no"}]]:
            with self.subTest(bad), self.assertLogs("agentbus_agent", "WARNING"):
                self.assertEqual(400, self.client.post(data("echo", journal=bad)).status)


class ProtocolTest(unittest.TestCase):
    """A request that is not one of protocol version 1 is answered 400; agentbus treats that as a
    bad reply."""

    def test_refused(self) -> None:
        agent = new_agent()
        agent.data("echo")(lambda ctx: ctx.data)
        client = Client(self, serve(self, agent).port)
        for name, body in [
            ("not JSON", b"{"),
            ("not an object", b"[1]"),
            ("another protocol", data("echo", protocol=2)),
            ("no protocol", {k: v for k, v in data("echo").items() if k != "protocol"}),
            ("an unknown type", request("Event")),
            ("a body that is not base64", request("Webhook", webhook={"method": "x", "body": "%%%"})),
            ("an attempt that is not a number", data("echo", attempt="1")),
        ]:
            with self.subTest(name), self.assertLogs("agentbus_agent", "WARNING"):
                a = client.post(body)
                self.assertEqual(400, a.status, a.body)
                self.assertIn("not an agentbus protocol 1 request", a.body.decode())


class RegistrationTest(unittest.TestCase):
    def test_registration(self) -> None:
        agent = Agent("EchoPy", SECRET, workflow_types=["Supervisor Workflow"], max_concurrent=8, partitions=2)
        schema = {"type": "object", "properties": {"values": {"type": "array", "items": {"type": "number"}}}}
        agent.data("sum", description="Adds numbers.", schema=schema)(lambda ctx: None)
        agent.data("count")(lambda ctx: None)
        agent.webhook("echo")(lambda ctx: None)
        agent.chat(lambda ctx: None)
        self.assertEqual({
            "name": "EchoPy", "url": "http://127.0.0.1:8701/agentbus", "chat": True, "file": False,
            "webhooks": ["echo"],
            "methods": [{"name": "sum", "description": "Adds numbers.", "schema": schema}, {"name": "count"}],
            "workflowTypes": ["Supervisor Workflow"], "secret": SECRET, "maxConcurrent": 8, "partitions": 2,
        }, agent.registration("http://127.0.0.1:8701/agentbus"))

    def test_twice(self) -> None:
        agent = new_agent()
        agent.data("sum")(lambda ctx: None)
        agent.webhook("echo")(lambda ctx: None)
        agent.chat(lambda ctx: None)
        for name, register in [("data, in another case", lambda: agent.data("SUM")),
                               ("webhook", lambda: agent.webhook("echo")),
                               ("chat", lambda: agent.chat(lambda ctx: None))]:
            with self.subTest(name), self.assertRaisesRegex(ValueError, "twice"):
                register()

    def test_blocking(self) -> None:
        agent = new_agent()
        quick, slow, ping, chat_, file_ = (lambda ctx: 1), (lambda ctx: 2), (lambda ctx: 3), (lambda ctx: 4), (lambda ctx: 5)
        agent.data("quick", blocking=False)(quick)
        agent.data("slow")(slow)
        agent.webhook("ping", blocking=False)(ping)
        self.assertIs(chat_, agent.chat(blocking=False)(chat_), "the decorator returns the handler")
        self.assertIs(file_, agent.file(file_))
        for handler, blocks in [(quick, False), (slow, True), (ping, False), (chat_, False), (file_, True)]:
            with self.subTest(handler(None)):
                self.assertEqual(blocks, agent._blocks(handler))
        with self.assertRaisesRegex(ValueError, "twice"):
            agent.chat(blocking=False)(lambda ctx: None)
        self.assertNotIn("blocking", json.dumps(agent.registration("http://x/")), "the server's concern only")

    def test_invalid(self) -> None:
        for name, make in [("no name", lambda: Agent("", SECRET)), ("a bad secret", lambda: Agent("a", "s3cret")),
                           ("timeout", lambda: Agent("a", SECRET, timeout_seconds=301)),
                           ("concurrency", lambda: Agent("a", SECRET, max_concurrent=0)),
                           ("partitions", lambda: Agent("a", SECRET, partitions=0))]:
            with self.subTest(name), self.assertRaises(ValueError):
                make()
