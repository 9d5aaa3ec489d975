"""An agent: its name, its secret, its handlers and its registration, and how it answers a
request with the handler registered for it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .context import CHAT, FILE, WEBHOOK, Context, Fail, Handler, Retry, _compact, _dumps, _Suspend
from .server import AgentServer
from .signature import decode_secret

_log = logging.getLogger("agentbus_agent")


@dataclass(frozen=True)
class _Method:
    name: str
    handler: Handler
    description: str | None
    schema: Mapping[str, Any] | None


class Agent:
    """A remote agent: its name, the secret agentbus signs its requests with, and its handlers.

    A handler takes a Context and returns the reply. Chat, Data and File handlers return a
    Reply, a str (the reply's text), None (no reply) or any other JSON value (the reply's data).
    Webhook handlers return a Response, a str (text/plain), bytes (application/octet-stream),
    None (an empty 200) or any other JSON value (application/json). A handler fails the request by
    raising Fail, asks for it to be tried again by raising Retry; any other exception is logged and
    answered like Go's plain handler error, 500 "the handler failed", not retried. A handler
    that makes durable steps or waits (Context.step, wait, sleep) is stopped at each new one and
    run again once agentbus recorded it.

    A handler blocks by default: the server runs it on a thread of its own, so it may wait on
    I/O (a model, a database) or sleep without holding up other requests. One registered with
    blocking=False runs on the server's event loop instead, with no hand-over between threads,
    which costs about half as much CPU a request; it must return quickly and never wait, or every
    request the server holds waits with it.

    Registering a name twice raises ValueError. The optional fields go into the registration
    when set; agentbus's defaults apply otherwise.
    """

    def __init__(self, name: str, secret: str, *, workflow_types: list[str] | None = None,
                 tenants: list[str] | None = None, timeout_seconds: int | None = None,
                 max_concurrent: int | None = None, partitions: int | None = None,
                 logger: logging.Logger | None = None) -> None:
        if not name:
            raise ValueError("an agent needs a name")
        decode_secret(secret)
        if timeout_seconds is not None and not 1 <= timeout_seconds <= 300:
            raise ValueError("timeout_seconds is 1 to 300")
        if max_concurrent is not None and not 1 <= max_concurrent <= 1024:
            raise ValueError("max_concurrent is 1 to 1024")
        if partitions is not None and not 1 <= partitions <= 1024:
            raise ValueError("partitions is 1 to 1024")
        self.name = name
        self.secret = secret
        self.workflow_types = workflow_types
        self.tenants = tenants
        self.timeout_seconds = timeout_seconds
        self.max_concurrent = max_concurrent
        self.partitions = partitions
        self.log = logger or _log
        self._chat: Handler | None = None
        self._file: Handler | None = None
        self._webhooks: dict[str, Handler] = {}
        # Data methods by lowercased name: they match case-insensitively, as Go agents' do.
        self._methods: dict[str, _Method] = {}
        # The handlers registered with blocking=False.
        self._nonblocking: set[Handler] = set()

    def _register(self, fn: Handler, blocking: bool) -> None:
        if not blocking:
            self._nonblocking.add(fn)

    def data(self, name: str, *, description: str | None = None,
             schema: Mapping[str, Any] | None = None, blocking: bool = True) -> Callable[[Handler], Handler]:
        """Registers the decorated function as the Data method name. description and schema (a
        JSON Schema of its parameters) are shown to MCP clients and chat models, and agentbus
        checks every call's parameters against the schema before the call reaches the agent.
        blocking: see Agent."""
        if not name:
            raise ValueError("a Data method needs a name")
        if name.lower() in self._methods:
            raise ValueError(f"Data method {name!r} is registered twice")

        def register(fn: Handler) -> Handler:
            self._methods[name.lower()] = _Method(name, fn, description, schema)
            self._register(fn, blocking)
            return fn
        return register

    def webhook(self, name: str, *, blocking: bool = True) -> Callable[[Handler], Handler]:
        """Registers the decorated function as the webhook method name (matched exactly).
        blocking: see Agent."""
        if not name:
            raise ValueError("a webhook method needs a name")
        if name in self._webhooks:
            raise ValueError(f"webhook method {name!r} is registered twice")

        def register(fn: Handler) -> Handler:
            self._webhooks[name] = fn
            self._register(fn, blocking)
            return fn
        return register

    def chat(self, fn: Handler | None = None, *, blocking: bool = True) -> Any:
        """Registers fn as the handler of Chat messages: @agent.chat, or
        @agent.chat(blocking=False) (see Agent)."""
        def register(fn: Handler) -> Handler:
            if self._chat is not None:
                raise ValueError("the chat handler is registered twice")
            self._chat = fn
            self._register(fn, blocking)
            return fn
        return register if fn is None else register(fn)

    def file(self, fn: Handler | None = None, *, blocking: bool = True) -> Any:
        """Registers fn as the handler of File messages: @agent.file, or
        @agent.file(blocking=False) (see Agent)."""
        def register(fn: Handler) -> Handler:
            if self._file is not None:
                raise ValueError("the file handler is registered twice")
            self._file = fn
            self._register(fn, blocking)
            return fn
        return register if fn is None else register(fn)

    def registration(self, url: str) -> dict[str, Any]:
        """The body that registers the agent with agentbus, served at url. It holds the secret."""
        methods = [_compact(name=m.name, description=m.description, schema=m.schema) for m in self._methods.values()]
        body: dict[str, Any] = {"name": self.name, "url": url, "chat": self._chat is not None,
                                "file": self._file is not None, "webhooks": list(self._webhooks), "methods": methods}
        body.update(_compact(workflowTypes=self.workflow_types, tenants=self.tenants, secret=self.secret,
                             timeoutSeconds=self.timeout_seconds, maxConcurrent=self.max_concurrent,
                             partitions=self.partitions))
        return body

    def answer(self, request: Mapping[str, Any], on_delta: Callable[[str], None] | None = None) -> bytes:
        """Runs the handler of a decoded, verified request and returns its answer object as JSON.
        on_delta receives the streamed pieces of a request with stream true. It raises
        ProtocolError for a request that is not one of protocol version 1; a handler's failure
        is in the answer. For serving the agent from another HTTP server; serve does all this."""
        ctx = Context(request, on_delta)
        return self._run(ctx, self._route(ctx))

    def _blocks(self, handler: Handler | None) -> bool:
        """Whether handler must run on a thread of its own (see Agent)."""
        return handler is not None and handler not in self._nonblocking

    def _run(self, ctx: Context, handler: Handler | None) -> bytes:
        """Runs the request's handler (None: there is none) and returns the answer object."""
        if handler is None:
            return _dumps({"error": _error(404, "the agent has no such method")}).encode()
        try:
            result = handler(ctx)
            if ctx._suspended is None:
                return _dumps(ctx._answer(result)).encode()
        except _Suspend:
            pass
        except Fail as e:
            if ctx._suspended is None:
                return _dumps({"error": _error(e.status, e.message)}).encode()
        except Retry as e:
            if ctx._suspended is None:
                self.log.info("handler asked to try again: %s (%s %s, request %s, attempt %d)",
                              e.message, ctx.type, ctx.method, ctx.request_id, ctx.attempt)
                return _dumps({"error": _error(Retry.status, e.message, retry=True)}).encode()
        except Exception:
            if ctx._suspended is None:
                # The cause stays in the log: the caller sees only that the handler failed.
                self.log.exception("handler failed: %s %s, request %s", ctx.type, ctx.method, ctx.request_id)
                return _dumps({"error": _error(500, "the handler failed")}).encode()
        # The handler made a step or a wait past the journal (or its step mismatched the
        # journal's): that is the answer, whatever the handler did after it.
        suspended = ctx._suspended
        if suspended is None:
            # _Suspend raised by something other than the context: a handler's mistake.
            self.log.error("handler raised the kit's internal suspension: %s %s, request %s", ctx.type, ctx.method, ctx.request_id)
            suspended = {"error": _error(500, "the handler failed")}
        elif "error" in suspended:
            self.log.error("handler failed: %s (%s %s, request %s)", suspended["error"]["message"], ctx.type, ctx.method, ctx.request_id)
        return _dumps(suspended).encode()

    def _route(self, ctx: Context) -> Handler | None:
        if ctx.type == CHAT:
            return self._chat
        if ctx.type == FILE:
            return self._file
        if ctx.type == WEBHOOK:
            return self._webhooks.get(ctx.method)
        m = self._methods.get(ctx.method.lower())
        return m.handler if m else None

    def server(self, host: str = "127.0.0.1", port: int = 8701) -> AgentServer:
        """Returns an HTTP server of the agent, bound and not yet serving (port 0 picks one)."""
        return AgentServer(self, host, port)

    def serve(self, host: str = "127.0.0.1", port: int = 8701) -> None:
        """Serves the agent until interrupted (Ctrl-C, SIGTERM), then lets in-flight requests
        finish."""
        self.server(host, port).run()


def _error(status: int, message: str, retry: bool = False) -> dict[str, Any]:
    return {"status": status, "message": message, "retry": retry}

