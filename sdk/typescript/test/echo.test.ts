import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as path from "node:path";
import { type TestContext, test } from "node:test";

import { echoAgent } from "../examples/echo.js";
import type { Registration } from "../src/index.js";
import { call, data, post, request, SECRET, serve } from "./helpers.js";

test("EchoTS: webhook echo answers the body back with its content type", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  const body = Buffer.from([0xde, 0xad, 0xbe, 0xef, 0]);
  const a = await call(url, request({ type: "Webhook", webhook: { method: "echo", contentType: "image/x-test", body: body.toString("base64") } }));
  assert.equal(a.response?.status, 200);
  assert.equal(a.response?.contentType, "image/x-test");
  assert.deepEqual(Buffer.from(a.response?.bodyBase64 ?? "", "base64"), body);
  const status = await call(url, request({ type: "Webhook", webhook: { method: "status", params: { code: "418" } } }));
  assert.deepEqual(status.response, { status: 418, contentType: "application/json", body: '{"status":418}' });
});

test("EchoTS: Data echo, sum and count, Chat and File", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  assert.deepEqual(await call(url, data("echo", { a: [1, "b"] })), { reply: { data: { a: [1, "b"] } } });
  assert.deepEqual(await call(url, data("echo", null)), { reply: { data: {} } });
  assert.deepEqual(await call(url, data("Sum", { values: [2, 3, 0.5] })), { reply: { data: { sum: 5.5 } } });

  // The counter lives in the state agentbus keeps: each answer's state is the next request's.
  let state: unknown = null;
  for (const n of [1, 2, 3]) {
    const a = await call(url, data("count", {}, { state, runId: "run-7" }));
    assert.deepEqual(a.reply, { data: { count: n, runId: "run-7" } });
    state = a.state;
  }
  const hook = await call(url, request({ type: "Webhook", state, webhook: { method: "count" } }));
  assert.deepEqual(JSON.parse(hook.response?.body ?? ""), { count: 4, runId: "run-1" });

  assert.deepEqual(await call(url, request({ type: "Chat", message: { text: "hello there" } })), { reply: { text: "You said: hello there" } });
  const streamed = await post(url, request({ type: "Chat", stream: true, message: { text: "hello there" } }));
  assert.deepEqual(
    streamed.text.split("\n").filter(Boolean).map((l) => JSON.parse(l)),
    [{ delta: "You " }, { delta: "said: " }, { delta: "hello " }, { delta: "there" }, { reply: { text: "You said: hello there" } }],
  );

  const file = { name: "a.txt", contentType: "text/plain", size: 5, url: "http://files/a.txt" };
  assert.deepEqual(await call(url, request({ type: "File", message: { text: "a.txt", file } })), {
    reply: { text: "Received a.txt (5 bytes)", data: { fileName: "a.txt", contentType: "text/plain", size: 5 } },
  });
  assert.deepEqual(await call(url, request({ type: "File", message: { text: "" } })), { reply: { text: "No file data received." } });
});

test("EchoTS: fail, flaky, remind, tick and tell", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  assert.deepEqual(await call(url, data("fail", { status: 418, message: "teapot" })), { error: { status: 418, message: "teapot", retry: false } });
  assert.deepEqual(await call(url, data("flaky", { attempts: 2 })), { error: { status: 503, message: "attempt 1 fails on purpose", retry: true } });
  assert.deepEqual(await call(url, data("flaky", { attempts: 2 }, { attempt: 2 })), { reply: { data: { attempt: 2 } } });

  const set = await call(url, data("remind", { text: "stretch", ms: 60_000 }, { requestId: "r1" }));
  assert.equal(set.timers?.length, 1);
  assert.deepEqual({ ...set.timers?.[0], at: undefined }, { name: "remind:r1", at: undefined, method: "remind", data: { text: "stretch", ms: 60_000 } });
  assert.ok(Math.abs(Date.parse(set.timers?.[0]?.at ?? "") - Date.now() - 60_000) < 5_000);
  const fired = await call(url, data("remind", { text: "stretch", ms: 60_000 }, { message: { method: "remind", data: { text: "stretch", ms: 60_000 }, timer: "remind:r1", scope: "s" } }));
  assert.deepEqual(fired, { posts: [{ text: "stretch", scope: "s" }] });
  assert.equal((await call(url, data("remind", { text: "" }))).error?.status, 400);

  assert.deepEqual(await call(url, data("tick", { seconds: 5 })), {
    reply: { data: { ticking: true, every: "5s" } },
    timers: [{ name: "tick", every: "5s", method: "tick" }],
  });
  assert.deepEqual(await call(url, data("tick", null, { state: { count: 2, ticks: 1 }, message: { method: "tick", timer: "tick" } })), {
    state: { count: 2, ticks: 2 },
    posts: [{ text: "tick 2", data: { tick: 2 } }],
  });
  assert.deepEqual(await call(url, data("tick", { stop: true })), { reply: { data: { ticking: false } }, cancelTimers: ["tick"] });

  assert.deepEqual(await call(url, data("tell", { activation: "b", method: "count" })), {
    reply: { data: { told: true } },
    tells: [{ activation: "b", type: "Data", method: "count" }],
  });
});

// startEcho runs the example as a program and resolves with the registration it prints.
async function startEcho(t: TestContext, args: string[], env: Record<string, string>): Promise<Registration> {
  const program = path.join(__dirname, "..", "examples", "echo.js");
  const child = spawn(process.execPath, [program, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  t.after(() => child.kill());
  let out = "";
  let err = "";
  child.stderr.on("data", (c) => (err += c));
  return new Promise<Registration>((resolve, reject) => {
    child.stdout.on("data", (c) => {
      out += c;
      try {
        resolve(JSON.parse(out));
      } catch {
        // not all of it yet
      }
    });
    child.once("exit", (code) => reject(new Error(`echo exited with ${code}: ${err}`)));
  });
}

test("EchoTS runs as a program: it prints its registration and serves what it registers", async (t) => {
  const [reg, made] = await Promise.all([
    startEcho(t, ["--port", "0", "--secret", SECRET, "--name", "EchoTest"], { AGENT_URL: "" }),
    // Without a secret it makes one, and registers it.
    startEcho(t, ["--port", "0"], { AGENT_SECRET: "", AGENT_URL: "" }),
  ]);
  assert.equal(reg.name, "EchoTest");
  assert.equal(reg.secret, SECRET);
  assert.equal(reg.chat, true);
  assert.equal(reg.file, true);
  assert.match(reg.url, /^http:\/\/127\.0\.0\.1:\d+\/agentbus$/);
  assert.deepEqual(reg.webhooks.sort(), ["count", "echo", "state", "status"]);
  assert.deepEqual(reg.methods.map((m) => m.name).sort(), ["count", "echo", "fail", "flaky", "remind", "sum", "tell", "tick"]);
  assert.deepEqual(await call(reg.url, data("sum", { values: [1, 2] })), { reply: { data: { sum: 3 } } });

  assert.equal(made.name, "EchoTS");
  assert.match(made.secret, /^whsec_/);
  assert.notEqual(made.secret, SECRET);
  assert.deepEqual(await call(made.url, data("sum", { values: [4] }), { secret: made.secret }), { reply: { data: { sum: 4 } } });
  assert.equal((await post(made.url, data("sum", { values: [4] }))).status, 401);
});
