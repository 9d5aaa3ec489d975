import assert from "node:assert/strict";
import { test } from "node:test";

import { Agent, newSecret, secretKey, sign, SignatureError, verify } from "../src/index.js";
import { data, MemoryLogger, post, SECRET, serve } from "./helpers.js";

// The example of the Standard Webhooks specification.
const spec = {
  secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
  id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
  timestamp: 1614265330,
  body: '{"test": 2432232314}',
  signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
};

function specHeaders(over: Record<string, string | undefined> = {}): Record<string, string> {
  const h: Record<string, string | undefined> = {
    "webhook-id": spec.id,
    "webhook-timestamp": String(spec.timestamp),
    "webhook-signature": spec.signature,
    ...over,
  };
  return Object.fromEntries(Object.entries(h).filter(([, v]) => v !== undefined)) as Record<string, string>;
}

test("sign gives the Standard Webhooks example's signature", () => {
  assert.equal(sign(spec.secret, spec.id, spec.timestamp, spec.body), spec.signature);
  assert.equal(sign(spec.secret, spec.id, String(spec.timestamp), Buffer.from(spec.body)), spec.signature);
});

test("verify accepts genuine requests", async (t) => {
  const key = secretKey(spec.secret);
  const other = secretKey(newSecret());
  const body = Buffer.from(spec.body);
  const cases: { name: string; headers: Record<string, string>; keys?: Buffer[]; now?: number }[] = [
    { name: "the example", headers: specHeaders() },
    { name: "4 minutes later", headers: specHeaders(), now: spec.timestamp + 4 * 60 },
    { name: "by a clock 4 minutes behind", headers: specHeaders(), now: spec.timestamp - 4 * 60 },
    {
      name: "among signatures of another version and another secret",
      headers: specHeaders({ "webhook-signature": `v2,bm90IGl0 v1,bm90IGl0IGVpdGhlcg== ${spec.signature}` }),
    },
    { name: "with the second of two keys", headers: specHeaders(), keys: [other, key] },
  ];
  for (const c of cases) {
    await t.test(c.name, () => {
      verify(c.keys ?? [key], c.headers, body, c.now ?? spec.timestamp);
    });
  }
});

test("verify refuses requests that are not genuine", async (t) => {
  const key = secretKey(spec.secret);
  const body = Buffer.from(spec.body);
  const cases: { name: string; headers: Record<string, string>; body?: string; now?: number; keys?: Buffer[]; reason: RegExp }[] = [
    { name: "a changed body", headers: specHeaders(), body: '{"test": 2432232315}', reason: /no valid signature/ },
    { name: "another webhook-id", headers: specHeaders({ "webhook-id": "msg_other" }), reason: /no valid signature/ },
    {
      name: "a new timestamp on the old signature",
      headers: specHeaders({ "webhook-timestamp": String(spec.timestamp + 600) }),
      now: spec.timestamp + 600,
      reason: /no valid signature/,
    },
    { name: "6 minutes old", headers: specHeaders(), now: spec.timestamp + 6 * 60, reason: /5 minutes/ },
    { name: "6 minutes ahead of the clock", headers: specHeaders(), now: spec.timestamp - 6 * 60, reason: /5 minutes/ },
    { name: "another secret", headers: specHeaders(), keys: [secretKey(newSecret())], reason: /no valid signature/ },
    { name: "no signature", headers: specHeaders({ "webhook-signature": undefined }), reason: /missing/ },
    { name: "no id", headers: specHeaders({ "webhook-id": undefined }), reason: /missing/ },
    { name: "no timestamp", headers: specHeaders({ "webhook-timestamp": undefined }), reason: /missing/ },
    { name: "a timestamp that is not a number", headers: specHeaders({ "webhook-timestamp": "1614265330.5" }), reason: /not a number/ },
    {
      name: "a signature of another version only",
      headers: specHeaders({ "webhook-signature": spec.signature.replace("v1,", "v2,") }),
      reason: /no valid signature/,
    },
    { name: "a truncated signature", headers: specHeaders({ "webhook-signature": spec.signature.slice(0, 20) }), reason: /no valid signature/ },
  ];
  for (const c of cases) {
    await t.test(c.name, () => {
      assert.throws(
        () => verify(c.keys ?? [key], c.headers, c.body === undefined ? body : Buffer.from(c.body), c.now ?? spec.timestamp),
        (err: Error) => err instanceof SignatureError && c.reason.test(err.message),
      );
    });
  }
});

test("secretKey takes whsec_ and the base64 of 24 to 64 bytes only", async (t) => {
  assert.equal(secretKey(spec.secret).length, 24);
  assert.equal(secretKey(newSecret()).length, 32);
  assert.equal(secretKey("whsec_" + Buffer.alloc(64, 1).toString("base64")).length, 64);
  for (const [name, secret] of [
    ["no prefix", Buffer.alloc(32, 1).toString("base64")],
    ["another prefix", "wh_" + Buffer.alloc(32, 1).toString("base64")],
    ["not base64", "whsec_" + "!".repeat(40)],
    ["23 bytes", "whsec_" + Buffer.alloc(23, 1).toString("base64")],
    ["65 bytes", "whsec_" + Buffer.alloc(65, 1).toString("base64")],
    ["empty", ""],
  ] as const) {
    await t.test(name, () => {
      assert.throws(() => secretKey(secret), TypeError);
      assert.throws(() => new Agent({ name: "A", secret }), TypeError);
    });
  }
});

test("the server answers 401 to a request that is not genuine, without calling the handler", async (t) => {
  let calls = 0;
  const log = new MemoryLogger();
  const agent = new Agent({ name: "Guarded", secret: SECRET, logger: log });
  agent.data("sum", () => {
    calls++;
    return { data: { sum: 0 } };
  });
  const { url } = await serve(t, agent);
  const now = Math.floor(Date.now() / 1000);
  const cases: { name: string; secret?: string; timestamp?: number; headers?: Record<string, string | undefined> }[] = [
    { name: "another secret", secret: newSecret() },
    { name: "6 minutes old", timestamp: now - 6 * 60 },
    { name: "no signature", headers: { "webhook-signature": undefined } },
    { name: "a signature of another body", headers: { "webhook-signature": sign(SECRET, "msg_x", now, "{}"), "webhook-id": "msg_x" } },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const a = await post(url, data("sum", { values: [1] }), c);
      assert.equal(a.status, 401, a.text);
      assert.match(a.headers["content-type"] ?? "", /^text\/plain/);
    });
  }
  assert.equal(calls, 0);
  assert.equal(log.lines.length, cases.length);
  assert.ok(log.lines.every((l) => l.level === "warn" && !JSON.stringify(l.fields).includes(SECRET)));
  const ok = await post(url, data("sum", { values: [1] }));
  assert.equal(ok.status, 200, ok.text);
  assert.equal(calls, 1);
});

test("a rotated secret: requests signed with either secret are served, the first is registered", async (t) => {
  const next = newSecret();
  const agent = new Agent({ name: "Rotating", secret: [next, SECRET], logger: null });
  agent.data("ping", () => ({ text: "pong" }));
  const { url } = await serve(t, agent);
  for (const secret of [SECRET, next]) {
    const a = await post(url, data("ping", null), { secret });
    assert.equal(a.status, 200, a.text);
  }
  assert.equal((await post(url, data("ping", null), { secret: newSecret() })).status, 401);
  assert.equal(agent.registration("http://127.0.0.1:1/x").secret, next);
});
