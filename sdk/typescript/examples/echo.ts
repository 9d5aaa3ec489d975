// EchoTS is agentbus's reference agent Echo (pkg/agents/echo) as a remote agent in TypeScript:
// small, deterministic handlers that show every path of the protocol.
//
// Webhook methods:
//   - echo: answers the body back, byte for byte, with its content type (unlike Go's Echo, whose
//     echo answers a JSON summary of the call).
//   - count: increments the instance's counter: {"count": n, "runId": …}.
//   - state: answers {"runId": …, "state": …} without changing anything.
//   - status: answers with the status given by the code query parameter.
//
// Data methods (names match case-insensitively):
//   - echo: returns its parameters.
//   - sum: {"values":[…]} → {"sum": n}.
//   - count: as the webhook method.
//   - fail: {"status": n, "message": s} fails with that status (default 500).
//   - flaky: {"attempts": n} asks agentbus to retry until attempt n, then {"attempt": n}.
//   - remind: {"text": s, "ms": n} posts text to this conversation after ms milliseconds.
//   - tick: {"seconds": n} posts "tick N" every n seconds (default 60) until {"stop": true}.
//   - tell: {"agent", "activation", "method", "data"} tells another instance of the tenant
//     (Agent2Agent) without waiting for it.
//
// Chat: answers "You said: {text}", streaming it word by word to a caller that asked.
// File: answers "Received {name} ({size} bytes)" with the file's name, type and size.
//
// Run it (after npm run build, from sdk/typescript):
//
//   node dist/examples/echo.js --port 8702 --secret whsec_…
//
// Flags fall back to AGENT_NAME, AGENT_HOST, AGENT_PORT, AGENT_SECRET and AGENT_URL; without a
// secret it makes one. It prints its registration body on stdout once it listens.

import { parseArgs } from "node:util";

import { Agent, Fail, json, newSecret, Retry } from "../src/index.js";

/** What EchoTS keeps per instance. */
export interface State {
  count: number;
  ticks: number;
}

/** maxRemindMs bounds remind's delay to 7 days, as Go's Echo does. */
const maxRemindMs = 7 * 24 * 60 * 60 * 1000;

/** echoAgent returns EchoTS with its handlers. */
export function echoAgent(options: { name?: string; secret: string }): Agent<State> {
  const agent = new Agent<State>({
    name: options.name ?? "EchoTS",
    secret: options.secret,
    workflowTypes: ["Supervisor Workflow", "Conversational"],
  });
  const state = (s: State | null): State => ({ count: 0, ticks: 0, ...s });

  agent.webhook("echo", (ctx) => ({
    status: 200,
    contentType: ctx.contentType || "application/octet-stream",
    body: ctx.body,
  }));
  agent.webhook("count", (ctx) => {
    const s = state(ctx.state);
    s.count++;
    ctx.setState(s);
    return json(200, { count: s.count, runId: ctx.runId });
  });
  agent.webhook("state", (ctx) => json(200, { runId: ctx.runId, state: state(ctx.state) }));
  agent.webhook("status", (ctx) => {
    const code = Number(ctx.params.code);
    if (!Number.isInteger(code) || code < 200 || code > 599) {
      return json(400, { error: "code must be a status from 200 to 599" });
    }
    return json(code, { status: code });
  });

  agent.data<Record<string, unknown> | null>("echo", (ctx) => ({ data: ctx.data ?? {} }), {
    description: "Returns its parameters unchanged.",
  });
  agent.data<{ values?: number[] }>(
    "sum",
    (ctx) => ({ data: { sum: (ctx.data?.values ?? []).reduce((a, b) => a + b, 0) } }),
    {
      description: 'Adds numbers: {"values":[2,3]} returns {"sum":5}.',
      schema: { type: "object", properties: { values: { type: "array", items: { type: "number" }, description: "the numbers to add" } } },
    },
  );
  agent.data(
    "count",
    (ctx) => {
      const s = state(ctx.state);
      s.count++;
      ctx.setState(s);
      return { data: { count: s.count, runId: ctx.runId } };
    },
    { description: "Increments this conversation's counter and returns it with the run id." },
  );
  agent.data<{ status?: number; message?: string } | null>(
    "fail",
    (ctx) => {
      throw new Fail(ctx.data?.status ?? 500, ctx.data?.message || "fail was asked to fail");
    },
    { description: "Fails with the given status (400-599, default 500) and message; for trying error paths." },
  );
  agent.data<{ attempts?: number } | null>(
    "flaky",
    (ctx) => {
      if (ctx.attempt < (ctx.data?.attempts ?? 2)) throw new Retry(`attempt ${ctx.attempt} fails on purpose`);
      return { data: { attempt: ctx.attempt } };
    },
    { description: "Asks to be retried until attempt `attempts` (default 2), then returns the attempt; for trying retries." },
  );
  agent.data<{ text?: string; ms?: number }>(
    "remind",
    (ctx) => {
      const { text = "", ms = -1 } = ctx.data ?? {};
      if (ctx.timer) {
        ctx.post({ text, scope: ctx.scope });
        return;
      }
      if (!text || ms < 0 || ms > maxRemindMs) throw new Fail(400, `remind needs a text and ms between 0 and ${maxRemindMs}`);
      const name = "remind:" + ctx.requestId;
      const due = new Date(Date.now() + ms);
      ctx.setTimer({ name, at: due, method: "remind", data: { text, ms } });
      return { data: { timer: name, dueAt: due.toISOString() } };
    },
    { description: 'Posts text to this conversation after ms milliseconds: {"text":"stretch","ms":60000}.' },
  );
  agent.data<{ seconds?: number; stop?: boolean } | null>(
    "tick",
    (ctx) => {
      if (ctx.timer) {
        const s = state(ctx.state);
        s.ticks++;
        ctx.setState(s);
        ctx.post({ text: `tick ${s.ticks}`, data: { tick: s.ticks } });
        return;
      }
      if (ctx.data?.stop) {
        ctx.cancelTimer("tick");
        return { data: { ticking: false } };
      }
      const seconds = ctx.data?.seconds ?? 60;
      if (!Number.isInteger(seconds) || seconds < 1) throw new Fail(400, "seconds is a whole number, at least 1");
      ctx.setTimer({ name: "tick", every: `${seconds}s`, method: "tick" });
      return { data: { ticking: true, every: `${seconds}s` } };
    },
    { description: 'Posts "tick N" to this conversation every seconds (default 60) until called with {"stop":true}.' },
  );
  agent.data<{ agent?: string; activation?: string; workflowId?: string; method?: string; text?: string; data?: unknown } | null>(
    "tell",
    (ctx) => {
      const { agent: to, activation, workflowId, method, text: said, data } = ctx.data ?? {};
      if (!activation && !workflowId) throw new Fail(400, "tell needs an activation or a workflowId");
      if (!method && !said) throw new Fail(400, "tell needs a method or a text");
      ctx.tell({ agent: to, activation, workflowId, method, text: said, data });
      return { data: { told: true } };
    },
    { description: 'Sends a Data or Chat message to another instance of this tenant without waiting: {"activation":"b","method":"count"}.' },
  );

  agent.chat((ctx) => {
    const answer = `You said: ${ctx.text}`;
    if (ctx.stream) {
      for (const piece of answer.split(/(?<= )/)) ctx.delta(piece);
    }
    return { text: answer };
  });
  agent.file((ctx) => {
    const f = ctx.file;
    if (!f || !f.size) return { text: "No file data received." };
    return {
      text: `Received ${f.name} (${f.size} bytes)`,
      data: { fileName: f.name, contentType: f.contentType, size: f.size },
    };
  });
  return agent;
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
