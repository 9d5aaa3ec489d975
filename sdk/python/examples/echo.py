#!/usr/bin/env python3
"""EchoPy: the reference agent Echo (pkg/agents/echo, docs/echo.md) as a remote agent, for trying
remote agents and as an example of the kit.

It behaves as Echo does where protocol version 1 can say it:

Webhook methods: echo, verify, status, sleep, count, state (not ack, complete, host: a remote
agent cannot answer before it is done, complete its instance or see its host).
Data methods: echo, sum, count, sleep, fail, remind, tick (not history, relay: a remote agent
cannot read the thread or call another agent for a result).
Chat: "You said: {text}", streamed word by word to a caller that streams.
File: "Received {name} ({n} bytes)" with the file's name, content type, size and SHA-256.

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
from pathlib import Path
from typing import Any

# Runs from a checkout without installing: the kit is next to this directory.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_agent import Agent, Context, Fail, Reply, Response, new_secret  # noqa: E402

# MAX_SLEEP_MS bounds sleep, as Echo's 5 minutes; agentbus stops waiting after the agent's
# timeoutSeconds anyway.
MAX_SLEEP_MS = 5 * 60 * 1000
# MAX_REMIND_MS bounds how far ahead remind schedules: 7 days.
MAX_REMIND_MS = 7 * 24 * 3600 * 1000
TICK_TIMER = "tick"

NO_FILE_TEXT = "No file data received."


def new_agent(name: str, secret: str) -> Agent:
    """Returns EchoPy with its handlers."""
    agent = Agent(name, secret, workflow_types=["Supervisor Workflow", "Conversational"])

    # Webhook methods.

    @agent.webhook("echo")
    def echo(ctx: Context) -> Response:
        out: dict[str, Any] = {"params": ctx.params}
        try:
            out["body"] = ctx.body.decode("utf-8")
        except UnicodeDecodeError:
            out["bodyBase64"] = base64.b64encode(ctx.body).decode()
        out.update(size=len(ctx.body), sha256=hashlib.sha256(ctx.body).hexdigest())
        return Response.json(out)

    @agent.webhook("verify")
    def verify(ctx: Context) -> Response:
        challenge = ctx.params.get("challenge")
        if challenge is None:
            try:
                body = json.loads(ctx.body)
            except ValueError:
                body = None
            if isinstance(body, dict) and isinstance(body.get("challenge"), str):
                challenge = body["challenge"]
        if challenge is None:
            return Response.text("missing challenge", 400)
        return Response.text(challenge)

    @agent.webhook("status")
    def status(ctx: Context) -> Response:
        code = ctx.params.get("code", "")
        if not (code.isdigit() and 200 <= int(code) <= 599):
            return Response.json({"error": "code must be a status from 200 to 599"}, 400)
        return Response.json({"status": int(code)}, int(code))

    @agent.webhook("sleep")
    def sleep_webhook(ctx: Context) -> Response:
        ms = param_ms(ctx, 0)
        time.sleep(ms / 1000)
        update_state(ctx, "sleeps")
        return Response.json({"slept": ms})

    @agent.webhook("count")
    def count_webhook(ctx: Context) -> Response:
        return Response.json({"count": update_state(ctx, "count")["count"], "runId": ctx.run_id})

    @agent.webhook("state")
    def state(ctx: Context) -> Response:
        return Response.json({"runId": ctx.run_id, "state": echo_state(ctx.state)})

    # Data methods.

    @agent.data("echo", description="Returns its parameters unchanged.")
    def echo_data(ctx: Context) -> Any:
        return ctx.data if ctx.data is not None else {}

    @agent.data("sum", description='Adds numbers: {"values":[2,3]} returns {"sum":5}.', schema={
        "type": "object",
        "properties": {"values": {"type": "array", "items": {"type": "number"}, "description": "the numbers to add"}},
    })
    def sum_data(ctx: Context) -> Any:
        values = (ctx.data or {}).get("values") or []
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise Fail(400, "values are numbers")
        return {"sum": sum(values)}

    @agent.data("count", description="Increments this conversation's counter and returns it with the run id.")
    def count_data(ctx: Context) -> Any:
        return {"count": update_state(ctx, "count")["count"], "runId": ctx.run_id}

    @agent.data("sleep", description="Waits ms milliseconds (at most 5 minutes), then returns how long it slept.",
                schema={"type": "object", "properties": {"ms": {"type": "integer", "description": "milliseconds to wait"}}})
    def sleep_data(ctx: Context) -> Any:
        ms = min(max(int((ctx.data or {}).get("ms") or 0), 0), MAX_SLEEP_MS)
        time.sleep(ms / 1000)
        return {"slept": ms}

    @agent.data("fail", description="Fails with the given status (400-599, default 500) and message; for trying error paths.",
                schema={"type": "object", "properties": {
                    "status": {"type": "integer", "description": "HTTP status of the failure, 400-599"},
                    "message": {"type": "string"}}})
    def fail(ctx: Context) -> Any:
        params = ctx.data or {}
        raise Fail(int(params.get("status") or 500), params.get("message") or "fail was asked to fail")

    @agent.data("remind", description='Posts text to this conversation after ms milliseconds: {"text":"stretch","ms":60000}.',
                schema={"type": "object", "properties": {
                    "text": {"type": "string", "description": "what to say when the reminder is due"},
                    "ms": {"type": "integer", "description": "milliseconds from now (at most 7 days)"}}})
    def remind(ctx: Context) -> Any:
        params = ctx.data or {}
        text, ms = params.get("text") or "", params.get("ms") or 0
        if ctx.timer:
            # The timer's message came back: the reminder is due.
            ctx.post(text, scope=ctx.scope or None)
            return None
        if not text or not 0 <= ms <= MAX_REMIND_MS:
            raise Fail(400, f"remind needs a text and ms between 0 and {MAX_REMIND_MS}")
        name = "remind:" + ctx.request_id
        due = dt.datetime.now(dt.timezone.utc) + dt.timedelta(milliseconds=ms)
        due_at = due.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        ctx.set_timer(name, at=due_at, method="remind", data={"text": text, "ms": ms})
        return {"timer": name, "dueAt": due_at}

    @agent.data("tick", description='Posts "tick N" to this conversation every seconds (default 60) until called with {"stop":true}.',
                schema={"type": "object", "properties": {
                    "seconds": {"type": "integer", "description": "interval in seconds, at least 1 (default 60)"},
                    "stop": {"type": "boolean", "description": "true cancels the ticking"}}})
    def tick(ctx: Context) -> Any:
        params = ctx.data or {}
        if ctx.timer:
            n = update_state(ctx, "ticks")["ticks"]
            ctx.post(f"tick {n}", data={"tick": n})
            return None
        if params.get("stop"):
            ctx.cancel_timer(TICK_TIMER)
            return {"ticking": False}
        seconds = params.get("seconds") or 60
        if seconds < 1:
            raise Fail(400, "seconds is at least 1")
        ctx.set_timer(TICK_TIMER, every=dt.timedelta(seconds=seconds), method="tick")
        return {"ticking": True, "every": go_duration(seconds)}

    # Chat and File.

    @agent.chat
    def chat(ctx: Context) -> Any:
        # Word by word, as Echo's offline model streams. Without a returned text the reply's
        # text is the deltas joined.
        for word in re.split(r"(?<= )", f"You said: {ctx.text}"):
            if word:
                ctx.delta(word)
        return None

    @agent.file
    def file(ctx: Context) -> Any:
        if ctx.file is None or ctx.file.size == 0:
            return NO_FILE_TEXT
        content = ctx.file.read(timeout=max(ctx.remaining() or 30.0, 1.0))
        return Reply(f"Received {ctx.file.name} ({len(content)} bytes)", {
            "fileName": ctx.file.name, "contentType": ctx.file.content_type, "size": len(content),
            "sha256": hashlib.sha256(content).hexdigest()})

    return agent


def echo_state(state: Any) -> dict[str, Any]:
    """The instance's state as Echo keeps it: {"count", "acks", "sleeps"} and, once ticking, "ticks"."""
    out: dict[str, Any] = {"count": 0, "acks": 0, "sleeps": 0}
    if isinstance(state, dict):
        out.update(state)
    return out


def update_state(ctx: Context, counter: str) -> dict[str, Any]:
    """Increments one counter of the state, sets the new state and returns it."""
    state = echo_state(ctx.state)
    state[counter] = state.get(counter, 0) + 1
    ctx.set_state(state)
    return state


def param_ms(ctx: Context, default: int) -> int:
    """The ms query parameter, bounded by MAX_SLEEP_MS; default when absent or not a number."""
    ms = ctx.params.get("ms", "")
    return min(int(ms), MAX_SLEEP_MS) if ms.isdigit() else default


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
