#!/usr/bin/env python3
"""EchoPy: the reference agent Echo (pkg/agents/echo, docs/echo.md) as a remote agent, for trying
remote agents and as an example of the kit.

Registered under the name Echo (--name Echo) it answers as the Go Echo does, with the same
statuses, content types, JSON and texts, for everything protocol version 1 can express
(pkg/conformance checks it). What it lacks, and why:

- Webhook method ack: a remote agent cannot answer before it is done.
- Data relay passes a failed call on with its status and message, not its problem type (the
  caller sees handler-error), and a callee that waits (202) fails it with 500.
- Data ask does not post its question: a remote agent's posts go with its final answer, which
  comes once the question is answered.
- Chat: "You said: {text}", streamed word by word as the offline model streams it, and
  "call {method} {json}" runs one of its Data methods and answers "{method} returned {result}";
  but the call and its result are not stored in the thread and a streaming caller gets no
  tool_call and tool_result events.
- remind names its timer "remind:{requestId}" (the protocol does not send the message id).
- It keeps a "ticking" flag in its state for tick's "stopped" (a remote agent cannot ask whether
  a timer exists); the state webhook shows only Echo's counters.

Webhook methods: echo, verify, status, sleep, count, complete, state, host. complete answers
{"completed": true, "runId": …} and completes the instance (its next request starts a new run
with fresh state); host answers {"hostId": …, "runId": …}, the workflow host serving it.
Data methods: echo, sum, count, history, sleep, steps, ask, answer, fail, remind, tick, relay.
steps makes durable steps (Context.step) and logs each run of a step's function; ask waits
(Context.wait) for the participant's Chat message, an answer call or the signal "answer";
history has agentbus read the thread (Context.history) and relay has it call another instance
(Context.call).
File: "Received {name} ({n} bytes)" with the file's name, content type, size and SHA-256;
"No file data received." without content, and the invalid-format text for content that was not
base64.

    python3 sdk/python/examples/echo.py --port 8701 --secret whsec_...

prints its registration and serves until Ctrl-C. Every flag has an environment variable:
AGENTBUS_AGENT_NAME, _SECRET (a new one is made when neither is given), _HOST, _PORT and _URL
(the URL agentbus reaches it at).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# Runs from a checkout without installing: the kit is next to this directory.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_agent import MAX_HISTORY, Agent, Context, Fail, Reply, Response, new_secret  # noqa: E402

# MAX_SLEEP_MS bounds sleep, as Echo's 5 minutes; the registration's timeout allows it.
MAX_SLEEP_MS = 5 * 60 * 1000
# MAX_REMIND_MS bounds how far ahead remind schedules: 7 days.
MAX_REMIND_MS = 7 * 24 * 3600 * 1000
TICK_TIMER = "tick"
# Bounds of steps, as Echo's: a caller cannot park a conversation for longer than with sleep.
MAX_STEPS_N = 100
MAX_STEP_SLEEP_MS = 60 * 1000
MAX_STEPS_TOTAL_MS = MAX_SLEEP_MS
# MAX_QUESTION bounds ask's question, in bytes; MAX_WAIT_S its wait, 6 days.
MAX_QUESTION = 4 << 10
MAX_WAIT_S = 6 * 24 * 3600
# The range of Go's int64, which Echo's whole-number parameters are.
INT64 = range(-(1 << 63), 1 << 63)

log = logging.getLogger("echopy")

# File reply texts of docs/interface.md#41-send-message-admin, rules 3 and 4.
NO_FILE_TEXT = "No file data received."
INVALID_FILE_TEXT = "Invalid file format. Please ensure the file is base64 encoded."


def new_agent(name: str, secret: str) -> Agent:
    """Returns EchoPy with its handlers."""
    # A request may take as long as Echo's longest sleep.
    agent = Agent(name, secret, workflow_types=["Supervisor Workflow", "Conversational"], timeout_seconds=300)
    # The Data methods by name, for the chat's "call {method} {json}": each takes the context
    # and the parameters.
    tools: dict[str, Callable[[Context, Any], Any]] = {}

    def data(method: str, description: str, schema: Mapping[str, Any] | None = None,
             blocking: bool = False) -> Callable[..., Any]:
        def register(fn: Callable[[Context, Any], Any]) -> Callable[[Context, Any], Any]:
            tools[method] = fn
            agent.data(method, description=description, schema=schema, blocking=blocking)(lambda ctx: fn(ctx, ctx.data))
            return fn
        return register

    # Webhook methods. Every handler but sleep, chat (which may call sleep) and file (whose
    # content may be large) returns at once: they run on the server's loop (blocking=False).

    @agent.webhook("echo", blocking=False)
    def echo(ctx: Context) -> Response:
        out: dict[str, Any] = {"params": ctx.params}
        try:
            out["body"] = ctx.body.decode("utf-8")
        except UnicodeDecodeError:
            out["bodyBase64"] = base64.b64encode(ctx.body).decode()
        out.update(size=len(ctx.body), sha256=hashlib.sha256(ctx.body).hexdigest())
        return json_response(out)

    @agent.webhook("verify", blocking=False)
    def verify(ctx: Context) -> Response:
        challenge = ctx.params.get("challenge")
        if challenge is None:
            try:
                body = json.loads(ctx.body)
            except ValueError:
                body = None
            value = field(body, "challenge") if isinstance(body, dict) else None
            if isinstance(value, str):
                challenge = value
        if challenge is None:
            return Response.text("missing challenge", 400)
        return Response.text(challenge)

    @agent.webhook("status", blocking=False)
    def status(ctx: Context) -> Response:
        code = atoi(ctx.params.get("code", ""))
        if code is None or not 200 <= code <= 599:
            return json_response({"error": "code must be a status from 200 to 599"}, 400)
        return json_response({"status": code}, code)

    @agent.webhook("sleep")
    def sleep_webhook(ctx: Context) -> Response:
        ms = atoi(ctx.params.get("ms", ""))
        ms = min(ms, MAX_SLEEP_MS) if ms is not None and ms >= 0 else 0
        time.sleep(ms / 1000)
        update_state(ctx, "sleeps")
        return json_response({"slept": ms})

    @agent.webhook("count", blocking=False)
    def count_webhook(ctx: Context) -> Response:
        return json_response({"count": update_state(ctx, "count")["count"], "runId": ctx.run_id})

    @agent.webhook("complete", blocking=False)
    def complete(ctx: Context) -> Response:
        ctx.complete()
        return json_response({"completed": True, "runId": ctx.run_id})

    @agent.webhook("state", blocking=False)
    def state(ctx: Context) -> Response:
        return json_response({"runId": ctx.run_id, "state": echo_state(ctx.state)})

    @agent.webhook("host", blocking=False)
    def host(ctx: Context) -> Response:
        return json_response({"hostId": ctx.host_id, "runId": ctx.run_id})

    # Data methods: their parameters are checked as Go's Echo decodes them, with its messages.

    # Each schema gives examples: parameters a call may send, which agentbus checks against the
    # schema at registration and `agentbus agent check` sends.

    @data("echo", "Returns its parameters unchanged.", {"type": "object", "examples": [{"text": "hello"}]})
    def echo_data(ctx: Context, p: Any) -> Any:
        return params(p, "echo")

    @data("sum", 'Adds numbers: {"values":[2,3]} returns {"sum":5}.', {
        "type": "object",
        "properties": {"values": {"type": "array", "items": {"type": "number"}, "description": "the numbers to add"}},
        "required": ["values"],
        "examples": [{"values": [2, 3]}, {"values": [1.5, -4, 10]}]})
    def sum_data(ctx: Context, p: Any) -> Any:
        values = param(p, "sum", "values", "array") or []
        total = 0.0
        for v in values:
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise Fail(400, "bad parameters for sum: field values must be a JSON number")
            total += float(v or 0)
        return {"sum": go_number(total)}

    @data("count", "Increments this conversation's counter and returns it with the run id.",
          {"type": "object", "examples": [{}]})
    def count_data(ctx: Context, p: Any) -> Any:
        params(p, "count")
        return {"count": update_state(ctx, "count")["count"], "runId": ctx.run_id}

    @data("history", "Returns the newest messages of this conversation's thread, newest first.",
          {"type": "object", "properties": {
              "size": {"type": "integer", "description": "how many messages, 1-100 (default 20)"},
              "scope": {"type": "string", "description": "only messages of this topic"}},
           "examples": [{"size": 5}]})
    def history(ctx: Context, p: Any) -> Any:
        # agentbus reads the thread (Context.history) as Go's Echo reads it: a size of 0 or less
        # is the default, one over 100 is 100.
        size = param(p, "history", "size", "whole number") or 0
        scope = param(p, "history", "scope", "string") or None
        size = min(size, MAX_HISTORY) if size > 0 else 20
        return {"messages": ctx.history("history", size=size, scope=scope)}

    @data("sleep", "Waits ms milliseconds (at most 5 minutes), then returns how long it slept.",
          {"type": "object", "properties": {"ms": {"type": "integer", "description": "milliseconds to wait"}}, "required": ["ms"],
           "examples": [{"ms": 10}]},
          blocking=True)
    def sleep_data(ctx: Context, p: Any) -> Any:
        ms = min(max(param(p, "sleep", "ms", "whole number") or 0, 0), MAX_SLEEP_MS)
        time.sleep(ms / 1000)
        return {"slept": ms}

    @data("steps", 'Makes n durable steps one after another, each waiting sleepMs, and counts them in this '
          'conversation\'s state: {"n":3,"sleepMs":100}.',
          {"type": "object", "properties": {
              "n": {"type": "integer", "description": "how many steps, 1-100"},
              "sleepMs": {"type": "integer", "description": "milliseconds each step waits, 0-60000; n times sleepMs at most 5 minutes"}},
           "required": ["n"],
           "examples": [{"n": 2, "sleepMs": 10}]},
          blocking=True)
    def steps(ctx: Context, p: Any) -> Any:
        # Each step's function waits sleepMs and gives the attempt and host that ran it. A step
        # the journal holds is not run again: its recorded result comes back. The state is
        # written by the final answer only, so it counts each step once per request.
        n = param(p, "steps", "n", "whole number") or 0
        sleep_ms = param(p, "steps", "sleepMs", "whole number") or 0
        if not 1 <= n <= MAX_STEPS_N or not 0 <= sleep_ms <= MAX_STEP_SLEEP_MS or n * sleep_ms > MAX_STEPS_TOTAL_MS:
            raise Fail(400, f"steps needs n from 1 to {MAX_STEPS_N} and sleepMs from 0 to {MAX_STEP_SLEEP_MS}, "
                            f"n times sleepMs at most {MAX_STEPS_TOTAL_MS}")
        ran = []
        for i in range(1, n + 1):
            def run(i: int = i) -> dict[str, Any]:
                log.info("steps: step %d of %d runs (workflow %s, request %s, attempt %d)",
                         i, n, ctx.workflow_id, ctx.request_id, ctx.attempt)
                time.sleep(sleep_ms / 1000)
                return {"attempt": ctx.attempt, "hostId": ctx.host_id}
            ran.append(ctx.step(f"step {i}", run))
        counts = list(ctx.state.get("steps") or []) if isinstance(ctx.state, dict) else []
        counts += [0] * (n - len(counts))
        for i in range(n):
            counts[i] += 1
        update_state(ctx, steps=counts)
        return {"steps": n, "attempt": ctx.attempt, "ran": ran}

    @data("ask", 'Waits for the participant\'s next Chat message, an answer call or the signal "answer", and '
          'answers with it; the question is not posted: {"question":"Which colour?"}.',
          {"type": "object", "properties": {
              "question": {"type": "string", "description": "the question, 1-4096 bytes, given back with the answer"},
              "timeoutS": {"type": "integer", "description": "seconds to wait for the answer, 1-518400 (6 days, the default)"}},
           "required": ["question"],
           "examples": [{"question": "Which colour?", "timeoutS": 60}]})
    def ask(ctx: Context, p: Any) -> Any:
        question = param(p, "ask", "question", "string") or ""
        timeout_s = param(p, "ask", "timeoutS", "whole number") or 0
        if not question or len(question.encode("utf-8", "surrogatepass")) > MAX_QUESTION:
            raise Fail(400, f"ask needs a question of 1 to {MAX_QUESTION} bytes of text")
        if not 0 <= timeout_s <= MAX_WAIT_S:
            raise Fail(400, f"ask's timeoutS is 1 to {MAX_WAIT_S}")
        ev = ctx.wait("answer", chat=True, methods=["answer"], signals=["answer"], timeout=timeout_s or None)
        out: dict[str, Any] = {"question": question, "type": ev.get("type", "")}
        if out["type"] == "chat":
            out["answer"], out["by"] = ev.get("text", ""), ev.get("participantId", "")
        elif out["type"] in ("data", "signal"):
            out["answer"], out["by"] = ev.get("data"), ev.get("participantId", "")
        return out

    @data("answer", 'Answers the question an ask waits for: {"colour":"blue"}.',
          {"type": "object", "examples": [{"colour": "blue"}]})
    def answer(ctx: Context, p: Any) -> Any:
        # What an answer call does when no ask waits for it: one that ends a wait goes to the ask.
        params(p, "answer")
        raise Fail(409, "nothing was asked: answer ends the wait of an ask in the same conversation")

    @data("fail", "Fails with the given status (400-599, default 500) and message; for trying error paths.",
          {"type": "object", "properties": {
              "status": {"type": "integer", "description": "HTTP status of the failure, 400-599"},
              "message": {"type": "string"}},
           "examples": [{"status": 409, "message": "already done"}]})
    def fail(ctx: Context, p: Any) -> Any:
        code = param(p, "fail", "status", "whole number") or 0
        message = param(p, "fail", "message", "string") or "fail was asked to fail"
        raise Fail(code if 400 <= code <= 599 else 500, message)

    @data("remind", 'Posts text to this conversation after ms milliseconds: {"text":"stretch","ms":60000}.',
          {"type": "object", "properties": {
              "text": {"type": "string", "description": "what to say when the reminder is due"},
              "ms": {"type": "integer", "description": "milliseconds from now (at most 7 days)"}},
           "required": ["text", "ms"],
           "examples": [{"text": "stretch", "ms": 60000}]})
    def remind(ctx: Context, p: Any) -> Any:
        text = param(p, "remind", "text", "string") or ""
        ms = param(p, "remind", "ms", "whole number") or 0
        if ctx.timer:
            # The timer's message came back: the reminder is due.
            ctx.post(text, scope=ctx.scope or None)
            return None
        if not text or not 0 <= ms <= MAX_REMIND_MS:
            raise Fail(400, f"remind needs a text and ms between 0 and {MAX_REMIND_MS}")
        name = "remind:" + ctx.request_id
        due = dt.datetime.now(dt.timezone.utc) + dt.timedelta(milliseconds=ms)
        # RFC 3339 with the fraction's trailing zeros cut, as Go's time.RFC3339Nano.
        due_at = due.strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".") + "Z"
        ctx.set_timer(name, at=due_at, method="remind", data={"text": text, "ms": ms})
        return {"timer": name, "dueAt": due_at}

    @data("tick", 'Posts "tick N" to this conversation every seconds (default 60) until called with {"stop":true}.',
          {"type": "object", "properties": {
              "seconds": {"type": "integer", "description": "interval in seconds, at least 1 (default 60)"},
              "stop": {"type": "boolean", "description": "true cancels the ticking"}},
           "examples": [{"seconds": 60}, {"stop": True}]})
    def tick(ctx: Context, p: Any) -> Any:
        seconds = param(p, "tick", "seconds", "whole number") or 0
        stop = param(p, "tick", "stop", "boolean") or False
        if ctx.timer:
            n = update_state(ctx, "ticks")["ticks"]
            ctx.post(f"tick {n}", data={"tick": n})
            return None
        if stop:
            ctx.cancel_timer(TICK_TIMER)
            stopped = bool(isinstance(ctx.state, dict) and ctx.state.get("ticking"))
            if stopped:
                update_state(ctx, ticking=False)
            return {"ticking": False, "stopped": stopped}
        if seconds == 0:
            seconds = 60
        if seconds < 1:
            raise Fail(400, "seconds is at least 1")
        ctx.set_timer(TICK_TIMER, every=dt.timedelta(seconds=seconds), method="tick")
        update_state(ctx, ticking=True)
        return {"ticking": True, "every": go_duration(seconds)}

    @data("relay", 'Calls a Data method of another instance of this tenant and returns its result: '
          '{"activation":"b","method":"count"}.',
          {"type": "object", "properties": {
              "agent": {"type": "string", "description": "the agent to call (default this one)"},
              "workflowType": {"type": "string", "description": "its workflow type (default Supervisor Workflow)"},
              "activation": {"type": "string", "description": "the activation name of the instance to call"},
              "workflowId": {"type": "string", "description": "or the instance's workflow id (of this tenant)"},
              "method": {"type": "string", "description": "the Data method to call"},
              "params": {"description": "the method's parameters"}},
           "required": ["method"],
           "examples": [{"activation": "b", "method": "count"}]})
    def relay(ctx: Context, p: Any) -> Any:
        # agentbus makes the call (Context.call); its failure fails relay with its status and
        # message.
        peer = {k: param(p, "relay", k, "string") for k in ("agent", "workflowType", "activation", "workflowId", "method")}
        if not peer["method"]:
            raise Fail(400, "relay needs a method")
        result = ctx.call("relay", peer["method"], field(params(p, "relay"), "params"), agent=peer["agent"] or None,
                          activation=peer["activation"] or None, workflow_type=peer["workflowType"] or None,
                          workflow_id=peer["workflowId"] or None)
        return {"result": result}

    # Chat and File.

    @agent.chat
    def chat(ctx: Context) -> Any:
        # As Echo's offline model: "call {method} {json}" calls a Data method, anything else is
        # echoed. The answer is streamed word by word; the reply's text is the deltas joined.
        call = tool_call(ctx.text, tools)
        answer = f"You said: {ctx.text}" if call is None else run_tool(ctx, tools, *call)
        for word in words(answer):
            ctx.delta(word)

    @agent.file
    def file(ctx: Context) -> Any:
        f = ctx.file
        if f is not None and f.invalid:
            return INVALID_FILE_TEXT
        if f is None or f.size == 0:
            return NO_FILE_TEXT
        # agentbus sends the size and SHA-256 of the content, also of a file too large to send.
        return Reply(f"Received {f.name} ({f.size} bytes)", {
            "fileName": f.name, "contentType": f.content_type, "size": f.size, "sha256": f.sha256})

    return agent


# ECHO_STATE are the counters of Echo's state, in the order Go's Echo writes them.
ECHO_STATE = ("count", "acks", "sleeps")


def echo_state(state: Any) -> dict[str, Any]:
    """The instance's state as Echo shows it: {"count", "acks", "sleeps"}, "ticks" once ticking
    has posted and "steps" once steps has run."""
    s = state if isinstance(state, dict) else {}
    out: dict[str, Any] = {k: s.get(k, 0) for k in ECHO_STATE}
    for k in ("ticks", "steps"):
        if s.get(k):
            out[k] = s[k]
    return out


def update_state(ctx: Context, counter: str | None = None, **flags: Any) -> dict[str, Any]:
    """Increments one counter of the state and sets flags, sets the new state and returns it."""
    state = dict(ctx.state) if isinstance(ctx.state, dict) else {}
    for k in ECHO_STATE:
        state.setdefault(k, 0)
    if counter:
        state[counter] = state.get(counter, 0) + 1
    state.update(flags)
    ctx.set_state(state)
    return state


def atoi(s: str) -> int | None:
    """s as Go's strconv.Atoi reads it: an optional sign and ASCII digits, within int64."""
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        return None
    n = int(s)
    return n if n in INT64 else None


def field(obj: dict[str, Any], name: str) -> Any:
    """obj's field name as Go's encoding/json decodes it: the last key equal to name, ignoring
    case."""
    found = None
    for k, v in obj.items():
        if k.lower() == name.lower():
            found = v
    return found


def params(p: Any, method: str) -> dict[str, Any]:
    """A Data method's parameters: an object, or none (null)."""
    if p is None:
        return {}
    if not isinstance(p, dict):
        raise Fail(400, f"bad parameters for {method}: must be a JSON object")
    return p


_KINDS: dict[str, Callable[[Any], bool]] = {
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "whole number": lambda v: isinstance(v, int) and not isinstance(v, bool) and v in INT64,
}


def param(p: Any, method: str, name: str, kind: str) -> Any:
    """A parameter of a Data method, None when absent or null; a value of another kind fails the
    request with 400 and Go's Echo's message."""
    value = field(params(p, method), name)
    if value is not None and not _KINDS[kind](value):
        raise Fail(400, f"bad parameters for {method}: field {name} must be a JSON {kind}")
    return value


def go_number(x: float) -> int | float:
    """A float as Go's encoding/json writes it: a whole one without a fraction."""
    return int(x) if x.is_integer() and abs(x) < 1e21 else x


def go_numbers(value: Any) -> Any:
    """value with its whole floats made ints, as Go writes them (1, not 1.0)."""
    if isinstance(value, float):
        return go_number(value)
    if isinstance(value, dict):
        return {k: go_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [go_numbers(v) for v in value]
    return value


def go_json(value: Any, sort_keys: bool = False) -> str:
    """value as JSON the way Go's encoding/json writes it: compact, with <, >, &, U+2028 and
    U+2029 escaped."""
    s = json.dumps(go_numbers(value), ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys, allow_nan=False)
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(c, esc)
    return s


def json_response(value: Any, status: int = 200) -> Response:
    """An application/json response written as Go's Echo writes it."""
    return Response(status, go_json(value), "application/json")


# SPACE is what Go's unicode.IsSpace takes for white space.
SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_WORD = re.compile(f"^[{SPACE}]+|[^{SPACE}]+[{SPACE}]*")


def words(s: str) -> list[str]:
    """s split after each run of white space, as Echo's offline model streams its answer."""
    return _WORD.findall(s)


def tool_call(text: str, tools: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The Data method and parameters that a chat "call {method} {json}" asks for, as Echo's
    offline model reads it; None for any other text."""
    strip = f"[{SPACE}]*"
    m = re.fullmatch(f"{strip}call (.*?){strip}", text, re.S)
    if m is None:
        return None
    rest = re.sub(f"^{strip}", "", m.group(1))
    name, _, args = rest.partition(" ")
    args = re.sub(f"^{strip}|{strip}$", "", args) or "{}"
    if name not in tools or not args.startswith("{"):
        return None
    try:
        return name, json.loads(args)
    except ValueError:
        return None


def run_tool(ctx: Context, tools: Mapping[str, Callable[[Context, Any], Any]], name: str, args: Any) -> str:
    """Runs a chat's tool call on the chat's own request and returns the answer: "{name}
    returned {result}", the result as Go's Echo gives it to its model."""
    try:
        result = tools[name](ctx, args)
        if isinstance(result, Reply):
            result = result.data if result.data is not None else result.text
    except Fail as e:
        result = {"error": {"status": e.status, "message": e.message}}
    except Exception:
        logging.getLogger("agentbus_agent").exception("tool %s failed", name)
        result = {"error": {"status": 500, "message": "the handler failed"}}
    return f"{name} returned {result if isinstance(result, str) else go_json(result, sort_keys=True)}"


def go_duration(seconds: int) -> str:
    """seconds as Go's time.Duration.String writes it: 1m0s, 1h30m0s."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    return f"{m}m{s}s" if m else f"{s}s"


def main(argv: list[str]) -> int:
    env = os.environ.get
    p = argparse.ArgumentParser(description="EchoPy, the reference agent Echo as a remote agent.")
    p.add_argument("--name", default=env("AGENTBUS_AGENT_NAME", "EchoPy"), help="the agent's name (default EchoPy)")
    p.add_argument("--secret", default=env("AGENTBUS_AGENT_SECRET"), help="the signing secret, whsec_… (default: a new one)")
    p.add_argument("--host", default=env("AGENTBUS_AGENT_HOST", "127.0.0.1"), help="the address to listen on")
    p.add_argument("--port", type=int, default=int(env("AGENTBUS_AGENT_PORT", "8701")), help="the port (0 picks one)")
    p.add_argument("--url", default=env("AGENTBUS_AGENT_URL"), help="the URL agentbus reaches it at "
                   "(default http://HOST:PORT/agentbus)")
    p.add_argument("--registration", action="store_true", help="print the registration and exit")
    args = p.parse_args(argv)

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    agent = new_agent(args.name, args.secret or new_secret())
    if args.registration:
        url = args.url or f"http://{args.host}:{args.port}/agentbus"
        print(json.dumps(agent.registration(url), indent=2))
        return 0
    server = agent.server(args.host, args.port)

    def announce() -> None:
        url = args.url or f"http://{args.host}:{server.port}/agentbus"
        print(json.dumps(agent.registration(url), indent=2), flush=True)
        logging.info("%s serving on %s:%d", agent.name, args.host, server.port)

    server.run(ready=announce)
    logging.info("%s stopped", agent.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
