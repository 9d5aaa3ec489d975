"""Standard Webhooks signatures: how agentbus signs the requests it sends a remote agent.

A request carries ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``; the signature
is ``v1,`` and the base64 HMAC-SHA256, keyed with the agent's secret, of
``{webhook-id}.{webhook-timestamp}.{body}``. The header may list several space-separated
signatures (of other versions, or of other secrets while one is rotated); one match is enough.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping

#: How far a request's timestamp may be from the receiver's clock, either way, in seconds.
TOLERANCE_SECONDS = 5 * 60

SECRET_PREFIX = "whsec_"
# The key sizes a registration accepts.
_MIN_KEY, _MAX_KEY = 24, 64


class SignatureError(ValueError):
    """A request is not signed by the agent's secret, or not recently. The message names the
    check that failed and is safe to show the sender."""


@functools.lru_cache(maxsize=64)  # verify decodes the agent's secret on every request
def decode_secret(secret: str) -> bytes:
    """Returns the HMAC key of a ``whsec_`` secret, or raises ValueError when it is not one that
    agentbus accepts (``whsec_`` and the base64 of 24 to 64 bytes)."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("the secret does not start with whsec_")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
    except binascii.Error as e:
        raise ValueError("the secret is not whsec_ and base64") from e
    if not _MIN_KEY <= len(key) <= _MAX_KEY:
        raise ValueError(f"the secret's key has {len(key)} bytes, not {_MIN_KEY} to {_MAX_KEY}")
    return key


def new_secret() -> str:
    """Returns a new random secret of 32 bytes, as a registration takes it."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Returns the ``webhook-signature`` value (``v1,…``) of a request: what agentbus sends, and
    what tests use to make signed requests."""
    mac = hmac.new(decode_secret(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def verify(secret: str, headers: Mapping[str, str], body: bytes, now: float | None = None) -> None:
    """Checks a request: a ``v1`` signature of ``webhook-signature`` matches the raw body signed
    with secret, and ``webhook-timestamp`` is within TOLERANCE_SECONDS of now (Unix seconds, the
    clock by default). Raises SignatureError otherwise.

    headers is any mapping of the request's headers; names match case-insensitively.
    """
    key = decode_secret(secret)
    h = {name.lower(): value for name, value in headers.items()}
    msg_id = h.get("webhook-id", "")
    ts = h.get("webhook-timestamp", "")
    sigs = h.get("webhook-signature", "")
    if not (msg_id and ts and sigs):
        raise SignatureError("missing webhook-id, webhook-timestamp or webhook-signature")
    if not (ts.isascii() and ts.isdigit()):
        raise SignatureError("webhook-timestamp is not a number")
    if abs((time.time() if now is None else now) - int(ts)) > TOLERANCE_SECONDS:
        raise SignatureError("webhook-timestamp is more than 5 minutes off")
    want = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    for sig in sigs.split():
        version, _, b64 = sig.partition(",")
        if version != "v1":
            continue  # another version
        try:
            got = base64.b64decode(b64, validate=True)
        except binascii.Error:
            continue
        if hmac.compare_digest(got, want):
            return
    raise SignatureError("no valid signature")
