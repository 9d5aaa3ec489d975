// Standard Webhooks signatures (https://www.standardwebhooks.com/), as agentbus signs the requests
// it sends a remote agent: HMAC-SHA256 with the agent's secret over "{id}.{timestamp}.{body}".

import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";

/** How far a request's webhook-timestamp may be from this machine's clock, in seconds. */
export const TOLERANCE_SECONDS = 5 * 60;

const SECRET_PREFIX = "whsec_";
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** SignatureError is why a request's signature was refused; its message is safe to answer. */
export class SignatureError extends Error {
  override name = "SignatureError";
}

/**
 * secretKey returns the HMAC key of a secret: "whsec_" and the base64 of 24 to 64 bytes, as
 * agentbus makes and accepts them. It throws a TypeError for anything else, so that a mistyped
 * secret fails at start rather than as a 401 on every request.
 */
export function secretKey(secret: string): Buffer {
  const b64 = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : "";
  const key = BASE64.test(b64) ? Buffer.from(b64, "base64") : Buffer.alloc(0);
  if (key.length < 24 || key.length > 64) {
    throw new TypeError("a secret is whsec_ and the base64 of 24 to 64 bytes");
  }
  return key;
}

/** newSecret returns a fresh secret: whsec_ and 32 random bytes in base64. */
export function newSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString("base64");
}

/**
 * sign returns the webhook-signature value ("v1,…") of a request, as agentbus computes it:
 * for tests of an agent, and for tools that call one.
 */
export function sign(secret: string, id: string, timestamp: number | string, body: Uint8Array | string): string {
  return "v1," + mac(secretKey(secret), id, String(timestamp), body).toString("base64");
}

/**
 * verify checks a request's webhook-id, webhook-timestamp and webhook-signature headers against
 * its raw body: one "v1," signature must match with one of the keys, and the timestamp must be
 * within TOLERANCE_SECONDS of now (Unix seconds). It throws a SignatureError otherwise.
 */
export function verify(keys: readonly Buffer[], headers: IncomingHttpHeaders, body: Uint8Array, now = Date.now() / 1000): void {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sigs = header(headers, "webhook-signature");
  if (!id || !ts || !sigs) {
    throw new SignatureError("missing webhook-id, webhook-timestamp or webhook-signature");
  }
  if (!/^[0-9]{1,15}$/.test(ts)) {
    throw new SignatureError("webhook-timestamp is not a number");
  }
  if (Math.abs(now - Number(ts)) > TOLERANCE_SECONDS) {
    throw new SignatureError("webhook-timestamp is more than 5 minutes off");
  }
  const wants = keys.map((key) => mac(key, id, ts, body));
  for (const sig of sigs.split(" ")) {
    if (!sig.startsWith("v1,")) continue; // another version
    const got = Buffer.from(sig.slice(3), "base64");
    // Every key is compared, so that the time taken does not tell which one matched.
    let ok = false;
    for (const want of wants) {
      if (got.length === want.length && timingSafeEqual(got, want)) ok = true;
    }
    if (ok) return;
  }
  throw new SignatureError("no valid signature");
}

function mac(key: Buffer, id: string, ts: string, body: Uint8Array | string): Buffer {
  return createHmac("sha256", key).update(`${id}.${ts}.`).update(body).digest();
}

function header(headers: IncomingHttpHeaders, name: string): string {
  const v = headers[name];
  return Array.isArray(v) ? v.join(" ") : (v ?? "");
}
