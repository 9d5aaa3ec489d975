"""Package agentbus_agent makes an HTTP service an agentbus remote agent, with the Python
standard library only.

It speaks protocol version 1 of docs/remote-agents.md: it checks each request's Standard Webhooks
signature, hands the request to the handler registered for it and turns what the handler returns
and does (reply, webhook response, new state, posts, timers, tells, completion, failure,
streamed deltas, durable steps and waits, Agent2Agent calls and reads of the thread) into the answer object. It is not a client of
agentbus's HTTP API: registering the agent is one POST of Agent.registration
(sdk/python/README.md shows it).

    from agentbus_agent import Agent

    agent = Agent("EchoPy", secret="whsec_...")

    @agent.data("sum", description="Adds numbers.")
    def sum_(ctx):
        return {"sum": sum(ctx.data["values"])}

    agent.serve("127.0.0.1", 8701)
"""

import logging as _logging
import sys as _sys

if _sys.version_info < (3, 11):
    raise ImportError("agentbus_agent needs Python 3.11 or newer")

from .agent import Agent  # noqa: E402
from .context import (  # noqa: E402
    CHAT, DATA, FILE, MAX_HISTORY, MAX_STEP_NAME, MAX_STEP_RESULT, MAX_STEPS, MAX_WAIT_SECONDS, PROTOCOL, WEBHOOK,
    Context, Fail, FileRef, Handler, ProtocolError, Reply, Response, Retry,
)
from .server import AgentServer  # noqa: E402
from .signature import TOLERANCE_SECONDS, SignatureError, decode_secret, new_secret, sign, verify  # noqa: E402

# A library logs only where its user configures logging.
_logging.getLogger("agentbus_agent").addHandler(_logging.NullHandler())

__all__ = [
    "CHAT", "DATA", "FILE", "PROTOCOL", "WEBHOOK", "TOLERANCE_SECONDS",
    "MAX_HISTORY", "MAX_STEPS", "MAX_STEP_NAME", "MAX_STEP_RESULT", "MAX_WAIT_SECONDS",
    "Agent", "AgentServer", "Context", "Fail", "FileRef", "Handler", "ProtocolError", "Reply", "Response", "Retry",
    "SignatureError", "decode_secret", "new_secret", "sign", "verify",
]
