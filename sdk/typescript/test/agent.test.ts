import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";

import {
  Agent,
  bytes,
  type Context,
  Fail,
  type JournalEntry,
  json,
  KEEP_ALIVE_TIMEOUT_MS,
  type MessageContext,
  Retry,
  sign,
  text,
  type WebhookContext,
  type WireAnswer,
  type WireRequest,
} from "../src/index.js";
import { call, data, MemoryLogger, post, request, SECRET, serve } from "./helpers.js";

interface Counter {
  count: number;
}

test("Chat reaches the chat handler with every field of the request", async (t) => {
  let seen: MessageContext<unknown, Counter> | undefined;
  const agent = new Agent<Counter>({ name: "Chatty", secret: SECRET });
  agent.chat((ctx) => {
    seen = ctx;
    return { text: `You said: ${ctx.text}`, data: { n: 1 } };
  });
  const { url } = await serve(t, agent);
  const deadline = new Date(Date.now() + 10_000);
  const req = request({
    type: "Chat",
    tenantId: "acme",
    workflowId: "acme:Chatty:Conversational:a",
    workflowType: "Conversational",
    activation: "a",
    runId: "run-9",
    hostId: "host-3",
    participantId: "bob",
    requestId: "r-chat",
    attempt: 3,
    deadline: deadline.toISOString(),
    stream: false,
    state: { count: 2 },
    message: { text: "hello", data: { mood: "fine" }, scope: "billing", hint: "short", timer: "" },
  });
  const answer = await call(url, req);
  assert.deepEqual(answer, { reply: { text: "You said: hello", data: { n: 1 } } });
  assert.ok(seen);
  assert.equal(seen.type, "Chat");
  assert.equal(seen.text, "hello");
  assert.equal(seen.method, "");
  assert.deepEqual(seen.data, { mood: "fine" });
  assert.equal(seen.tenantId, "acme");
  assert.equal(seen.workflowId, "acme:Chatty:Conversational:a");
  assert.equal(seen.workflowType, "Conversational");
  assert.equal(seen.activation, "a");
  assert.equal(seen.runId, "run-9");
  assert.equal(seen.hostId, "host-3");
  assert.equal(seen.participantId, "bob");
  assert.equal(seen.requestId, "r-chat");
  assert.equal(seen.attempt, 3);
  assert.equal(seen.deadline.getTime(), deadline.getTime());
  assert.equal(seen.stream, false);
  assert.deepEqual(seen.state, { count: 2 });
  assert.equal(seen.scope, "billing");
  assert.equal(seen.hint, "short");
  assert.equal(seen.timer, "");
  assert.equal(seen.file, null);
});

test("Data methods match case-insensitively and get their parameters", async (t) => {
  const agent = new Agent({ name: "Adder", secret: SECRET });
  agent.data<{ values: number[] }>("Sum", (ctx) => ({ data: { sum: ctx.data.values.reduce((a, b) => a + b, 0), method: ctx.method } }));
  agent.data("timer", (ctx) => ({ text: ctx.timer }));
  const { url } = await serve(t, agent);
  assert.deepEqual(await call(url, data("sum", { values: [1, 2, 3] })), { reply: { data: { sum: 6, method: "sum" } } });
  assert.deepEqual(await call(url, data("SUM", { values: [4] })), { reply: { data: { sum: 4, method: "SUM" } } });
  // A message without a method field names the method by its text.
  const byText = request({ type: "Data", message: { text: "sum", data: { values: [5] } } });
  assert.deepEqual(await call(url, byText), { reply: { data: { sum: 5, method: "sum" } } });
  assert.deepEqual(await call(url, data("timer", null, { message: { method: "timer", timer: "tick" } })), { reply: { text: "tick" } });
});

test("File reaches the file handler with the file", async (t) => {
  const agent = new Agent({ name: "Filer", secret: SECRET });
  agent.file((ctx) => ({
    text: `${ctx.text}: ${ctx.file?.name} ${ctx.file?.size} ${ctx.file?.contentType} ${ctx.file?.sha256} ${ctx.file?.invalid} ${ctx.file?.content?.toString()}`,
  }));
  const { url } = await serve(t, agent);
  const req = request({
    type: "File",
    message: { text: "my report", file: { name: "r.pdf", contentType: "application/pdf", size: 3, sha256: "ba78", content: "YWJj" } },
  });
  assert.deepEqual(await call(url, req), { reply: { text: "my report: r.pdf 3 application/pdf ba78 false abc" } });
  // A file too large to send comes without content; one sent without valid content too.
  const large = request({ type: "File", message: { text: "big", file: { name: "big", contentType: "", size: 5 << 20, sha256: "00" } } });
  assert.deepEqual(await call(url, large), { reply: { text: `big: big ${5 << 20}  00 false undefined` } });
  const invalid = request({ type: "File", message: { text: "bad", file: { name: "x", contentType: "", size: 0, invalid: true } } });
  assert.deepEqual(await call(url, invalid), { reply: { text: "bad: x 0   true undefined" } });
});

test("Webhook gets its method, params, headers, content type and raw body; the response is sent as text or base64", async (t) => {
  let seen: WebhookContext | undefined;
  const agent = new Agent({ name: "Hooked", secret: SECRET });
  agent.webhook("inspect", (ctx) => {
    seen = ctx;
    return json(201, { size: ctx.body.length });
  });
  agent.webhook("echo", (ctx) => bytes(200, ctx.contentType, ctx.body));
  agent.webhook("text", () => text(202, "héllo"));
  agent.webhook("nothing", () => {});
  const { url } = await serve(t, agent);
  const binary = Buffer.from([0, 1, 2, 0xff, 0xfe, 0x80, 10, 13]);
  const hook = (method: string, body: Buffer, extra: object = {}) =>
    request({
      type: "Webhook",
      participantId: "webhook",
      webhook: {
        method,
        params: { a: "1", b: ["2", "3"] },
        headers: { "X-Thing": "yes", Accept: ["a", "b"] },
        contentType: "application/octet-stream",
        body: body.toString("base64"),
        ...extra,
      },
    });

  assert.deepEqual(await call(url, hook("inspect", binary)), {
    response: { status: 201, contentType: "application/json", body: '{"size":8}' },
  });
  assert.ok(seen);
  assert.equal(seen.type, "Webhook");
  assert.equal(seen.method, "inspect");
  assert.deepEqual(seen.params, { a: "1", b: "2" }, "a parameter given twice: its first value");
  assert.deepEqual(seen.headers, { "x-thing": "yes", accept: "a, b" });
  assert.equal(seen.contentType, "application/octet-stream");
  assert.deepEqual(seen.body, binary);

  const echoed = await call(url, hook("echo", binary));
  assert.equal(echoed.response?.body, undefined);
  assert.deepEqual(Buffer.from(echoed.response?.bodyBase64 ?? "", "base64"), binary);
  assert.deepEqual(await call(url, hook("text", Buffer.alloc(0))), {
    response: { status: 202, contentType: "text/plain; charset=utf-8", body: "héllo" },
  });
  // No body at all, as null or left out, is an empty Buffer; no response is a plain 200.
  for (const body of [null, undefined, ""]) {
    const a = await call(url, hook("echo", Buffer.alloc(0), { body }));
    assert.deepEqual(a, { response: { status: 200, contentType: "application/octet-stream", bodyBase64: "" } });
  }
  assert.deepEqual(await call(url, hook("nothing", Buffer.alloc(0))), { response: {} });
});

test("a method the agent does not have is answered 404 in the error field", async (t) => {
  const agent = new Agent({ name: "Sparse", secret: SECRET });
  agent.data("sum", () => ({ data: 1 }));
  agent.webhook("Echo", () => ({}));
  const { url } = await serve(t, agent);
  const notFound = { error: { status: 404, message: "the agent has no such method", retry: false } };
  assert.deepEqual(await call(url, data("nope", {})), notFound);
  assert.deepEqual(await call(url, request({ type: "Chat", message: { text: "hi" } })), notFound);
  assert.deepEqual(await call(url, request({ type: "File", message: { text: "f" } })), notFound);
  // Webhook methods compare exactly, as in Go agents.
  assert.deepEqual(await call(url, request({ type: "Webhook", webhook: { method: "echo" } })), notFound);
});

test("state, posts, timers, cancelled timers and tells are sent with the answer", async (t) => {
  const agent = new Agent<Counter>({ name: "Busy", secret: SECRET });
  agent.data("act", (ctx) => {
    const before = ctx.state?.count ?? 0;
    ctx.setState({ count: before + 1 });
    ctx.post({ text: "your report is ready" });
    ctx.post({ participantId: "bob", data: { n: 1 }, scope: "s", hint: "h" });
    ctx.setTimer({ name: "once", at: new Date(Date.UTC(2030, 0, 2, 3, 4, 5)), method: "remind", data: { text: "stretch" } });
    ctx.setTimer({ name: "soon", afterMs: 60_000, text: "hello" });
    ctx.setTimer({ name: "every", every: "1m", method: "tick" });
    ctx.setTimer({ name: "cron", cron: "0 30 9 * * MON-FRI", timeZone: "Europe/Paris", method: "standup" });
    ctx.cancelTimer("tick");
    ctx.tell({ agent: "Echo", activation: "b", method: "count", data: {} });
    ctx.tell({ workflowId: "default:Busy:Supervisor Workflow:c", text: "hi" });
    return { data: { before, after: ctx.state?.count } };
  });
  agent.webhook("clear", (ctx) => {
    ctx.setState(null as unknown as Counter);
    return {};
  });
  agent.data("read", (ctx) => ({ data: ctx.state }));
  const { url } = await serve(t, agent);

  assert.deepEqual(await call(url, data("act", {}, { state: { count: 41 } })), {
    reply: { data: { before: 41, after: 42 } },
    state: { count: 42 },
    posts: [{ text: "your report is ready" }, { participantId: "bob", data: { n: 1 }, scope: "s", hint: "h" }],
    timers: [
      { name: "once", at: "2030-01-02T03:04:05.000Z", method: "remind", data: { text: "stretch" } },
      { name: "soon", afterMs: 60000, text: "hello" },
      { name: "every", every: "1m", method: "tick" },
      { name: "cron", cron: "0 30 9 * * MON-FRI", timeZone: "Europe/Paris", method: "standup" },
    ],
    cancelTimers: ["tick"],
    tells: [
      { agent: "Echo", activation: "b", type: "Data", method: "count", data: {} },
      { workflowId: "default:Busy:Supervisor Workflow:c", type: "Chat", text: "hi" },
    ],
  });
  // A fresh run's state is null; a handler that does not set the state leaves "state" out.
  assert.deepEqual(await call(url, data("read", {})), { reply: { data: null } });
  assert.deepEqual(await call(url, data("read", {}, { state: { count: 1 } })), { reply: { data: { count: 1 } } });
  // Setting null is sent as null: the state is cleared.
  assert.deepEqual(await call(url, request({ type: "Webhook", state: { count: 1 }, webhook: { method: "clear" } })), { response: {}, state: null });
});

test("complete completes the instance with the answer; hostId names the host", async (t) => {
  const agent = new Agent<Counter>({ name: "Finisher", secret: SECRET });
  agent.data("finish", (ctx) => {
    ctx.setState({ count: 9 });
    ctx.post({ text: "bye" });
    ctx.complete();
    return { text: ctx.hostId };
  });
  agent.data("go-on", () => ({ text: "on" }));
  agent.webhook("done", (ctx) => {
    ctx.complete();
    ctx.complete();
  });
  agent.chat((ctx) => {
    ctx.delta("last ");
    ctx.delta("words");
    ctx.complete();
    return { text: "last words" };
  });
  const { url } = await serve(t, agent);
  assert.deepEqual(await call(url, data("finish", {}, { hostId: "host-7" })), {
    reply: { text: "host-7" },
    state: { count: 9 },
    posts: [{ text: "bye" }],
    complete: true,
  });
  assert.deepEqual(await call(url, data("go-on", {})), { reply: { text: "on" } }, "without complete() the instance goes on");
  assert.deepEqual(await call(url, request({ type: "Webhook", webhook: { method: "done" } })), { response: {}, complete: true });
  // A streamed answer completes in its last line.
  const streamed = await post(url, request({ type: "Chat", stream: true, message: { text: "hi" } }));
  assert.equal(streamed.headers["content-type"], "application/x-ndjson");
  assert.deepEqual(JSON.parse(streamed.text.trim().split("\n").at(-1) ?? ""), { reply: { text: "last words" }, complete: true });
  // A host that sends no hostId: "".
  const { hostId: _, ...older } = data("finish", {});
  assert.equal((await call(url, older as WireRequest)).reply?.text, "");
});

test("failures: Fail's status and message, Retry, and anything else as a 500 that names no internals", async (t) => {
  const log = new MemoryLogger();
  const agent = new Agent<Counter>({ name: "Failing", secret: SECRET, logger: log });
  const withEffects = (ctx: Context<Counter>) => {
    ctx.setState({ count: 1 });
    ctx.post({ text: "never sent" });
    ctx.setTimer({ name: "t", afterMs: 1, text: "x" });
    ctx.tell({ activation: "b", text: "x" });
    ctx.complete();
  };
  agent.data("fail", (ctx) => {
    withEffects(ctx);
    throw new Fail(409, "the order is closed", { cause: new Error("row locked") });
  });
  agent.data("odd", () => {
    throw new Fail(200, "not a failure status");
  });
  agent.data("retry", async (ctx) => {
    withEffects(ctx);
    throw new Retry("the model timed out");
  });
  agent.data("bug", () => {
    throw new Error("secret internal detail");
  });
  agent.data("badTimer", (ctx) => {
    ctx.setTimer({ name: "t", afterMs: 1, every: "1m" });
  });
  agent.webhook("fail", () => {
    throw new Fail(422, "unprocessable");
  });
  agent.webhook("retry", () => {
    throw new Retry("later");
  });
  const { url } = await serve(t, agent);

  const failed = (status: number, message: string, retry = false) => ({ error: { status, message, retry } });
  assert.deepEqual(await call(url, data("fail", {})), failed(409, "the order is closed"));
  assert.deepEqual(await call(url, data("odd", {})), failed(500, "not a failure status"));
  assert.deepEqual(await call(url, data("retry", {})), failed(503, "the model timed out", true));
  assert.deepEqual(await call(url, data("bug", {})), failed(500, "the handler failed"));
  assert.deepEqual(await call(url, data("badTimer", {})), failed(500, "the handler failed"));
  assert.deepEqual(await call(url, request({ type: "Webhook", webhook: { method: "fail" } })), failed(422, "unprocessable"));
  assert.deepEqual(await call(url, request({ type: "Webhook", webhook: { method: "retry" } })), failed(503, "later", true));

  const errors = log.lines.filter((l) => l.level === "error");
  assert.equal(errors.length, 2, JSON.stringify(log.lines));
  assert.match(String(errors[0]?.fields.err), /secret internal detail/);
  assert.ok(log.lines.some((l) => String(l.fields.cause).includes("row locked")));
});

test("a handler's effects count only while it runs", async (t) => {
  let settle!: (err: unknown) => void;
  const late = new Promise((resolve) => (settle = resolve));
  const agent = new Agent({ name: "Late", secret: SECRET, logger: null });
  agent.data("late", (ctx) => {
    setTimeout(() => {
      try {
        ctx.post({ text: "too late" });
        settle(undefined);
      } catch (err) {
        settle(err);
      }
    }, 20);
    return {};
  });
  const { url } = await serve(t, agent);
  assert.deepEqual(await call(url, data("late", {})), {});
  const err = await late;
  assert.ok(err instanceof Error && /was answered/.test(err.message), String(err));
});

test("streaming: deltas are sent as JSON lines as they are produced, then the answer", async (t) => {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const agent = new Agent<Counter>({ name: "Streamer", secret: SECRET });
  agent.chat(async (ctx) => {
    ctx.delta("Hel");
    ctx.delta(""); // nothing to send
    await released;
    ctx.delta("lo");
    ctx.setState({ count: 1 });
    return { text: "Hello" };
  });
  agent.data("quiet", () => ({ text: "no deltas" }));
  agent.data("broken", (ctx) => {
    ctx.delta("par");
    throw new Fail(502, "the model went away");
  });
  const { url } = await serve(t, agent);

  // The first delta arrives while the handler still waits: it is flushed, not buffered.
  const chunks: string[] = [];
  const answer = post(url, request({ type: "Chat", stream: true, message: { text: "hi" } }), {
    onChunk: (c) => {
      chunks.push(c);
      if (chunks.join("").includes("\n")) release();
    },
  });
  const a = await answer;
  assert.equal(a.status, 200);
  assert.equal(a.headers["content-type"], "application/x-ndjson");
  assert.equal(chunks[0], '{"delta":"Hel"}\n');
  assert.deepEqual(
    a.text.split("\n").filter(Boolean).map((l) => JSON.parse(l)),
    [{ delta: "Hel" }, { delta: "lo" }, { reply: { text: "Hello" }, state: { count: 1 } }],
  );
  assert.ok(a.text.endsWith("\n"));

  // Without deltas, or when the caller did not ask for a stream, the answer is one JSON object.
  assert.deepEqual(await call(url, data("quiet", {}, { stream: true })), { reply: { text: "no deltas" } });
  const plain = await post(url, request({ type: "Chat", stream: false, message: { text: "hi" } }), {
    onChunk: () => release(),
  });
  assert.equal(plain.headers["content-type"], "application/json");
  assert.deepEqual(JSON.parse(plain.text), { reply: { text: "Hello" }, state: { count: 1 } });

  // A failure after deltas is the stream's last line.
  const broken = await post(url, data("broken", {}, { stream: true }));
  assert.deepEqual(
    broken.text.split("\n").filter(Boolean).map((l) => JSON.parse(l)),
    [{ delta: "par" }, { error: { status: 502, message: "the model went away", retry: false } }],
  );
});

test("keep-alive: one connection carries request after request", async (t) => {
  const agent = new Agent({ name: "Kept", secret: SECRET, logger: null });
  agent.data("n", (ctx) => ({ data: ctx.requestId }));
  agent.chat((ctx) => {
    ctx.delta("a");
    return { text: "a" };
  });
  const served = await serve(t, agent);
  const sockets = new Set<unknown>();
  for (let i = 0; i < 20; i++) {
    const req = i % 2 ? data("n", {}) : request({ type: "Chat", stream: true, message: { text: "x" } });
    const a = await post(served.url, req, { client: served.client });
    assert.equal(a.status, 200);
    sockets.add(a.socket);
    assert.equal(a.headers.connection, "keep-alive");
    assert.equal(a.headers["keep-alive"], `timeout=${KEEP_ALIVE_TIMEOUT_MS / 1000}`);
  }
  // An answer that is refused keeps the connection too.
  assert.equal((await post(served.url, data("n", {}), { client: served.client, secret: "whsec_" + Buffer.alloc(24).toString("base64") })).status, 401);
  assert.equal((await post(served.url, data("n", {}), { client: served.client })).status, 200);
  assert.equal(sockets.size, 1);
  assert.equal(served.connections(), 1);
});

test("requests that are not protocol 1 requests are refused", async (t) => {
  const agent = new Agent({ name: "Strict", secret: SECRET, maxBodyBytes: 4096, logger: null });
  agent.data("sum", () => ({}));
  const { url } = await serve(t, agent);
  const cases: { name: string; body: string | ReturnType<typeof request>; status: number; method?: string; headers?: Record<string, string> }[] = [
    { name: "protocol 2", body: data("sum", {}, { protocol: 2 }), status: 400 },
    { name: "protocol 2 in the header", body: data("sum", {}), headers: { "agentbus-protocol": "2" }, status: 400 },
    { name: "not JSON", body: "{", status: 400 },
    { name: "an array", body: "[1]", status: 400 },
    { name: "an unknown type", body: request({ type: "Voice" as never, message: {} }), status: 400 },
    { name: "a Data request without its message", body: request({ type: "Data", message: null }), status: 400 },
    { name: "a Webhook request without its webhook", body: request({ type: "Webhook" }), status: 400 },
    { name: "a GET", body: data("sum", {}), method: "GET", status: 405 },
    { name: "a body over the limit", body: data("sum", { pad: "x".repeat(5000) }), status: 413 },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const a = await post(url, c.body, { method: c.method, headers: c.headers });
      assert.equal(a.status, c.status, a.text);
      assert.match(a.headers["content-type"] ?? "", /^text\/plain/);
    });
  }
  const header = await post(url, data("sum", {}), { headers: { "agentbus-protocol": undefined } });
  assert.equal(header.status, 200, "the protocol header may be left out");
});

test("the signal aborts at the request's deadline", async (t) => {
  const agent = new Agent({ name: "Patient", secret: SECRET });
  agent.data("wait", async (ctx) => {
    const started = Date.now();
    await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
    return { data: { waitedMs: Date.now() - started, reason: String(ctx.signal.reason) } };
  });
  const { url } = await serve(t, agent);
  const a = await call(url, data("wait", {}, { deadline: new Date(Date.now() + 150).toISOString() }));
  const reply = a.reply?.data as { waitedMs: number; reason: string };
  assert.ok(reply.waitedMs >= 100 && reply.waitedMs < 5000, JSON.stringify(reply));
  assert.match(reply.reason, /deadline/);
});

test("the signal aborts when the host hangs up, also when first read after it did", async (t) => {
  const agent = new Agent({ name: "Patient", secret: SECRET });
  const reasons: string[] = [];
  let started: () => void = () => {};
  let gone: () => void = () => {};
  agent.data("wait", async (ctx) => {
    started();
    if ((ctx.data as { late?: boolean }).late) {
      await new Promise<void>((resolve) => (gone = resolve));
      await new Promise((resolve) => setTimeout(resolve, 50)); // the close event is past
    }
    if (!ctx.signal.aborted) await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
    reasons.push(String(ctx.signal.reason));
    return { text: "too late" };
  });
  const { url } = await serve(t, agent);
  for (const late of [false, true]) {
    const body = Buffer.from(JSON.stringify(data("wait", { late })));
    const ts = Math.floor(Date.now() / 1000);
    const req = http.request(url, {
      method: "POST",
      agent: false,
      headers: { "content-type": "application/json", "webhook-id": "msg_x", "webhook-timestamp": String(ts), "webhook-signature": sign(SECRET, "msg_x", ts, body) },
    });
    req.on("error", () => {});
    await new Promise<void>((resolve) => {
      started = resolve;
      req.end(body);
    });
    req.destroy();
    await new Promise((resolve) => setTimeout(resolve, 50));
    gone();
  }
  for (let i = 0; i < 100 && reasons.length < 2; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(reasons.length, 2, "both handlers saw the abort");
  for (const reason of reasons) assert.match(reason, /hung up/);
});

test("registration lists the handlers and options, and checks the URL", () => {
  const agent = new Agent({
    name: "Listed",
    secret: SECRET,
    workflowTypes: ["Conversational"],
    tenants: ["acme"],
    timeoutSeconds: 60,
    maxConcurrent: 8,
    partitions: 2,
  });
  agent.webhook("echo", () => ({}));
  agent.data("sum", () => ({}), { description: "Adds numbers.", schema: { type: "object" } });
  agent.data("plain", () => ({}));
  agent.chat(() => ({}));
  assert.deepEqual(JSON.parse(JSON.stringify(agent.registration("http://127.0.0.1:8702/agentbus"))), {
    name: "Listed",
    url: "http://127.0.0.1:8702/agentbus",
    chat: true,
    file: false,
    webhooks: ["echo"],
    methods: [{ name: "sum", description: "Adds numbers.", schema: { type: "object" } }, { name: "plain" }],
    workflowTypes: ["Conversational"],
    tenants: ["acme"],
    secret: SECRET,
    timeoutSeconds: 60,
    maxConcurrent: 8,
    partitions: 2,
  });
  const bare = new Agent({ name: "Bare", secret: SECRET }).registration("https://agents.example.com/bare");
  assert.deepEqual(Object.keys(bare), ["name", "url", "chat", "file", "webhooks", "methods", "secret"]);
  assert.throws(() => agent.registration("ftp://x/y"), TypeError);
  assert.throws(() => agent.registration("not a url"), TypeError);
});

test("registering a name twice throws", () => {
  const agent = new Agent({ name: "Twice", secret: SECRET });
  agent.data("sum", () => ({})).webhook("echo", () => ({})).chat(() => ({})).file(() => ({}));
  assert.throws(() => agent.data("SUM", () => ({})), /registered already/);
  assert.throws(() => agent.webhook("echo", () => ({})), /registered already/);
  assert.throws(() => agent.chat(() => ({})), /registered already/);
  assert.throws(() => agent.file(() => ({})), /registered already/);
  assert.throws(() => agent.data("", () => ({})), /empty/);
  agent.webhook("Echo", () => ({})); // webhook names compare exactly
});

// host sends req as a workflow host does: again after each step the answer asks to record, with
// the step in its journal. It returns the journal and the last answer.
async function host(url: string, req: WireRequest): Promise<{ journal: JournalEntry[]; answer: WireAnswer }> {
  let journal: JournalEntry[] = [];
  for (let i = 0; i < 20; i++) {
    const answer = await call(url, { ...req, journal });
    if (!answer.step) return { journal, answer };
    assert.deepEqual(Object.keys(answer), ["step"], "a step's answer holds the step only");
    journal = [...journal, answer.step];
  }
  throw new Error("more than 20 steps");
}

test("steps: each runs once, and every run of the request replays the journal", async (t) => {
  const runs: string[] = [];
  const agent = new Agent<{ before: boolean }>({ name: "Stepper", secret: SECRET });
  agent.data("three", async (ctx) => {
    ctx.setState({ before: true }); // made again on every run: only the final answer's counts
    const ran: unknown[] = [];
    for (let i = 1; i <= 3; i++) {
      ran.push(
        await ctx.step(`step ${i}`, async () => {
          runs.push(`step ${i}`);
          return { i, attempt: ctx.attempt };
        }),
      );
    }
    ctx.post({ text: "done" });
    return { data: { ran } };
  });
  const { url } = await serve(t, agent);
  const { journal, answer } = await host(url, data("three", null, { attempt: 2 }));
  assert.deepEqual(runs, ["step 1", "step 2", "step 3"], "each step's function ran once");
  assert.deepEqual(
    [...journal],
    [1, 2, 3].map((i) => ({ name: `step ${i}`, result: { i, attempt: 2 } })),
  );
  assert.deepEqual(answer, {
    reply: { data: { ran: [1, 2, 3].map((i) => ({ i, attempt: 2 })) } },
    state: { before: true },
    posts: [{ text: "done" }],
  });
  // The journal's result counts, not what the function would give.
  journal[1] = { name: "step 2", result: "from another run" };
  const again = await call(url, data("three", null, { journal }));
  assert.equal((again.reply?.data as { ran: unknown[] }).ran[1], "from another run");
  assert.equal(runs.length, 3, "no step ran again");
});

test("steps: a Fail is recorded and thrown again; other errors go through", async (t) => {
  let runs = 0;
  const agent = new Agent({ name: "Stepper", secret: SECRET, logger: null });
  agent.data("reserve", async (ctx) => {
    try {
      await ctx.step("reserve", () => {
        runs++;
        throw new Fail(409, "taken");
      });
    } catch (err) {
      if (!(err instanceof Fail)) throw err;
      return { data: { refused: err.status, message: err.message } };
    }
  });
  agent.data("flaky", (ctx) => ctx.step("call", () => Promise.reject(new Retry("the model did not answer"))));
  agent.data("crash", (ctx) => ctx.step("call", () => JSON.parse("{")));
  const { url } = await serve(t, agent);
  const { journal, answer } = await host(url, data("reserve", null));
  assert.deepEqual(journal, [{ name: "reserve", error: { status: 409, message: "taken" } }]);
  assert.deepEqual(answer, { reply: { data: { refused: 409, message: "taken" } } });
  assert.equal(runs, 1);
  assert.deepEqual(await call(url, data("flaky", null)), { error: { status: 503, message: "the model did not answer", retry: true } });
  assert.deepEqual(await call(url, data("crash", null)), { error: { status: 500, message: "the handler failed", retry: false } });
});

test("steps: a handler that catches everything still steps; a mismatch fails the request", async (t) => {
  const log = new MemoryLogger();
  const agent = new Agent({ name: "Stepper", secret: SECRET, logger: log });
  agent.data("broad", async (ctx) => {
    try {
      await ctx.step("one", () => 1);
    } catch {
      // swallowed
    }
    await ctx.step("two", () => 2); // throws again at once: the first step is the answer
    throw new Fail(400, "too late");
  });
  agent.data("other", async (ctx) => {
    try {
      return { data: await ctx.step("other", () => 1) };
    } catch {
      return { text: "swallowed" };
    }
  });
  const { url } = await serve(t, agent);
  assert.deepEqual(await call(url, data("broad", null)), { step: { name: "one", result: 1 } });
  const mismatch = await call(url, data("other", null, { journal: [{ name: "first", result: 1 }] }));
  assert.equal(mismatch.error?.status, 500);
  assert.match(mismatch.error?.message ?? "", /step 1 is "other" in this run, but "first" in the journal/);
  assert.ok(log.lines.some((l) => l.level === "error"), "the mismatch is logged");
});

test("wait and sleep: the answer's wait, and the event from the journal", async (t) => {
  const agent = new Agent({ name: "Waiter", secret: SECRET });
  agent.data("ask", async (ctx) => {
    const ev = await ctx.wait("answer", { chat: true, methods: ["answer"], signals: ["answer"], timeoutMs: 60_000 });
    await ctx.sleep(1500);
    await ctx.sleep(0); // no wait at all
    return { data: ev };
  });
  const { url } = await serve(t, agent);
  assert.deepEqual(await call(url, data("ask", null)), {
    wait: { name: "answer", chat: true, methods: ["answer"], signals: ["answer"], timeoutMs: 60000 },
  });
  const event = { type: "chat", text: "blue", participantId: "ada", requestId: "r2", at: "2099-01-01T00:00:00Z" };
  const journal: JournalEntry[] = [{ name: "answer", result: event }];
  assert.deepEqual(await call(url, data("ask", null, { journal })), { wait: { name: "sleep", timeoutMs: 1500 } });
  journal.push({ name: "sleep", result: { type: "timeout", at: "2099-01-01T00:00:02Z" } });
  assert.deepEqual(await call(url, data("ask", null, { journal })), { reply: { data: event } });
});

test("call: the host's Agent2Agent call as a step, its result or failure from the journal", async (t) => {
  const agent = new Agent({ name: "Caller", secret: SECRET });
  agent.data("relay", async (ctx) => {
    let count: unknown;
    try {
      count = await ctx.call("count", { method: "count", params: { by: 1 }, activation: "b" });
    } catch (err) {
      if (!(err instanceof Fail)) throw err;
      return { data: { failed: err.status, message: err.message } };
    }
    const other = await ctx.call("other", { method: "echo", workflowId: "t:Other:Supervisor Workflow:x" });
    return { data: { count, other } };
  });
  const { url } = await serve(t, agent);
  assert.deepEqual(await call(url, data("relay", null)), {
    call: { name: "count", method: "count", agent: "Tester", activation: "b", params: { by: 1 } },
  }, "the agent is this one by default");
  const journal: JournalEntry[] = [{ name: "count", result: { count: 1 } }];
  assert.deepEqual(await call(url, data("relay", null, { journal })), {
    call: { name: "other", method: "echo", workflowId: "t:Other:Supervisor Workflow:x" },
  }, "a workflow id names the agent");
  journal.push({ name: "other", result: null });
  assert.deepEqual(await call(url, data("relay", null, { journal })), { reply: { data: { count: { count: 1 }, other: null } } });
  for (const status of [404, 202]) {
    const failed: JournalEntry[] = [{ name: "count", error: { status, message: "no" } }];
    assert.deepEqual(await call(url, data("relay", null, { journal: failed })), { reply: { data: { failed: status, message: "no" } } });
  }
});

test("history: the host's read of the thread as a step, its messages from the journal", async (t) => {
  const agent = new Agent({ name: "Reader", secret: SECRET });
  agent.data("read", async (ctx) => ({ data: { messages: await ctx.history("thread", { size: 2, scope: "shop" }), all: await ctx.history("all") } }));
  const { url } = await serve(t, agent);
  assert.deepEqual(await call(url, data("read", null)), { history: { name: "thread", size: 2, scope: "shop" } });
  const msgs = [{ text: "hi", direction: 0 }];
  const journal: JournalEntry[] = [{ name: "thread", result: { messages: msgs } }];
  assert.deepEqual(await call(url, data("read", null, { journal })), { history: { name: "all", size: 20 } });
  journal.push({ name: "all", result: { messages: [] } });
  assert.deepEqual(await call(url, data("read", null, { journal })), { reply: { data: { messages: msgs, all: [] } } });
});

test("call and history: misuse fails the handler", async (t) => {
  const agent = new Agent({ name: "Misuser", secret: SECRET, logger: null });
  const cases: ((ctx: MessageContext) => Promise<unknown>)[] = [
    (ctx) => ctx.call("c", { method: "" }),
    (ctx) => ctx.call("", { method: "count" }),
    (ctx) => ctx.call("c", { method: "count", params: 1n }),
    (ctx) => ctx.step("s", () => ctx.call("c", { method: "count" })),
    (ctx) => ctx.history("h", { size: 0 }),
    (ctx) => ctx.history("h", { size: 101 }),
  ];
  for (const [i, fn] of cases.entries()) agent.data(`m${i}`, async (ctx) => void (await fn(ctx)));
  agent.data("mismatch", async (ctx) => void (await ctx.call("c", { method: "count" })));
  const { url } = await serve(t, agent);
  for (const i of cases.keys()) {
    assert.deepEqual(await call(url, data(`m${i}`, null)), { error: { status: 500, message: "the handler failed", retry: false } }, `case ${i}`);
  }
  const mismatch = await call(url, data("mismatch", null, { journal: [{ name: "h", result: { messages: [] } }] }));
  assert.match(mismatch.error?.message ?? "", /step 1 is "c" in this run, but "h" in the journal/);
});

test("steps: a streamed chat's deltas, then the step", async (t) => {
  const agent = new Agent({ name: "Streamer", secret: SECRET });
  agent.chat(async (ctx) => {
    ctx.delta("thinking ");
    const n = await ctx.step("count", () => 3);
    ctx.delta(String(n));
    return { text: `thinking ${n}` };
  });
  const { url } = await serve(t, agent);
  const first = await post(url, request({ type: "Chat", stream: true, message: { text: "hi" } }));
  assert.deepEqual(
    first.text.trim().split("\n").map((l) => JSON.parse(l)),
    [{ delta: "thinking " }, { step: { name: "count", result: 3 } }],
  );
  const last = await post(url, request({ type: "Chat", stream: true, message: { text: "hi" }, journal: [{ name: "count", result: 3 }] }));
  assert.deepEqual(JSON.parse(last.text.trim().split("\n").at(-1) as string), { reply: { text: "thinking 3" } });
});

test("steps: misuse fails the handler", async (t) => {
  const agent = new Agent({ name: "Misuser", secret: SECRET, logger: null });
  const cases: [string, (ctx: MessageContext) => Promise<unknown>][] = [
    ["an empty name", (ctx) => ctx.step("", () => 1)],
    ["a name too long", (ctx) => ctx.step("x".repeat(257), () => 1)],
    ["a control character", (ctx) => ctx.step("a\nb", () => 1)],
    ["a result that is not JSON", (ctx) => ctx.step("s", () => 1n)],
    ["a result too large", (ctx) => ctx.step("s", () => "x".repeat(256 << 10))],
    ["a result too large as Go encodes it", (ctx) => ctx.step("s", () => "<".repeat(50 << 10))],
    ["nested steps", (ctx) => ctx.step("outer", () => ctx.step("inner", () => 1))],
    ["an effect in a step", (ctx) => ctx.step("s", () => ctx.post({ text: "hi" }))],
    ["a delta in a step", (ctx) => ctx.step("s", () => ctx.delta("hi"))],
    ["a wait for nothing", (ctx) => ctx.wait("w", {})],
    ["a wait too long", (ctx) => ctx.wait("w", { timeoutMs: 7 * 24 * 3600 * 1000 })],
    ["a method without a name", (ctx) => ctx.wait("w", { methods: [""] })],
    ["a thousand and one steps", async (ctx) => { for (let i = 0; i <= 1000; i++) await ctx.step("s", () => 1); }],
  ];
  for (const [i, [, fn]] of cases.entries()) agent.data(`m${i}`, async (ctx) => void (await fn(ctx)));
  agent.data("large", (ctx) => ctx.step("s", () => "x".repeat((256 << 10) - 2)).then(() => undefined));
  const { url } = await serve(t, agent);
  const thousand = Array.from({ length: 1000 }, () => ({ name: "s", result: 1 }));
  for (const [i, [name]] of cases.entries()) {
    const journal = name === "a thousand and one steps" ? thousand : [];
    assert.deepEqual(await call(url, data(`m${i}`, null, { journal })), { error: { status: 500, message: "the handler failed", retry: false } }, name);
  }
  assert.equal(JSON.stringify((await call(url, data("large", null))).step?.result).length, 256 << 10, "the largest result");
});

test("the journal: absent or null from an older host, ignored by a handler that makes no steps, refused when malformed", async (t) => {
  const agent = new Agent({ name: "Reader", secret: SECRET });
  agent.data("n", (ctx) => ({ data: ctx.journal.length }));
  const { url } = await serve(t, agent);
  assert.deepEqual(await call(url, data("n", null, { journal: null })), { reply: { data: 0 } });
  assert.deepEqual(await call(url, data("n", null)), { reply: { data: 0 } });
  assert.deepEqual(await call(url, data("n", null, { journal: [{ name: "x", result: null }] })), { reply: { data: 1 } });
  for (const bad of [{ name: "x" }, [1], [{ result: 1 }], [{ name: "x", error: "no" }]]) {
    const a = await post(url, data("n", null, { journal: bad as JournalEntry[] }));
    assert.equal(a.status, 400, JSON.stringify(bad));
  }
});
