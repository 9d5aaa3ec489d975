#!/usr/bin/env node
// EchoTS is agentbus's reference agent Echo (pkg/agents/echo, docs/echo.md) as a remote agent in
// TypeScript. Registered under the name Echo (--name Echo) it answers as the Go Echo does, with
// the same statuses, content types, JSON and texts, for everything protocol version 1 can
// express (pkg/conformance checks it). What it lacks, and why:
//
//   - Webhook method ack: a remote agent cannot answer before it is done.
//   - Data relay passes a failed call on with its status and message, not its problem type (the
//     caller sees handler-error), and a callee that waits (202) fails it with 500.
//   - Data ask does not post its question: a remote agent's posts go with its final answer,
//     which comes once the question is answered.
//   - Chat: "call {method} {json}" runs one of its Data methods and answers
//     "{method} returned {result}", but the call and its result are not stored in the thread and
//     a streaming caller gets no tool_call and tool_result events.
//   - remind names its timer "remind:{requestId}" (the protocol does not send the message id).
//   - It keeps a "ticking" flag in its state for tick's "stopped" (a remote agent cannot ask
//     whether a timer exists); the state webhook shows only Echo's counters.
//
// Webhook methods: echo, verify, status, sleep, count, complete, state, host, as Echo's: complete
// answers {"completed": true, "runId": …} and completes the instance (its next request starts a
// new run with fresh state); host answers {"hostId": …, "runId": …}, the workflow host serving it.
// Data methods: echo, sum, count, history, sleep, steps, ask, answer, fail, remind, tick, relay,
// as Echo's, with parameters checked as Echo checks them (steps makes durable steps with
// ctx.step and logs each run of a step's function; ask waits with ctx.wait; history has agentbus
// read the thread with ctx.history, relay has it call another instance with ctx.call); and two
// of its own, for trying the kit:
//   - flaky: {"attempts": n} asks agentbus to retry until attempt n, then {"attempt": n}.
//   - tell: {"agent", "activation", "method", "data"} tells another instance of the tenant
//     (Agent2Agent) without waiting for it.
// Chat: "You said: {text}", streamed word by word as Echo's offline model streams it.
// File: "Received {name} ({size} bytes)" with the file's name, type, size and SHA-256; the texts
// of docs/interface.md for a file without content and for content that was not base64.
//
// Run it (after npm run build, from sdk/typescript):
//
//   node dist/examples/echo.js --port 8702 --secret whsec_…
//
// or, in a project that installed the kit's package, npx agentbus-echots with the same flags.
//
// Flags fall back to AGENT_NAME, AGENT_HOST, AGENT_PORT, AGENT_SECRET and AGENT_URL; without a
// secret it makes one. It prints its registration body on stdout once it listens.

import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";

import { Agent, Fail, json, MAX_HISTORY, type MessageContext, newSecret, Retry, text, type WebhookResponse } from "../src/index.js";

/** What EchoTS keeps per instance: Echo's counters, and whether tick's timer is set. */
export interface State {
  count: number;
  acks: number;
  sleeps: number;
  ticks?: number;
  /** Runs of steps, counted once per request: steps[i-1] for "step i". */
  steps?: number[];
  ticking?: boolean;
}

/** maxSleepMs bounds sleep to 5 minutes, as Go's Echo does; the registration's timeout allows it. */
const maxSleepMs = 5 * 60 * 1000;
/** maxRemindMs bounds remind's delay to 7 days, as Go's Echo does. */
const maxRemindMs = 7 * 24 * 60 * 60 * 1000;
/** Bounds of steps, as Echo's: a caller cannot park a conversation for longer than with sleep. */
const maxStepsN = 100;
const maxStepSleepMs = 60 * 1000;
const maxStepsTotalMs = maxSleepMs;
/** maxQuestion bounds ask's question, in bytes; maxWaitS its wait, 6 days. */
const maxQuestion = 4 << 10;
const maxWaitS = 6 * 24 * 60 * 60;
/** The range of Go's int64, which Echo's whole-number parameters are. */
const int64 = { min: -(2n ** 63n), max: 2n ** 63n - 1n };

/** File reply texts of docs/interface.md#41-send-message-admin, rules 3 and 4. */
export const noFileText = "No file data received.";
export const invalidFileText = "Invalid file format. Please ensure the file is base64 encoded.";

/** A Data method of Echo: it takes the request's context and its parameters. */
type Method = (ctx: MessageContext<unknown, State>, params: unknown) => unknown | Promise<unknown>;

/** echoAgent returns EchoTS with its handlers. */
export function echoAgent(options: { name?: string; secret: string }): Agent<State> {
  const agent = new Agent<State>({
    name: options.name ?? "EchoTS",
    secret: options.secret,
    workflowTypes: ["Supervisor Workflow", "Conversational"],
    // A request may take as long as Echo's longest sleep.
    timeoutSeconds: 300,
  });
  // The Data methods by name, for the chat's "call {method} {json}".
  const tools = new Map<string, Method>();
  const method = (name: string, fn: Method, description: string, schema?: unknown): void => {
    tools.set(name, fn);
    agent.data(
      name,
      async (ctx) => {
        const data = await fn(ctx, ctx.data);
        return data === undefined ? undefined : { data };
      },
      { description, ...(schema !== undefined && { schema }) },
    );
  };

  // Webhook methods.

  agent.webhook("echo", (ctx) => {
    const out: Record<string, unknown> = { params: ctx.params };
    try {
      out.body = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(ctx.body);
    } catch {
      out.bodyBase64 = ctx.body.toString("base64");
    }
    out.size = ctx.body.length;
    out.sha256 = sha256(ctx.body);
    return goJSON(200, out);
  });
  agent.webhook("verify", (ctx) => {
    let challenge: string | undefined = ctx.params.challenge;
    if (challenge === undefined) {
      let body: unknown;
      try {
        body = JSON.parse(ctx.body.toString("utf8"));
      } catch {
        body = undefined;
      }
      const value = isObject(body) ? field(body, "challenge") : undefined;
      if (typeof value === "string") challenge = value;
    }
    return challenge === undefined ? text(400, "missing challenge") : text(200, challenge);
  });
  agent.webhook("status", (ctx) => {
    const code = atoi(ctx.params.code ?? "");
    if (code === undefined || code < 200 || code > 599) {
      return goJSON(400, { error: "code must be a status from 200 to 599" });
    }
    return goJSON(code, { status: code });
  });
  agent.webhook("sleep", async (ctx) => {
    const asked = atoi(ctx.params.ms ?? "");
    const ms = asked !== undefined && asked >= 0 ? Math.min(asked, maxSleepMs) : 0;
    await sleep(ms);
    update(ctx, "sleeps");
    return goJSON(200, { slept: ms });
  });
  agent.webhook("count", (ctx) => goJSON(200, { count: update(ctx, "count").count, runId: ctx.runId }));
  agent.webhook("complete", (ctx) => {
    ctx.complete();
    return goJSON(200, { completed: true, runId: ctx.runId });
  });
  agent.webhook("state", (ctx) => goJSON(200, { runId: ctx.runId, state: echoState(ctx.state) }));
  agent.webhook("host", (ctx) => goJSON(200, { hostId: ctx.hostId, runId: ctx.runId }));

  // Data methods: their parameters are checked as Go's Echo decodes them, with its messages. Each
  // schema gives examples: parameters a call may send, which agentbus checks against the schema
  // at registration and `agentbus agent check` sends.

  method("echo", (_ctx, p) => params(p, "echo"), "Returns its parameters unchanged.", {
    type: "object",
    examples: [{ text: "hello" }],
  });
  method(
    "sum",
    (_ctx, p) => {
      const values = (param(p, "sum", "values", "array") ?? []) as unknown[];
      let sum = 0;
      for (const v of values) {
        if (v !== null && typeof v !== "number") throw new Fail(400, "bad parameters for sum: field values must be a JSON number");
        sum += v ?? 0;
      }
      return { sum };
    },
    'Adds numbers: {"values":[2,3]} returns {"sum":5}.',
    {
      type: "object",
      properties: { values: { type: "array", items: { type: "number" }, description: "the numbers to add" } },
      required: ["values"],
      examples: [{ values: [2, 3] }, { values: [1.5, -4, 10] }],
    },
  );
  method(
    "count",
    (ctx, p) => {
      params(p, "count");
      return { count: update(ctx, "count").count, runId: ctx.runId };
    },
    "Increments this conversation's counter and returns it with the run id.",
    { type: "object", examples: [{}] },
  );
  method(
    "history",
    async (ctx, p) => {
      // agentbus reads the thread (ctx.history) as Go's Echo reads it: a size of 0 or less is
      // the default, one over 100 is 100.
      const size = (param(p, "history", "size", "whole number") ?? 0) as number;
      const scope = (param(p, "history", "scope", "string") ?? "") as string;
      return { messages: await ctx.history("history", { size: size > 0 ? Math.min(size, MAX_HISTORY) : 20, ...(scope && { scope }) }) };
    },
    "Returns the newest messages of this conversation's thread, newest first.",
    {
      type: "object",
      properties: {
        size: { type: "integer", description: "how many messages, 1-100 (default 20)" },
        scope: { type: "string", description: "only messages of this topic" },
      },
      examples: [{ size: 5 }],
    },
  );
  method(
    "sleep",
    async (_ctx, p) => {
      const ms = Math.min(Math.max((param(p, "sleep", "ms", "whole number") ?? 0) as number, 0), maxSleepMs);
      await sleep(ms);
      return { slept: ms };
    },
    "Waits ms milliseconds (at most 5 minutes), then returns how long it slept.",
    {
      type: "object",
      properties: { ms: { type: "integer", description: "milliseconds to wait" } },
      required: ["ms"],
      examples: [{ ms: 10 }],
    },
  );
  method(
    "steps",
    async (ctx, p) => {
      // Each step's function waits sleepMs and gives the attempt and host that ran it. A step the
      // journal holds is not run again: its recorded result comes back. The state is written by
      // the final answer only, so it counts each step once per request.
      const n = (param(p, "steps", "n", "whole number") ?? 0) as number;
      const sleepMs = (param(p, "steps", "sleepMs", "whole number") ?? 0) as number;
      if (n < 1 || n > maxStepsN || sleepMs < 0 || sleepMs > maxStepSleepMs || n * sleepMs > maxStepsTotalMs) {
        throw new Fail(400, `steps needs n from 1 to ${maxStepsN} and sleepMs from 0 to ${maxStepSleepMs}, n times sleepMs at most ${maxStepsTotalMs}`);
      }
      const ran: unknown[] = [];
      for (let i = 1; i <= n; i++) {
        ran.push(
          await ctx.step(`step ${i}`, async () => {
            console.error(`steps: step ${i} of ${n} runs (workflow ${ctx.workflowId}, request ${ctx.requestId}, attempt ${ctx.attempt})`);
            await sleep(sleepMs);
            return { attempt: ctx.attempt, hostId: ctx.hostId };
          }),
        );
      }
      const counts = [...(ctx.state?.steps ?? [])];
      while (counts.length < n) counts.push(0);
      for (let i = 0; i < n; i++) counts[i] = (counts[i] ?? 0) + 1;
      update(ctx, undefined, { steps: counts });
      return { steps: n, attempt: ctx.attempt, ran };
    },
    "Makes n durable steps one after another, each waiting sleepMs, and counts them in this conversation's state: " + '{"n":3,"sleepMs":100}.',
    {
      type: "object",
      properties: {
        n: { type: "integer", description: "how many steps, 1-100" },
        sleepMs: { type: "integer", description: "milliseconds each step waits, 0-60000; n times sleepMs at most 5 minutes" },
      },
      required: ["n"],
      examples: [{ n: 2, sleepMs: 10 }],
    },
  );
  method(
    "ask",
    async (ctx, p) => {
      const question = (param(p, "ask", "question", "string") ?? "") as string;
      const timeoutS = (param(p, "ask", "timeoutS", "whole number") ?? 0) as number;
      if (!question || Buffer.byteLength(question) > maxQuestion) throw new Fail(400, `ask needs a question of 1 to ${maxQuestion} bytes of text`);
      if (timeoutS < 0 || timeoutS > maxWaitS) throw new Fail(400, `ask's timeoutS is 1 to ${maxWaitS}`);
      const ev = await ctx.wait("answer", { chat: true, methods: ["answer"], signals: ["answer"], ...(timeoutS > 0 && { timeoutMs: timeoutS * 1000 }) });
      const out: Record<string, unknown> = { question, type: ev.type };
      if (ev.type === "chat") Object.assign(out, { answer: ev.text ?? "", by: ev.participantId ?? "" });
      else if (ev.type === "data" || ev.type === "signal") Object.assign(out, { answer: ev.data ?? null, by: ev.participantId ?? "" });
      return out;
    },
    `Waits for the participant's next Chat message, an answer call or the signal "answer", and answers with it; the question is not posted: {"question":"Which colour?"}.`,
    {
      type: "object",
      properties: {
        question: { type: "string", description: "the question, 1-4096 bytes, given back with the answer" },
        timeoutS: { type: "integer", description: "seconds to wait for the answer, 1-518400 (6 days, the default)" },
      },
      required: ["question"],
      examples: [{ question: "Which colour?", timeoutS: 60 }],
    },
  );
  method(
    "answer",
    (_ctx, p) => {
      // What an answer call does when no ask waits for it: one that ends a wait goes to the ask.
      params(p, "answer");
      throw new Fail(409, "nothing was asked: answer ends the wait of an ask in the same conversation");
    },
    'Answers the question an ask waits for: {"colour":"blue"}.',
    { type: "object", examples: [{ colour: "blue" }] },
  );
  method(
    "fail",
    (_ctx, p) => {
      const status = (param(p, "fail", "status", "whole number") ?? 0) as number;
      const message = (param(p, "fail", "message", "string") ?? "") as string;
      throw new Fail(status >= 400 && status <= 599 ? status : 500, message || "fail was asked to fail");
    },
    "Fails with the given status (400-599, default 500) and message; for trying error paths.",
    {
      type: "object",
      properties: { status: { type: "integer", description: "HTTP status of the failure, 400-599" }, message: { type: "string" } },
      examples: [{ status: 409, message: "already done" }],
    },
  );
  method(
    "remind",
    (ctx, p) => {
      const said = (param(p, "remind", "text", "string") ?? "") as string;
      const ms = (param(p, "remind", "ms", "whole number") ?? 0) as number;
      if (ctx.timer) {
        // The timer's message came back: the reminder is due.
        ctx.post({ text: said, ...(ctx.scope && { scope: ctx.scope }) });
        return undefined;
      }
      if (!said || ms < 0 || ms > maxRemindMs) throw new Fail(400, `remind needs a text and ms between 0 and ${maxRemindMs}`);
      const name = "remind:" + ctx.requestId;
      const due = new Date(Date.now() + ms);
      ctx.setTimer({ name, at: due, method: "remind", data: { text: said, ms } });
      // RFC 3339 with the fraction's trailing zeros cut, as Go's time.RFC3339Nano.
      return { timer: name, dueAt: due.toISOString().replace(/\.?0+Z$/, "Z") };
    },
    'Posts text to this conversation after ms milliseconds: {"text":"stretch","ms":60000}.',
    {
      type: "object",
      properties: {
        text: { type: "string", description: "what to say when the reminder is due" },
        ms: { type: "integer", description: "milliseconds from now (at most 7 days)" },
      },
      required: ["text", "ms"],
      examples: [{ text: "stretch", ms: 60000 }],
    },
  );
  method(
    "tick",
    (ctx, p) => {
      let seconds = (param(p, "tick", "seconds", "whole number") ?? 0) as number;
      const stop = (param(p, "tick", "stop", "boolean") ?? false) as boolean;
      if (ctx.timer) {
        const n = update(ctx, "ticks").ticks;
        ctx.post({ text: `tick ${n}`, data: { tick: n } });
        return undefined;
      }
      if (stop) {
        ctx.cancelTimer("tick");
        const stopped = ctx.state?.ticking === true;
        if (stopped) update(ctx, undefined, { ticking: false });
        return { ticking: false, stopped };
      }
      if (seconds === 0) seconds = 60;
      if (seconds < 1) throw new Fail(400, "seconds is at least 1");
      ctx.setTimer({ name: "tick", every: `${seconds}s`, method: "tick" });
      update(ctx, undefined, { ticking: true });
      return { ticking: true, every: goDuration(seconds) };
    },
    'Posts "tick N" to this conversation every seconds (default 60) until called with {"stop":true}.',
    {
      type: "object",
      properties: {
        seconds: { type: "integer", description: "interval in seconds, at least 1 (default 60)" },
        stop: { type: "boolean", description: "true cancels the ticking" },
      },
      examples: [{ seconds: 60 }, { stop: true }],
    },
  );
  method(
    "relay",
    async (ctx, p) => {
      // agentbus makes the call (ctx.call); its failure fails relay with its status and message.
      const peer: Record<string, string | undefined> = {};
      for (const k of ["agent", "workflowType", "activation", "workflowId", "method"]) {
        peer[k] = (param(p, "relay", k, "string") ?? undefined) as string | undefined;
      }
      if (!peer.method) throw new Fail(400, "relay needs a method");
      const result = await ctx.call("relay", {
        method: peer.method,
        params: field(params(p, "relay"), "params") ?? undefined,
        ...(peer.agent && { agent: peer.agent }),
        ...(peer.workflowType && { workflowType: peer.workflowType }),
        ...(peer.activation && { activation: peer.activation }),
        ...(peer.workflowId && { workflowId: peer.workflowId }),
      });
      return { result };
    },
    'Calls a Data method of another instance of this tenant and returns its result: {"activation":"b","method":"count"}.',
    {
      type: "object",
      properties: {
        agent: { type: "string", description: "the agent to call (default this one)" },
        workflowType: { type: "string", description: "its workflow type (default Supervisor Workflow)" },
        activation: { type: "string", description: "the activation name of the instance to call" },
        workflowId: { type: "string", description: "or the instance's workflow id (of this tenant)" },
        method: { type: "string", description: "the Data method to call" },
        params: { description: "the method's parameters" },
      },
      required: ["method"],
      examples: [{ activation: "b", method: "count" }],
    },
  );
  method(
    "flaky",
    (ctx, p) => {
      const attempts = (param(p, "flaky", "attempts", "whole number") ?? 2) as number;
      if (ctx.attempt < attempts) throw new Retry(`attempt ${ctx.attempt} fails on purpose`);
      return { attempt: ctx.attempt };
    },
    "Asks to be retried until attempt `attempts` (default 2), then returns the attempt; for trying retries.",
    { type: "object", examples: [{ attempts: 1 }, { attempts: 3 }] },
  );
  method(
    "tell",
    (ctx, p) => {
      const { agent: to, activation, workflowId, method: m, text: said, data } = params(p, "tell") as {
        agent?: string;
        activation?: string;
        workflowId?: string;
        method?: string;
        text?: string;
        data?: unknown;
      };
      if (!activation && !workflowId) throw new Fail(400, "tell needs an activation or a workflowId");
      if (!m && !said) throw new Fail(400, "tell needs a method or a text");
      ctx.tell({ agent: to, activation, workflowId, method: m, text: said, data });
      return { told: true };
    },
    'Sends a Data or Chat message to another instance of this tenant without waiting: {"activation":"b","method":"count"}.',
    { type: "object", examples: [{ activation: "b", method: "count" }] },
  );

  // Chat and File.

  agent.chat(async (ctx) => {
    // As Echo's offline model: "call {method} {json}" calls a Data method, anything else is
    // echoed, streamed word by word.
    const call = toolCall(ctx.text, tools);
    const answer = call ? await runTool(ctx as MessageContext<unknown, State>, tools, call.name, call.args) : `You said: ${ctx.text}`;
    for (const piece of words(answer)) ctx.delta(piece);
    return { text: answer };
  });
  agent.file((ctx) => {
    const f = ctx.file;
    if (f?.invalid) return { text: invalidFileText };
    if (!f || !f.size) return { text: noFileText };
    // agentbus sends the size and SHA-256 of the content, also of a file too large to send.
    return {
      text: `Received ${f.name} (${f.size} bytes)`,
      data: { fileName: f.name, contentType: f.contentType, size: f.size, sha256: f.sha256 },
    };
  });
  return agent;
}

/** The instance's state as Echo shows it: its counters, ticks once ticking has posted, steps once steps has run. */
export function echoState(s: Partial<State> | null): Omit<State, "ticking"> {
  const out: Omit<State, "ticking"> = { count: s?.count ?? 0, acks: s?.acks ?? 0, sleeps: s?.sleeps ?? 0 };
  if (s?.ticks) out.ticks = s.ticks;
  if (s?.steps?.length) out.steps = s.steps;
  return out;
}

/** update increments one counter of the state and sets flags, sets the new state and returns it. */
function update(
  ctx: { state: State | null; setState(s: State): void },
  counter?: "count" | "acks" | "sleeps" | "ticks",
  flags: Partial<State> = {},
): State {
  const s: State = { count: 0, acks: 0, sleeps: 0, ...ctx.state, ...flags };
  if (counter) s[counter] = (s[counter] ?? 0) + 1;
  ctx.setState(s);
  return s;
}

function sha256(b: Buffer): string {
  return createHash("sha256").update(b).digest("hex");
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** atoi reads s as Go's strconv.Atoi does: an optional sign and ASCII digits, within int64. */
export function atoi(s: string): number | undefined {
  if (!/^[+-]?[0-9]+$/.test(s)) return undefined;
  const n = BigInt(s);
  return n < int64.min || n > int64.max ? undefined : Number(n);
}

/** field is obj's field name as Go's encoding/json decodes it: the last key equal to name, ignoring case. */
function field(obj: Record<string, unknown>, name: string): unknown {
  let found: unknown;
  for (const [k, v] of Object.entries(obj)) {
    if (k.toLowerCase() === name.toLowerCase()) found = v;
  }
  return found;
}

/** params are a Data method's parameters: an object, or none (null). */
function params(p: unknown, method: string): Record<string, unknown> {
  if (p === null || p === undefined) return {};
  if (!isObject(p)) throw new Fail(400, `bad parameters for ${method}: must be a JSON object`);
  return p;
}

const kinds: Record<string, (v: unknown) => boolean> = {
  array: Array.isArray,
  string: (v) => typeof v === "string",
  boolean: (v) => typeof v === "boolean",
  "whole number": (v) => Number.isInteger(v) && Math.abs(v as number) < 2 ** 63,
};

/**
 * param is a parameter of a Data method, undefined when absent or null; a value of another kind
 * fails the request with 400 and Go's Echo's message.
 */
function param(p: unknown, method: string, name: string, kind: keyof typeof kinds): unknown {
  const v = field(params(p, method), name);
  if (v === null || v === undefined) return undefined;
  if (!kinds[kind]?.(v)) throw new Fail(400, `bad parameters for ${method}: field ${name} must be a JSON ${kind}`);
  return v;
}

/** goJSON is an application/json response written as Go's encoding/json writes it. */
function goJSON(status: number, value: unknown): WebhookResponse {
  return { ...json(status, value), body: goStringify(value) };
}

/** goStringify writes value as Go's encoding/json does: compact, <, >, &, U+2028 and U+2029 escaped. */
export function goStringify(value: unknown): string {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

/** sorted is value with its objects' keys sorted, as Go writes a map. */
function sorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sorted);
  if (!isObject(value)) return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, sorted(value[k])]),
  );
}

/** space is what Go's unicode.IsSpace takes for white space. */
const space = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const wordRE = new RegExp(`^[${space}]+|[^${space}]+[${space}]*`, "g");
const trimRE = new RegExp(`^[${space}]+|[${space}]+$`, "g");

/** words splits s after each run of white space, as Echo's offline model streams its answer. */
export function words(s: string): string[] {
  return s.match(wordRE) ?? [];
}

/**
 * toolCall is the Data method and parameters a chat "call {method} {json}" asks for, as Echo's
 * offline model reads it; undefined for any other text.
 */
export function toolCall(said: string, tools: ReadonlyMap<string, unknown>): { name: string; args: unknown } | undefined {
  const t = said.replace(trimRE, "");
  if (!t.startsWith("call ")) return undefined;
  const rest = t.slice(5).replace(trimRE, "");
  const sp = rest.indexOf(" ");
  const name = sp < 0 ? rest : rest.slice(0, sp);
  const args = (sp < 0 ? "" : rest.slice(sp + 1)).replace(trimRE, "") || "{}";
  if (!tools.has(name) || !args.startsWith("{")) return undefined;
  try {
    return { name, args: JSON.parse(args) };
  } catch {
    return undefined;
  }
}

/**
 * runTool runs a chat's tool call on the chat's own request and returns the answer,
 * "{name} returned {result}", the result as Go's Echo gives it to its model.
 */
async function runTool(ctx: MessageContext<unknown, State>, tools: ReadonlyMap<string, Method>, name: string, args: unknown): Promise<string> {
  let result: unknown;
  try {
    result = await (tools.get(name) as Method)(ctx, args);
  } catch (err) {
    result =
      err instanceof Fail ? { error: { status: err.status, message: err.message } } : { error: { status: 500, message: "the handler failed" } };
  }
  return `${name} returned ${goStringify(sorted(result ?? null))}`;
}

/** goDuration writes seconds as Go's time.Duration.String does: 1m0s, 1h30m0s. */
export function goDuration(seconds: number): string {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  if (h) return `${h}h${m}m${s}s`;
  return m ? `${m}m${s}s` : `${s}s`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      name: { type: "string", default: process.env.AGENT_NAME ?? "EchoTS" },
      host: { type: "string", default: process.env.AGENT_HOST ?? "127.0.0.1" },
      port: { type: "string", default: process.env.AGENT_PORT ?? "8702" },
      secret: { type: "string", default: process.env.AGENT_SECRET ?? "" },
      url: { type: "string", default: process.env.AGENT_URL ?? "" },
    },
  });
  const agent = echoAgent({ name: values.name, secret: values.secret || newSecret() });
  const server = await agent.listen(Number(values.port), values.host);
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : Number(values.port);
  const url = values.url || `http://${values.host.includes(":") ? `[${values.host}]` : values.host}:${port}/agentbus`;
  process.stdout.write(JSON.stringify(agent.registration(url), null, 2) + "\n");
  console.error(`${agent.name} listening on ${url}`);
  const stop = (): void => {
    server.close();
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
