"""What a handler gets and gives: the request as a Context, with the effects the handler may have
on its instance, its durable steps and waits, and its answers (Reply, Response) and failures
(Fail, Retry), turned into the answer object of protocol version 1. Neither the Agent nor its
server: both build on this."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: The protocol version this kit speaks.
PROTOCOL = 1

#: The request types of the protocol.
CHAT, DATA, FILE, WEBHOOK = "Chat", "Data", "File", "Webhook"
_TYPES = (CHAT, DATA, FILE, WEBHOOK)

#: A handler takes the request's Context and returns its answer (see Agent).
Handler = Callable[["Context"], Any]

#: Bounds of a request's steps and waits (Context.step): how many it makes, a name's length in
#: bytes (UTF-8), a result's length encoded as JSON, and the longest wait in seconds (6 days).
MAX_STEPS = 1000
MAX_STEP_NAME = 256
MAX_STEP_RESULT = 256 << 10
MAX_WAIT_SECONDS = 6 * 24 * 3600
#: The most messages one history read returns (Context.history).
MAX_HISTORY = 100


class ProtocolError(ValueError):
    """A request is not a protocol version 1 request object; the server answers it 400."""


@dataclass(frozen=True)
class Reply:
    """A Chat, Data or File handler's reply: text and/or data (any JSON value)."""

    text: str | None = None
    data: Any = None

    def _json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.text is not None:
            out["text"] = self.text
        if self.data is not None:
            out["data"] = self.data
        return out


@dataclass(frozen=True)
class Response:
    """A webhook handler's answer to its HTTP caller. A str body is sent as text, bytes as
    base64; content_type None leaves the host's default (application/json)."""

    status: int = 200
    body: str | bytes = ""
    content_type: str | None = None

    def __post_init__(self) -> None:
        if not 200 <= self.status <= 599:
            raise ValueError(f"a webhook response's status is 200 to 599, not {self.status}")

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Response:
        """A response holding value encoded as JSON."""
        return cls(status, _dumps(value), "application/json")

    @classmethod
    def text(cls, text: str, status: int = 200) -> Response:
        """A text/plain response."""
        return cls(status, text, "text/plain; charset=utf-8")

    def _json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.content_type:
            out["contentType"] = self.content_type
        if isinstance(self.body, (bytes, bytearray)):
            if self.body:
                out["bodyBase64"] = base64.b64encode(self.body).decode()
        elif self.body:
            out["body"] = self.body
        return out


class Fail(Exception):
    """Raised by a handler, fails the request: the caller gets status (400 to 599; another
    becomes 500, as in Go's agent.Errorf) and message. It is not retried, and the handler's
    state, posts, timers and tells are dropped."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status if 400 <= status <= 599 else 500
        self.message = message


class _Suspend(BaseException):
    """Stops a handler at a step that ran or a wait past the journal: the kit answers with the
    step to record or the wait (Context._suspended). A BaseException, so that a handler's
    `except Exception` lets it through."""


class Retry(Exception):
    """Raised by a handler, marks a passing failure (a model or an API that did not answer):
    agentbus sends the request again after a backoff, and dead-letters it after its last
    attempt. The handler's state, posts, timers and tells are dropped."""

    #: The status of the error object sent; agentbus shows it only once attempts are used up.
    status = 503

    def __init__(self, message: str = "the agent asked to try again") -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class FileRef:
    """The file of a File message, as agentbus describes it: its name, content type, size in
    bytes and hex SHA-256, and its content, which agentbus sends for a file of at most 4 MiB
    (None for a larger one). A file sent without content has size 0; invalid is True when what
    was sent was not base64."""

    name: str
    content_type: str
    size: int
    sha256: str = ""
    content: bytes | None = None
    invalid: bool = False

    def read(self) -> bytes:
        """The file's content: b"" for a file sent without valid content. Raises ValueError
        for a file larger than agentbus sends (4 MiB)."""
        if self.content is not None:
            return self.content
        if self.size == 0:
            return b""
        raise ValueError(f"file {self.name!r} ({self.size} bytes) is larger than agentbus sends with the request")



class Context:
    """One request as its handler sees it, and what the handler does besides replying: new
    state, posts, timers, tells, completing the instance and streamed deltas. It lives for one handler call; use it from
    the handler's thread only.

    Fields of the request (docs/remote-agents.md names them in camelCase):
    type, agent, tenant_id, workflow_id, workflow_type, activation, run_id, host_id, participant,
    request_id, attempt, deadline, stream, state; a message's text, method, data, scope, hint,
    timer and file; a webhook's method, params, headers, content_type and body (bytes); journal,
    the steps and waits the request recorded so far (see step). request is the whole request
    object as received.
    """

    def __init__(self, request: Mapping[str, Any], on_delta: Callable[[str], None] | None = None) -> None:
        if not isinstance(request, Mapping):
            raise ProtocolError("the request is not a JSON object")
        protocol = request.get("protocol")
        if type(protocol) is not int or protocol != PROTOCOL:  # not true, not 1.0
            raise ProtocolError(f"protocol {protocol!r} is not {PROTOCOL}")
        self.type: str = _field(request, "type", str, "")
        if self.type not in _TYPES:
            raise ProtocolError(f"type {self.type!r} is none of {', '.join(_TYPES)}")
        self.request = request
        self.agent: str = _field(request, "agent", str, "")
        self.tenant_id: str = _field(request, "tenantId", str, "")
        self.workflow_id: str = _field(request, "workflowId", str, "")
        self.workflow_type: str = _field(request, "workflowType", str, "")
        self.activation: str = _field(request, "activation", str, "")
        self.run_id: str = _field(request, "runId", str, "")
        #: The workflow host serving the instance now ("" from a host that does not send it).
        self.host_id: str = _field(request, "hostId", str, "")
        self.participant: str = _field(request, "participantId", str, "")
        self.request_id: str = _field(request, "requestId", str, "")
        self.attempt: int = _field(request, "attempt", int, 1)
        self.deadline: dt.datetime | None = _time(_field(request, "deadline", str, ""))
        self.stream: bool = _field(request, "stream", bool, False)
        self.state: Any = request.get("state")

        message = _field(request, "message", Mapping, {})
        self.text: str = _field(message, "text", str, "")
        self.data: Any = message.get("data")
        self.scope: str = _field(message, "scope", str, "")
        self.hint: str = _field(message, "hint", str, "")
        self.timer: str = _field(message, "timer", str, "")
        self.file: FileRef | None = _file(message.get("file"))
        self.method: str = _field(message, "method", str, "") or (self.text if self.type == DATA else "")

        webhook = _field(request, "webhook", Mapping, {})
        self.params: dict[str, str] = _strings(_field(webhook, "params", Mapping, {}), first=True)
        self.headers: dict[str, str] = _strings(_field(webhook, "headers", Mapping, {}), first=False)
        self.content_type: str = _field(webhook, "contentType", str, "")
        self.body: bytes = _base64(_field(webhook, "body", str, ""))
        if self.type == WEBHOOK:
            self.method = _field(webhook, "method", str, "")

        #: The steps and waits this request recorded so far, in order: {"name", "result"} or
        #: {"name", "error": {"status", "message"}} (docs/remote-agents.md, "Steps and waits").
        self.journal: list[Mapping[str, Any]] = _journal(request.get("journal"))

        self._on_delta = on_delta if self.stream else None
        self._deltas: list[str] = []
        self._state_set = False
        self._new_state: Any = None
        self._posts: list[dict[str, Any]] = []
        self._timers: dict[str, dict[str, Any]] = {}
        self._cancel: list[str] = []
        self._tells: list[dict[str, Any]] = []
        self._complete = False
        # The place of the next step or wait in the journal; the name of the step whose function
        # runs; the answer that stops the handler once it stepped or waits.
        self._cursor = 0
        self._in_step: str | None = None
        self._suspended: dict[str, Any] | None = None

    def header(self, name: str, default: str | None = None) -> str | None:
        """Returns a webhook caller's header, its name matched case-insensitively."""
        name = name.lower()
        for k, v in self.headers.items():
            if k.lower() == name:
                return v
        return default

    def remaining(self) -> float | None:
        """Seconds until agentbus stops waiting for the answer (None when it sent no deadline)."""
        if self.deadline is None:
            return None
        return (self.deadline - dt.datetime.now(dt.timezone.utc)).total_seconds()

    def set_state(self, state: Any) -> None:
        """Sets the instance's new state (any JSON value; None stores null). Without a call the
        state stays as it was."""
        self._acting("set_state")
        self._state_set, self._new_state = True, state

    def post(self, text: str | None = None, *, data: Any = None, participant: str | None = None,
             scope: str | None = None, hint: str | None = None) -> None:
        """Sends an Agent2User message to a thread of the instance: the request's participant's
        unless participant is given. It is sent once the answer's state is written."""
        self._acting("post")
        if text is None and data is None:
            raise ValueError("a post needs text or data")
        self._posts.append(_compact(participantId=participant, text=text, data=data, scope=scope, hint=hint))

    def set_timer(self, name: str, *, at: dt.datetime | str | None = None, after_ms: int | None = None,
                  every: dt.timedelta | str | None = None, cron: str | None = None, time_zone: str | None = None,
                  method: str | None = None, data: Any = None, text: str | None = None) -> None:
        """Sets a timer of the instance, replacing one of the same name. It fires once at a time
        (at, timezone-aware) or after_ms milliseconds, or repeatedly every interval (a timedelta
        or a Go duration such as "1m") or by cron (six fields, seconds first, read in time_zone).
        When due it sends a Data message to method with data, or a Chat message with text; the
        handler then sees the timer's name in Context.timer."""
        self._acting("set_timer")
        if not name:
            raise ValueError("a timer needs a name")
        if sum(x is not None for x in (at, after_ms, every, cron)) != 1:
            raise ValueError("a timer needs exactly one of at, after_ms, every and cron")
        if time_zone is not None and cron is None:
            raise ValueError("time_zone goes with cron")
        if (method is None) == (text is None):
            raise ValueError("a timer sends either a Data message (method) or a Chat message (text)")
        if data is not None and method is None:
            raise ValueError("a timer's data goes with method")
        if after_ms is not None and after_ms < 0:
            raise ValueError("after_ms is negative")
        timer = _compact(name=name, at=_rfc3339(at) if at is not None else None, afterMs=after_ms,
                         every=_duration(every) if every is not None else None, cron=cron, timeZone=time_zone,
                         method=method, data=data, text=text)
        # Setting replaces a timer of the same name, so that one answer names each timer once
        # and agentbus need not order its sets and cancels.
        self._timers.pop(name, None)
        if name in self._cancel:
            self._cancel.remove(name)
        self._timers[name] = timer

    def cancel_timer(self, name: str) -> None:
        """Cancels the instance's timer name, and one set earlier in this handler."""
        self._acting("cancel_timer")
        self._timers.pop(name, None)
        if name not in self._cancel:
            self._cancel.append(name)

    def tell(self, agent: str | None = None, *, activation: str | None = None, workflow_id: str | None = None,
             method: str | None = None, text: str | None = None, data: Any = None) -> None:
        """Sends an Agent2Agent message to an instance of the tenant: of agent (this agent by
        default), named by activation or workflow_id. With method it is a Data message with data
        as its parameters, else a Chat message with text. No answer comes back."""
        self._acting("tell")
        if (activation is None) == (workflow_id is None):
            raise ValueError("a tell names either an activation or a workflow_id")
        if (method is None) == (text is None):
            raise ValueError("a tell is either a Data message (method) or a Chat message (text)")
        self._tells.append(_compact(agent=agent, activation=activation, workflowId=workflow_id,
                                    type=DATA if method is not None else CHAT, method=method, text=text, data=data))

    def complete(self) -> None:
        """Completes the instance once the request is answered: its next request starts a new
        run (a new run_id) with fresh state (None). The rest of the answer is carried out as
        in any other; a failed request (Fail, Retry) completes nothing."""
        self._acting("complete")
        self._complete = True

    def delta(self, text: str) -> None:
        """Sends a piece of the reply's text as it is produced, when the caller asked for a
        stream; the reply's text, if the handler gives none, is the pieces joined."""
        if self.type == WEBHOOK:
            raise TypeError("a webhook answers with a Response, not a streamed reply")
        if not isinstance(text, str):
            raise TypeError(f"a delta is text, not {type(text).__name__}")
        if not text or self._suspended is not None:
            return  # after a step or a wait past the journal, nothing more is answered
        self._acting("delta")
        self._deltas.append(text)
        if self._on_delta is not None:
            self._on_delta(text)

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Runs fn() as a durable step of the request named name, and returns its result: fn runs
        once, and every later run of the request gets its result back from the journal without
        calling it (docs/remote-agents.md, "Steps and waits").

        The kit replays: the handler runs from the start on every send of the request, and its
        steps and waits are numbered in the order it makes them. A step whose place is in the
        journal returns the recorded result, or raises the recorded failure as Fail(status,
        message). A step past the journal calls fn and stops the handler: the kit answers with
        the step, agentbus records it and sends the request again with it in the journal, and the
        handler runs again, this time past the step. So a handler must make the same steps and
        waits in the same order on every run of a request; one whose step has another name than
        the journal's at its place fails the request (500).

        fn's result is any JSON value (at most 256 KiB encoded, as Go encodes it: <, > and & take
        6 bytes); a Fail it raises is recorded as the step's failure and raised again from the
        journal on every run; any other exception (Retry included) goes through the handler as
        if no step were made, and the step runs again on the request's next attempt. fn must not act on the context (set_state, post,
        set_timer, tell, complete, delta) nor make steps: do those after the step, from its
        result, where every run does them and the final answer carries them.

        The step stops the handler by raising an exception the kit catches: a BaseException,
        which `except Exception` lets through. Do not catch it (a bare `except:` or `except
        BaseException`) around a step or a wait; if a handler does, the kit answers with the step
        or the wait all the same, whatever the handler does next.

        Each step costs one more send of the request: n steps, n + 1 sends.
        """
        n = self._place(name, "step")
        if n < len(self.journal):
            return self._replay(n, name)
        if not callable(fn):
            raise TypeError(f"step {name!r}: fn is not callable")
        self._in_step = name
        try:
            result = fn()
        except Fail as e:
            return self._suspend({"step": {"name": name, "error": {"status": e.status, "message": e.message}}})
        finally:
            self._in_step = None
        try:
            encoded = _dumps(result)
        except (TypeError, ValueError) as e:
            raise TypeError(f"step {name!r}: its result is not JSON: {e}") from e
        size = _go_json_size(encoded)
        if size > MAX_STEP_RESULT:
            raise ValueError(f"step {name!r}: its result is {size} bytes encoded, more than {MAX_STEP_RESULT}")
        return self._suspend({"step": {"name": name, "result": result}})

    def wait(self, name: str, *, chat: bool = False, methods: Iterable[str] = (), signals: Iterable[str] = (),
             timeout: float | dt.timedelta | None = None) -> dict[str, Any]:
        """Waits, durably, for what ends the wait, and returns the event that ended it: the
        participant's next Chat message (chat), a Data call by the participant of one of methods,
        a signal of one of signals sent to the conversation over agentbus's API, or timeout
        (seconds or a timedelta, at most 6 days; None, the longest). At least one is given.

        The wait is a step (see step): past the journal it stops the handler, agentbus parks the
        request (its caller is answered 202) and holds the conversation's later requests behind
        it, and once the event comes it sends the request again with the wait's entry in the
        journal, whose result is the event: a dict with "type" ("chat", "data", "signal" or
        "timeout"), "text" (chat), "method" and "data" (data; a signal's name and data),
        "participantId", "requestId" and "at", each left out when empty.
        """
        if isinstance(methods, str) or isinstance(signals, str):
            raise TypeError(f"wait {name!r}: methods and signals are lists of names, not a str")
        methods, signals = list(methods), list(signals)
        for kind, names in (("method", methods), ("signal", signals)):
            for m in names:
                _check_name(f"wait {name!r}: {kind}", m)
        timeout_ms: int | None = None
        if timeout is not None:
            seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_WAIT_SECONDS:
                raise ValueError(f"wait {name!r}: timeout is more than 0 and at most {MAX_WAIT_SECONDS} seconds")
            timeout_ms = max(1, round(seconds * 1000))
        if not chat and not methods and not signals and timeout_ms is None:
            raise ValueError(f"wait {name!r}: a wait needs chat, methods, signals or a timeout")
        n = self._place(name, "wait")
        if n < len(self.journal):
            return self._replay(n, name)
        wait: dict[str, Any] = {"name": name}
        if chat:
            wait["chat"] = True
        if methods:
            wait["methods"] = methods
        if signals:
            wait["signals"] = signals
        if timeout_ms is not None:
            wait["timeoutMs"] = timeout_ms
        return self._suspend({"wait": wait})

    def sleep(self, seconds: float | dt.timedelta) -> None:
        """Sleeps durably: a wait named "sleep" with only a timeout (see wait). The request is
        parked, holding no thread and no connection, and sent again once the time has passed;
        the conversation's later requests queue behind it. Zero or less returns at once."""
        s = seconds.total_seconds() if isinstance(seconds, dt.timedelta) else seconds
        if s <= 0:
            return
        self.wait("sleep", timeout=s)

    def call(self, name: str, method: str, params: Any = None, *, agent: str | None = None,
             activation: str | None = None, workflow_type: str | None = None,
             workflow_id: str | None = None) -> Any:
        """Calls a Data method of an instance of the tenant (Agent2Agent), as a durable step named
        name, and returns the callee's result (its reply's data; None without). The instance is
        of agent (this agent when neither agent nor workflow_id is given) and workflow_type
        ("Supervisor Workflow" by default), named by activation ("default" by default), or by
        workflow_id instead.

        agentbus makes the call (docs/remote-agents.md, "Steps and waits"): past the journal the
        call stops the handler, as a step does, the host calls the method and sends the request
        again with the outcome in the journal, and every later run gets it from there. A call that
        failed raises Fail with the failure's status and message, on every run: 404 for an
        unknown agent, workflow type or method, 400 for parameters its schema refuses, 202 for a
        callee that waits (its Fail keeps the 202), the callee's own failure as it failed.
        params is any JSON value; the callee gets it as its parameters.
        """
        if not isinstance(method, str) or not method:
            raise ValueError(f"call {name!r} needs a method")
        for what, value in (("agent", agent), ("activation", activation), ("workflow_type", workflow_type),
                            ("workflow_id", workflow_id)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"call {name!r}: {what} is not a str")
        if params is not None:
            try:
                _dumps(params)
            except (TypeError, ValueError) as e:
                raise TypeError(f"call {name!r}: its params are not JSON: {e}") from e
        n = self._place(name, "call")
        if n < len(self.journal):
            return self._replay(n, name)
        if not agent and not workflow_id:
            agent = self.agent
        return self._suspend({"call": _compact(name=name, agent=agent or None, workflowType=workflow_type or None,
                                               activation=activation or None, workflowId=workflow_id or None,
                                               method=method, params=params)})

    def history(self, name: str, size: int = 20, scope: str | None = None) -> list[dict[str, Any]]:
        """Reads the request's thread, as a durable step named name, and returns its newest size
        messages (1 to 100) before the request's own, newest first, of scope only when given:
        dicts as agentbus's history API gives them. Chat, Data and File requests only.

        agentbus reads the thread (docs/remote-agents.md, "Steps and waits"): past the journal
        the read stops the handler, as a step does, and the request comes again with the messages
        in the journal; every later run gets the same messages from there.
        """
        if self.type == WEBHOOK:
            raise TypeError(f"history {name!r}: a webhook request has no thread to read")
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_HISTORY:
            raise ValueError(f"history {name!r}: size is 1 to {MAX_HISTORY}")
        if scope is not None and not isinstance(scope, str):
            raise TypeError(f"history {name!r}: scope is not a str")
        n = self._place(name, "history")
        if n < len(self.journal):
            result = self._replay(n, name)
            messages = result.get("messages") if isinstance(result, Mapping) else None
            return list(messages) if isinstance(messages, list) else []
        return self._suspend({"history": _compact(name=name, size=size, scope=scope or None)})

    def _place(self, name: str, kind: str) -> int:
        """Numbers the handler's next step or wait (its place in the journal, from 0)."""
        _check_name(kind, name)
        if self._suspended is not None:
            raise _Suspend()  # the handler went on after a suspension it caught
        if self._in_step is not None:
            raise RuntimeError(f"{kind} {name!r} inside the function of step {self._in_step!r}: steps do not nest")
        n = self._cursor
        if n >= MAX_STEPS:
            raise RuntimeError(f"{kind} {name!r}: a request makes at most {MAX_STEPS} steps and waits")
        self._cursor += 1
        return n

    def _replay(self, n: int, name: str) -> Any:
        """The recorded outcome of the step or wait at place n, which this run calls name."""
        entry = self.journal[n]
        if entry.get("name") != name:
            message = (f"step mismatch: step {n + 1} is {name!r} in this run, but {entry.get('name')!r} in the journal; "
                       "a handler makes the same steps and waits in the same order on every run of a request")
            self._suspend({"error": {"status": 500, "message": message, "retry": False}})
        error = entry.get("error")
        if isinstance(error, Mapping):
            status = error.get("status")
            failure = Fail(500, str(error.get("message", "")))
            if type(status) is int:
                failure.status = status  # as recorded: a call's 202 (the callee waits) included
            raise failure
        return entry.get("result")

    def _suspend(self, answer: dict[str, Any]) -> Any:
        """Stops the handler: the kit answers answer, whatever the handler does next."""
        self._suspended = answer
        raise _Suspend()

    def _acting(self, what: str) -> None:
        """Refuses an effect inside a step's function, which later runs do not call."""
        if self._in_step is not None:
            raise RuntimeError(f"{what} inside the function of step {self._in_step!r}: a step's function does not act "
                               "on the request; act after the step, from its result")

    def _answer(self, result: Any) -> dict[str, Any]:
        """The answer object of a handler that returned result."""
        answer: dict[str, Any] = {}
        if self.type == WEBHOOK:
            answer["response"] = _response(result)._json()
        else:
            reply = _reply(result)
            if self._deltas and (reply is None or reply.text is None):
                reply = Reply("".join(self._deltas), reply.data if reply else None)
            if reply is not None and reply._json():
                answer["reply"] = reply._json()
        if self._state_set:
            answer["state"] = self._new_state
        for key, effects in (("posts", self._posts), ("timers", list(self._timers.values())),
                             ("cancelTimers", self._cancel), ("tells", self._tells)):
            if effects:
                answer[key] = effects
        if self._complete:
            answer["complete"] = True
        return answer


def _journal(value: Any) -> list[Mapping[str, Any]]:
    """The request's journal: a list of entries, each with a name ([] when absent or null)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError("journal is not a list")
    for entry in value:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise ProtocolError("a journal entry is not an object with a name")
        error = entry.get("error")
        if error is not None and not isinstance(error, Mapping):
            raise ProtocolError("a journal entry's error is not an object")
    return value


def _go_json_size(encoded: str) -> int:
    """The length of JSON as agentbus measures it, in bytes: its UTF-8, with <, > and & escaped
    (6 bytes each) and U+2028 and U+2029 too, as Go's encoding/json writes it."""
    html = encoded.count("<") + encoded.count(">") + encoded.count("&")
    return len(encoded.encode()) + 5 * html + 3 * (encoded.count("\u2028") + encoded.count("\u2029"))


def _check_name(what: str, name: Any) -> None:
    """Checks a step's, a wait's, a method's or a signal's name: 1 to 256 bytes of text, without
    control characters or U+FFFD, as agentbus checks it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} needs a name")
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise ValueError(f"{what} {name!r}: the name is not text") from None
    if size > MAX_STEP_NAME:
        raise ValueError(f"{what} {name!r}: the name is longer than {MAX_STEP_NAME} bytes")
    if any(c < " " or "\x7f" <= c <= "\x9f" or c == "\ufffd" for c in name):
        raise ValueError(f"{what} {name!r}: the name holds a control character or U+FFFD")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _reply(result: Any) -> Reply | None:
    if result is None or isinstance(result, Reply):
        return result
    if isinstance(result, str):
        return Reply(text=result)
    if isinstance(result, (Response, bytes, bytearray)):
        raise TypeError(f"a Chat, Data or File handler returned {type(result).__name__}, not a reply")
    return Reply(data=result)


def _response(result: Any) -> Response:
    if isinstance(result, Response):
        return result
    if result is None:
        return Response()
    if isinstance(result, str):
        return Response.text(result)
    if isinstance(result, (bytes, bytearray)):
        return Response(200, bytes(result), "application/octet-stream")
    if isinstance(result, Reply):
        raise TypeError("a webhook handler returned a Reply, not a Response")
    return Response.json(result)


def _compact(**fields: Any) -> dict[str, Any]:
    """The fields that are set: the protocol's fields are all optional."""
    return {k: v for k, v in fields.items() if v is not None}


def _field(obj: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """obj[key] when it is of kind, default when it is absent or null."""
    value = obj.get(key)
    if value is None:
        return default
    # bool is an int in Python; a JSON true is no attempt number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError(f"{key} is not a {getattr(kind, '__name__', kind)}")
    return value


def _strings(obj: Mapping[str, Any], first: bool) -> dict[str, str]:
    """A map of strings from one whose values may also be lists of strings (the first value, or
    all joined with ", ", as Go joins repeated headers)."""
    out: dict[str, str] = {}
    for k, v in obj.items():
        if isinstance(v, list):
            v = (v[0] if v else "") if first else ", ".join(v)
        if not isinstance(v, str):
            raise ProtocolError(f"{k} is not a string")
        out[k] = v
    return out


def _base64(s: str, what: str = "the webhook body") -> bytes:
    try:
        return base64.b64decode(s, validate=True)
    except binascii.Error as e:
        raise ProtocolError(f"{what} is not base64") from e


def _time(s: str) -> dt.datetime | None:
    if not s:
        return None
    try:
        return dt.datetime.fromisoformat(s)
    except ValueError as e:
        raise ProtocolError(f"deadline {s!r} is not an RFC 3339 time") from e


def _file(value: Any) -> FileRef | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ProtocolError("file is not an object")
    content = _field(value, "content", str, None)
    return FileRef(_field(value, "name", str, ""), _field(value, "contentType", str, ""),
                   _field(value, "size", int, 0), _field(value, "sha256", str, ""),
                   _base64(content, "the file's content") if content is not None else None,
                   _field(value, "invalid", bool, False))


def _rfc3339(at: dt.datetime | str) -> str:
    if isinstance(at, str):
        return at
    if at.tzinfo is None:
        raise ValueError("a timer's at needs a time zone")
    return at.isoformat()


def _duration(every: dt.timedelta | str) -> str:
    """A Go duration: whole seconds as "90s", else milliseconds."""
    if isinstance(every, str):
        return every
    ms = round(every.total_seconds() * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"

