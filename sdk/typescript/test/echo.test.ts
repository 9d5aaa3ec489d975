import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import * as path from "node:path";
import { type TestContext, test } from "node:test";

import { echoAgent } from "../examples/echo.js";
import type { JournalEntry, Registration, WireAnswer, WireRequest } from "../src/index.js";
import { call, data, post, request, SECRET, serve } from "./helpers.js";

const sha = (b: Buffer | string): string => createHash("sha256").update(b).digest("hex");

// webhook is a Webhook request of a method with a body and query parameters.
function webhook(method: string, body: Buffer | string = "", params: Record<string, string> = {}, fields: Partial<WireRequest> = {}): WireRequest {
  return request({ ...fields, type: "Webhook", webhook: { method, params, contentType: "application/json", body: Buffer.from(body).toString("base64") } });
}

test("EchoTS: webhook echo, verify and status answer as Go's Echo", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  const body = '{"item":"tea","qty":2}';
  const echoed = await call(url, webhook("echo", body, { order: "17" }));
  assert.deepEqual(echoed.response, {
    status: 200,
    contentType: "application/json",
    body: JSON.stringify({ params: { order: "17" }, body, size: 22, sha256: sha(body) }),
  });
  const binary = Buffer.from([0xde, 0xad, 0xbe, 0xef, 0]);
  assert.deepEqual(JSON.parse((await call(url, webhook("echo", binary))).response?.body ?? ""), {
    params: {},
    bodyBase64: binary.toString("base64"),
    size: 5,
    sha256: sha(binary),
  });
  // JSON as Go writes it: <, > and & escaped.
  assert.equal((await call(url, webhook("echo", "<a> &"))).response?.body, `{"params":{},"body":"\\u003ca\\u003e \\u0026","size":5,"sha256":"${sha("<a> &")}"}`);

  const plain = "text/plain; charset=utf-8";
  assert.deepEqual((await call(url, webhook("verify", "", { challenge: "abc123" }))).response, { status: 200, contentType: plain, body: "abc123" });
  assert.deepEqual((await call(url, webhook("verify", '{"challenge":"xyz"}'))).response, { status: 200, contentType: plain, body: "xyz" });
  assert.deepEqual((await call(url, webhook("verify", '{"Challenge":"Q"}'))).response?.body, "Q", "keys match ignoring case");
  for (const b of ["", '{"challenge":5}', "[1]"]) {
    assert.deepEqual((await call(url, webhook("verify", b))).response, { status: 400, contentType: plain, body: "missing challenge" });
  }

  assert.deepEqual((await call(url, webhook("status", "", { code: "418" }))).response, { status: 418, contentType: "application/json", body: '{"status":418}' });
  assert.equal((await call(url, webhook("status", "", { code: "+201" }))).response?.status, 201);
  for (const code of ["99", "600", "abc", "", "1e3"]) {
    assert.deepEqual((await call(url, webhook("status", "", { code }))).response, {
      status: 400,
      contentType: "application/json",
      body: '{"error":"code must be a status from 200 to 599"}',
    });
  }
});

test("EchoTS: webhook count, sleep and state keep Echo's state", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  const first = await call(url, webhook("count"));
  assert.deepEqual(JSON.parse(first.response?.body ?? ""), { count: 1, runId: "run-1" });
  assert.deepEqual(first.state, { count: 1, acks: 0, sleeps: 0 });
  const slept = await call(url, webhook("sleep", "", { ms: "20" }, { state: first.state }));
  assert.deepEqual(JSON.parse(slept.response?.body ?? ""), { slept: 20 });
  assert.deepEqual(slept.state, { count: 1, acks: 0, sleeps: 1 });
  assert.deepEqual(JSON.parse((await call(url, webhook("sleep", "", { ms: "-5" }))).response?.body ?? ""), { slept: 0 });
  const state = await call(url, webhook("state", "", {}, { state: { ...slept.state, ticks: 3, ticking: true } }));
  assert.deepEqual(JSON.parse(state.response?.body ?? ""), { runId: "run-1", state: { count: 1, acks: 0, sleeps: 1, ticks: 3 } });
  assert.equal(state.state, undefined, "state changes nothing");
  assert.deepEqual(JSON.parse((await call(url, webhook("state"))).response?.body ?? ""), { runId: "run-1", state: { count: 0, acks: 0, sleeps: 0 } });
});

test("EchoTS: webhook complete completes the instance, host names its host", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  const state = { count: 2, acks: 0, sleeps: 0 };
  // It completes the instance and leaves its state.
  assert.deepEqual(await call(url, webhook("complete", "", {}, { state })), {
    response: { status: 200, contentType: "application/json", body: '{"completed":true,"runId":"run-1"}' },
    complete: true,
  });
  assert.equal((await call(url, webhook("count"))).complete, undefined, "count does not complete");
  // host changes nothing.
  assert.deepEqual(await call(url, webhook("host", "", {}, { hostId: "host-9", runId: "run-2", state })), {
    response: { status: 200, contentType: "application/json", body: '{"hostId":"host-9","runId":"run-2"}' },
  });
});

test("EchoTS: Data echo, sum, count and sleep, Chat and File", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  assert.deepEqual(await call(url, data("echo", { a: [1, "b"] })), { reply: { data: { a: [1, "b"] } } });
  assert.deepEqual(await call(url, data("echo", null)), { reply: { data: {} } });
  assert.deepEqual(await call(url, data("Sum", { values: [2, 3, 0.5] })), { reply: { data: { sum: 5.5 } } });
  assert.deepEqual(await call(url, data("sleep", { ms: 1 })), { reply: { data: { slept: 1 } } });

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
  const streamed = await post(url, request({ type: "Chat", stream: true, message: { text: "hello  there\n" } }));
  assert.deepEqual(
    streamed.text.split("\n").filter(Boolean).map((l) => JSON.parse(l)),
    [{ delta: "You " }, { delta: "said: " }, { delta: "hello  " }, { delta: "there\n" }, { reply: { text: "You said: hello  there\n" } }],
  );

  const file = { name: "a.txt", contentType: "text/plain", size: 5, sha256: sha("hello"), content: Buffer.from("hello").toString("base64") };
  assert.deepEqual(await call(url, request({ type: "File", message: { text: "a.txt", file } })), {
    reply: { text: "Received a.txt (5 bytes)", data: { fileName: "a.txt", contentType: "text/plain", size: 5, sha256: sha("hello") } },
  });
  assert.deepEqual(await call(url, request({ type: "File", message: { text: "" } })), { reply: { text: "No file data received." } });
  assert.deepEqual(await call(url, request({ type: "File", message: { text: "", file: { name: "x", contentType: "", size: 0 } } })), {
    reply: { text: "No file data received." },
  });
  assert.deepEqual(await call(url, request({ type: "File", message: { text: "", file: { name: "x", contentType: "", size: 0, invalid: true } } })), {
    reply: { text: "Invalid file format. Please ensure the file is base64 encoded." },
  });
});

test("EchoTS: parameters of the wrong kind fail as Go's Echo decodes them", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  for (const [method, params, message] of [
    ["sum", { values: "x" }, "field values must be a JSON array"],
    ["sum", { values: [1, "a"] }, "field values must be a JSON number"],
    ["sleep", { ms: 1.5 }, "field ms must be a JSON whole number"],
    ["fail", { status: "x" }, "field status must be a JSON whole number"],
    ["tick", { stop: 1 }, "field stop must be a JSON boolean"],
    ["echo", [1], "must be a JSON object"],
  ] as const) {
    assert.deepEqual(await call(url, data(method, params)), {
      error: { status: 400, message: `bad parameters for ${method}: ${message}`, retry: false },
    });
  }
  assert.deepEqual(await call(url, data("sum", { Values: [1, null, 2] })), { reply: { data: { sum: 3 } } }, "keys match ignoring case; null is 0");
});

test("EchoTS: a chat's call {method} {json} runs a Data method", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  const chat = (text: string, fields: Partial<WireRequest> = {}) => call(url, request({ ...fields, type: "Chat", message: { text } }));
  assert.deepEqual(await chat('call sum {"values":[2,3]}'), { reply: { text: 'sum returned {"sum":5}' } });
  assert.deepEqual(await chat("  call  count  ", { state: { count: 2 } }), {
    reply: { text: 'count returned {"count":3,"runId":"run-1"}' },
    state: { count: 3, acks: 0, sleeps: 0 },
  });
  assert.deepEqual(await chat('call fail {"status":409,"message":"no"}'), { reply: { text: 'fail returned {"error":{"message":"no","status":409}}' } });
  for (const text of ["call nothing {}", "call sum [1]", "call sum {"]) {
    assert.deepEqual(await chat(text), { reply: { text: "You said: " + text } });
  }
});

// steps sends req as a workflow host does, again after each step with the step in its journal,
// and returns the journal and the final answer.
async function steps(url: string, req: WireRequest): Promise<{ journal: JournalEntry[]; answer: WireAnswer }> {
  let journal: JournalEntry[] = [];
  for (;;) {
    const answer = await call(url, { ...req, journal });
    if (!answer.step) return { journal, answer };
    journal = [...journal, answer.step];
  }
}

test("EchoTS: steps runs each step once and counts them in the final answer", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  const state = { count: 1, acks: 0, sleeps: 0, steps: [4] };
  const { journal, answer } = await steps(url, data("steps", { n: 3, sleepMs: 1 }, { attempt: 2, hostId: "host-2", state }));
  const ran = { attempt: 2, hostId: "host-2" };
  assert.deepEqual(
    [...journal],
    [1, 2, 3].map((i) => ({ name: `step ${i}`, result: ran })),
  );
  assert.deepEqual(answer, { reply: { data: { steps: 3, attempt: 2, ran: [ran, ran, ran] } }, state: { count: 1, acks: 0, sleeps: 0, steps: [5, 1, 1] } });
  // A step recorded by an earlier attempt comes back as recorded.
  const earlier = { name: "step 1", result: { attempt: 1, hostId: "host-1" } };
  assert.deepEqual(await call(url, data("steps", { n: 2 }, { attempt: 2, hostId: "host-2", journal: [earlier] })), { step: { name: "step 2", result: ran } });
  assert.deepEqual(JSON.parse((await call(url, webhook("state", "", {}, { state: answer.state }))).response?.body ?? ""), {
    runId: "run-1",
    state: { count: 1, acks: 0, sleeps: 0, steps: [5, 1, 1] },
  });
  const bounds = "steps needs n from 1 to 100 and sleepMs from 0 to 60000, n times sleepMs at most 300000";
  for (const p of [{ n: 0 }, { n: 101 }, { n: 1, sleepMs: 60001 }, { n: 6, sleepMs: 60000 }, { n: 1, sleepMs: -1 }]) {
    assert.deepEqual(await call(url, data("steps", p)), { error: { status: 400, message: bounds, retry: false } }, JSON.stringify(p));
  }
  // A chat's call of steps stops at each step too.
  const chat = (fields: Partial<WireRequest>) => call(url, request({ ...fields, type: "Chat", message: { text: 'call steps {"n":1}' } }));
  assert.deepEqual(await chat({}), { step: { name: "step 1", result: { attempt: 1, hostId: "host-1" } } });
  assert.deepEqual(await chat({ journal: [{ name: "step 1", result: { attempt: 1, hostId: "host-1" } }] }), {
    reply: { text: 'steps returned {"attempt":1,"ran":[{"attempt":1,"hostId":"host-1"}],"steps":1}' },
    state: { count: 0, acks: 0, sleeps: 0, steps: [1] },
  });
});

test("EchoTS: ask waits for the answer; answer alone is refused", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  assert.deepEqual(await call(url, data("ask", { question: "Which colour?" })), {
    wait: { name: "answer", chat: true, methods: ["answer"], signals: ["answer"] },
  });
  assert.deepEqual(await call(url, data("ask", { question: "Which colour?", timeoutS: 60 })), {
    wait: { name: "answer", chat: true, methods: ["answer"], signals: ["answer"], timeoutMs: 60000 },
  });
  const at = "2099-01-01T00:00:00Z";
  const cases: [Record<string, unknown>, Record<string, unknown>][] = [
    [{ type: "chat", text: "blue", participantId: "ada", at }, { answer: "blue", by: "ada" }],
    [{ type: "data", method: "answer", data: { colour: "red" }, participantId: "bob", at }, { answer: { colour: "red" }, by: "bob" }],
    [{ type: "signal", method: "answer", data: "green", at }, { answer: "green", by: "" }],
    [{ type: "timeout", at }, {}],
  ];
  for (const [event, want] of cases) {
    const answer = await call(url, data("ask", { question: "Which colour?" }, { journal: [{ name: "answer", result: event }] }));
    assert.deepEqual(answer, { reply: { data: { question: "Which colour?", type: event.type, ...want } } }, String(event.type));
  }
  assert.deepEqual(await call(url, data("ask", { question: "é".repeat(2049) })), {
    error: { status: 400, message: "ask needs a question of 1 to 4096 bytes of text", retry: false },
  });
  assert.deepEqual(await call(url, data("ask", { question: "?", timeoutS: 518401 })), { error: { status: 400, message: "ask's timeoutS is 1 to 518400", retry: false } });
  assert.deepEqual(await call(url, data("answer", { colour: "blue" })), {
    error: { status: 409, message: "nothing was asked: answer ends the wait of an ask in the same conversation", retry: false },
  });
});

test("EchoTS: history has agentbus read the thread, relay has it call another instance", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  assert.deepEqual(await call(url, data("history", { size: 2, scope: "shop" })), { history: { name: "history", size: 2, scope: "shop" } });
  assert.deepEqual(await call(url, data("history", { size: -1 })), { history: { name: "history", size: 20 } }, "the default");
  assert.deepEqual(await call(url, data("history", { size: 500 })), { history: { name: "history", size: 100 } }, "at most 100");
  const msgs = [{ text: "You said: first", direction: 1 }, { text: "first", direction: 0 }];
  assert.deepEqual(await call(url, data("history", { size: 2 }, { journal: [{ name: "history", result: { messages: msgs } }] })), {
    reply: { data: { messages: msgs } },
  });
  assert.deepEqual(await call(url, data("history", { size: "2" })), {
    error: { status: 400, message: "bad parameters for history: field size must be a JSON whole number", retry: false },
  });

  assert.deepEqual(await call(url, data("relay", { activation: "b", method: "count" })), {
    call: { name: "relay", method: "count", agent: "Tester", activation: "b" },
  });
  assert.deepEqual(
    await call(url, data("relay", { agent: "Other", workflowType: "Conversational", activation: "b", method: "sum", params: { values: [1] } })),
    { call: { name: "relay", method: "sum", agent: "Other", workflowType: "Conversational", activation: "b", params: { values: [1] } } },
  );
  const wf = "default:Echo:Supervisor Workflow:b";
  assert.deepEqual(await call(url, data("relay", { workflowId: wf, method: "count" })), { call: { name: "relay", method: "count", workflowId: wf } });
  assert.deepEqual(await call(url, data("relay", { activation: "b", method: "count" }, { journal: [{ name: "relay", result: { count: 1, runId: "r" } }] })), {
    reply: { data: { result: { count: 1, runId: "r" } } },
  });
  const message = 'agent "Echo" has no Data method "nope"';
  assert.deepEqual(await call(url, data("relay", { activation: "b", method: "nope" }, { journal: [{ name: "relay", error: { status: 404, message } }] })), {
    error: { status: 404, message, retry: false },
  });
  assert.deepEqual(await call(url, data("relay", { activation: "b" })), { error: { status: 400, message: "relay needs a method", retry: false } });
});

test("EchoTS: fail, flaky, remind, tick and tell", async (t) => {
  const { url } = await serve(t, echoAgent({ secret: SECRET }));
  assert.deepEqual(await call(url, data("fail", { status: 418, message: "teapot" })), { error: { status: 418, message: "teapot", retry: false } });
  assert.deepEqual(await call(url, data("fail", { status: 200 })), { error: { status: 500, message: "fail was asked to fail", retry: false } });
  assert.deepEqual(await call(url, data("flaky", { attempts: 2 })), { error: { status: 503, message: "attempt 1 fails on purpose", retry: true } });
  assert.deepEqual(await call(url, data("flaky", { attempts: 2 }, { attempt: 2 })), { reply: { data: { attempt: 2 } } });

  const set = await call(url, data("remind", { text: "stretch", ms: 60_000 }, { requestId: "r1" }));
  assert.equal(set.timers?.length, 1);
  assert.deepEqual({ ...set.timers?.[0], at: undefined }, { name: "remind:r1", at: undefined, method: "remind", data: { text: "stretch", ms: 60_000 } });
  assert.ok(Math.abs(Date.parse(set.timers?.[0]?.at ?? "") - Date.now() - 60_000) < 5_000);
  assert.equal((set.reply?.data as { timer: string }).timer, "remind:r1");
  assert.deepEqual(Date.parse((set.reply?.data as { dueAt: string }).dueAt), Date.parse(set.timers?.[0]?.at ?? ""));
  const fired = await call(url, data("remind", { text: "stretch", ms: 60_000 }, { message: { method: "remind", data: { text: "stretch", ms: 60_000 }, timer: "remind:r1", scope: "s" } }));
  assert.deepEqual(fired, { posts: [{ text: "stretch", scope: "s" }] });
  assert.equal((await call(url, data("remind", { text: "" }))).error?.status, 400);
  assert.equal((await call(url, data("remind", { text: "now" }))).reply !== undefined, true, "ms defaults to 0");

  const started = await call(url, data("tick", { seconds: 90 }));
  assert.deepEqual(started, {
    reply: { data: { ticking: true, every: "1m30s" } },
    state: { count: 0, acks: 0, sleeps: 0, ticking: true },
    timers: [{ name: "tick", every: "90s", method: "tick" }],
  });
  assert.deepEqual(await call(url, data("tick", null, { state: { count: 2, ticks: 1 }, message: { method: "tick", timer: "tick" } })), {
    state: { count: 2, acks: 0, sleeps: 0, ticks: 2 },
    posts: [{ text: "tick 2", data: { tick: 2 } }],
  });
  assert.deepEqual(await call(url, data("tick", { stop: true }, { state: started.state })), {
    reply: { data: { ticking: false, stopped: true } },
    state: { count: 0, acks: 0, sleeps: 0, ticking: false },
    cancelTimers: ["tick"],
  });
  assert.deepEqual(await call(url, data("tick", { stop: true })), { reply: { data: { ticking: false, stopped: false } }, cancelTimers: ["tick"] });
  assert.deepEqual(await call(url, data("tick", { seconds: -1 })), { error: { status: 400, message: "seconds is at least 1", retry: false } });

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
  assert.deepEqual(reg.webhooks.sort(), ["complete", "count", "echo", "host", "sleep", "state", "status", "verify"]);
  assert.deepEqual(reg.methods.map((m) => m.name).sort(), ["answer", "ask", "count", "echo", "fail", "flaky", "history", "relay", "remind", "sleep", "steps", "sum", "tell", "tick"]);
  assert.equal(reg.timeoutSeconds, 300);
  assert.deepEqual(await call(reg.url, data("sum", { values: [1, 2] })), { reply: { data: { sum: 3 } } });

  assert.equal(made.name, "EchoTS");
  assert.match(made.secret, /^whsec_/);
  assert.notEqual(made.secret, SECRET);
  assert.deepEqual(await call(made.url, data("sum", { values: [4] }), { secret: made.secret }), { reply: { data: { sum: 4 } } });
  assert.equal((await post(made.url, data("sum", { values: [4] }))).status, 401);
});
