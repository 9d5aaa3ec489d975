/**
 * A kit for agentbus remote agents in Node 20+: handlers of Chat, Data, File and Webhook requests
 * behind one HTTP endpoint that agentbus's workflow hosts POST to, signed per Standard Webhooks
 * (protocol 1, docs/remote-agents.md). It verifies and decodes each request, calls the handler,
 * and answers with its reply, new state, posts, timers, tells and completion, or with the durable
 * step, wait, Agent2Agent call or read of the thread it made (Context.step, wait, sleep, call,
 * MessageContext.history). It is not a client of the agentbus API: registering the agent is one
 * HTTP request, whose body registration() returns.
 *
 * @example
 *   const agent = new Agent({ name: "Adder", secret: process.env.AGENT_SECRET! });
 *   agent.data<{ values: number[] }>("sum", (ctx) => ({ data: { sum: ctx.data.values.reduce((a, b) => a + b, 0) } }));
 *   await agent.listen(8702);
 */

import * as http from "node:http";

import {
  dataMethod,
  Effects,
  Fail,
  MessageContext,
  type MessageHandler,
  Retry,
  str,
  WebhookContext,
  type WebhookHandler,
  type WebhookResponse,
} from "./context.js";
import {
  decodeRequest,
  JSON_TYPE,
  NDJSON_TYPE,
  PROTOCOL_HEADER,
  type MethodInfo,
  type Registration,
  type WireAnswer,
  type WireError,
  type WireMessage,
  type WireRequest,
  type WireResponse,
} from "./protocol.js";
import { secretKey, verify } from "./signature.js";

export {
  bytes,
  type CallTo,
  Context,
  Fail,
  type HistoryOptions,
  json,
  MAX_HISTORY,
  MAX_STEP_NAME_BYTES,
  MAX_STEP_RESULT_BYTES,
  MAX_STEPS,
  MAX_WAIT_MS,
  MessageContext,
  type MessageHandler,
  Retry,
  text,
  type UploadedFile,
  type WaitFor,
  WebhookContext,
  type WebhookHandler,
  type WebhookResponse,
} from "./context.js";
export {
  type FileInfo,
  JSON_TYPE,
  type JournalEntry,
  type MessageType,
  type MethodInfo,
  NDJSON_TYPE,
  type Post,
  PROTOCOL,
  PROTOCOL_HEADER,
  type Registration,
  type Reply,
  type StepError,
  type Tell,
  type Timer,
  type WaitEvent,
  type WireAnswer,
  type WireCall,
  type WireError,
  type WireHistory,
  type WireMessage,
  type WireRequest,
  type WireResponse,
  type WireStep,
  type WireTimer,
  type WireWait,
  type WireWebhook,
} from "./protocol.js";
export { newSecret, secretKey, sign, SignatureError, TOLERANCE_SECONDS, verify } from "./signature.js";

/**
 * How long the server keeps an idle connection open, in milliseconds. The hosts reuse their
 * connections; the server's idle timeout is longer than their clients' (Go's default is 90 s), so
 * that it is the client that closes an idle connection, never the server while a request is on
 * its way.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 120_000;

/**
 * The largest request body the agent reads by default, 48 MiB: agentbus's largest webhook body
 * (32 MiB) in base64, with room for the rest of the request.
 */
export const MAX_BODY_BYTES = 48 << 20;

/** Logger takes the kit's warnings and errors; console is one. */
export interface Logger {
  warn(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
}

export interface AgentOptions {
  /** The agent's name, unique across the deployment. */
  name: string;
  /**
   * The signing secret (whsec_…). A list accepts requests signed with any of them, for rotating
   * the secret; the first is the one registration() gives.
   */
  secret: string | readonly string[];
  /** The workflow types it serves; agentbus's default is ["Supervisor Workflow"]. */
  workflowTypes?: string[];
  /** A global agent's tenants (all when left out). */
  tenants?: string[];
  /** How long one request may take, 1 to 300; agentbus's default is 30. */
  timeoutSeconds?: number;
  /** Requests one host sends at once; agentbus's default is 32. */
  maxConcurrent?: number;
  /** Partitions of its inbox, at most this many hosts sharing its work (a tenant's agent: 1 to 16); agentbus's default is 4 for an agent one tenant calls, 16 for a shared one. */
  partitions?: number;
  /** The largest request body read; larger ones are answered 413. Default MAX_BODY_BYTES. */
  maxBodyBytes?: number;
  /** Where refused requests and handler failures are logged: console when left out, null discards. */
  logger?: Logger | null;
}

/** What a Data method is registered with. */
export interface MethodOptions {
  /** What it does and when to use it, for MCP clients and chat models. */
  description?: string;
  /** The JSON Schema of its parameters, for MCP clients and chat models; agentbus checks every call's parameters against it. */
  schema?: unknown;
}

type Route<S> =
  | { kind: "message"; handler: MessageHandler<any, S> }
  | { kind: "webhook"; handler: WebhookHandler<S> };

/**
 * Agent is a remote agent: its handlers, and the HTTP endpoint that serves them. S is the type of
 * its instances' state. Registering a second handler under a name (Data method names compare
 * case-insensitively, as agentbus matches them) or a second Chat or File handler throws.
 */
export class Agent<S = unknown> {
  readonly name: string;
  readonly #options: AgentOptions;
  readonly #keys: Buffer[];
  readonly #log: Logger;
  #chat: MessageHandler<any, S> | undefined;
  #file: MessageHandler<any, S> | undefined;
  readonly #data = new Map<string, MethodInfo & { handler: MessageHandler<any, S> }>();
  readonly #webhooks = new Map<string, WebhookHandler<S>>();

  constructor(options: AgentOptions) {
    if (!options.name) throw new TypeError("an agent needs a name");
    const secrets = typeof options.secret === "string" ? [options.secret] : [...(options.secret ?? [])];
    if (secrets.length === 0) throw new TypeError("an agent needs a secret (whsec_…)");
    this.name = options.name;
    this.#options = options;
    this.#keys = secrets.map(secretKey);
    this.#log = options.logger === null ? { warn() {}, error() {} } : (options.logger ?? console);
  }

  /** data registers the handler of a Data method. D is the type of its parameters. */
  data<D = unknown>(method: string, handler: MessageHandler<D, S>, options: MethodOptions = {}): this {
    const key = method.toLowerCase();
    if (!method || this.#data.has(key)) {
      throw new Error(`agent ${this.name}: Data method ${JSON.stringify(method)} is empty or registered already`);
    }
    this.#data.set(key, { name: method, ...options, handler });
    return this;
  }

  /** webhook registers the handler of a webhook method (names compare exactly). */
  webhook(method: string, handler: WebhookHandler<S>): this {
    if (!method || this.#webhooks.has(method)) {
      throw new Error(`agent ${this.name}: webhook ${JSON.stringify(method)} is empty or registered already`);
    }
    this.#webhooks.set(method, handler);
    return this;
  }

  /** chat registers the handler of Chat messages. */
  chat<D = unknown>(handler: MessageHandler<D, S>): this {
    if (this.#chat) throw new Error(`agent ${this.name}: a Chat handler is registered already`);
    this.#chat = handler;
    return this;
  }

  /** file registers the handler of File messages. */
  file<D = unknown>(handler: MessageHandler<D, S>): this {
    if (this.#file) throw new Error(`agent ${this.name}: a File handler is registered already`);
    this.#file = handler;
    return this;
  }

  /**
   * registration returns the body that registers the agent at url, where agentbus will POST its
   * requests (the secret included: keep it out of logs).
   */
  registration(url: string): Registration {
    const u = new URL(url);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError("an agent's URL is http or https");
    const o = this.#options;
    const secret = typeof o.secret === "string" ? o.secret : (o.secret[0] as string);
    return {
      name: this.name,
      url: u.href,
      chat: this.#chat !== undefined,
      file: this.#file !== undefined,
      webhooks: [...this.#webhooks.keys()],
      methods: [...this.#data.values()].map(({ name, description, schema }) => ({ name, description, schema })),
      ...(o.workflowTypes && { workflowTypes: o.workflowTypes }),
      ...(o.tenants && { tenants: o.tenants }),
      secret,
      ...(o.timeoutSeconds !== undefined && { timeoutSeconds: o.timeoutSeconds }),
      ...(o.maxConcurrent !== undefined && { maxConcurrent: o.maxConcurrent }),
      ...(o.partitions !== undefined && { partitions: o.partitions }),
    };
  }

  /**
   * handler is the agent as a node:http request listener, for mounting it in a server of your
   * own (give it the raw body: no body parser in front of it). Requests are POSTs to any path.
   */
  readonly handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    this.#serve(req, res).catch((err) => {
      this.#log.error("agentbus request failed", { agent: this.name, err });
      if (!res.headersSent) plain(res, 500, "internal error");
      else res.destroy();
    });
  };

  /** server returns an HTTP server of the agent, not yet listening, with keep-alive set up. */
  server(): http.Server {
    const server = http.createServer({ noDelay: true }, this.handler);
    server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
    // A request's headers may take as long as an idle connection is kept, so that the header
    // timer never closes a connection the keep-alive timer would keep.
    server.headersTimeout = KEEP_ALIVE_TIMEOUT_MS + 1_000;
    return server;
  }

  /**
   * listen serves the agent on port (0 picks a free one) and host (every interface when left
   * out), and resolves once it listens. Close the returned server to stop: it finishes the
   * requests in flight.
   */
  listen(port = 0, host?: string): Promise<http.Server> {
    const server = this.server();
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => {
        server.off("error", reject);
        resolve(server);
      });
    });
  }

  // serve answers one request: read the body, check its signature, decode it, run the handler,
  // answer.
  async #serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    if (req.method !== "POST") {
      return plain(res, 405, "agentbus requests are POSTs", { allow: "POST" });
    }
    const body = await readBody(req, this.#options.maxBodyBytes ?? MAX_BODY_BYTES);
    if (body === undefined) {
      return plain(res, 413, "the request is too large", { connection: "close" });
    }
    try {
      verify(this.#keys, req.headers, body);
    } catch (err) {
      const reason = (err as Error).message;
      this.#log.warn("agentbus request refused", { agent: this.name, reason, webhookId: req.headers["webhook-id"] });
      return plain(res, 401, reason);
    }
    let wire: WireRequest;
    try {
      wire = decodeRequest(body, header(req, PROTOCOL_HEADER));
    } catch (err) {
      return plain(res, 400, (err as Error).message);
    }
    const out = new Output(res, wire.stream === true);
    out.finish(await this.#answer(wire, out, () => requestSignal(wire, res)));
  }

  // answer runs the request's handler and returns the encoded answer.
  async #answer(req: WireRequest, out: Output, signal: () => AbortSignal): Promise<string> {
    const route = this.#route(req);
    if (!route) {
      return JSON.stringify({ error: { status: 404, message: "the agent has no such method", retry: false } });
    }
    const fx = new Effects<S>((req.state ?? null) as S | null);
    let answer: WireAnswer;
    try {
      if (route.kind === "webhook") {
        const resp = await route.handler(new WebhookContext<S>(req, fx, signal));
        answer = fx.answer({ response: wireResponse(resp) });
      } else {
        const reply = await route.handler(new MessageContext<any, S>(req, fx, signal, out.delta));
        answer = fx.answer(reply && (reply.text !== undefined || reply.data !== undefined) ? { reply } : {});
      }
    } catch (err) {
      answer = fx.suspended ? {} : { error: this.#failure(req, err) };
    } finally {
      fx.close();
    }
    // A step or a wait past the journal (or a step that mismatched it) is the answer, whatever
    // the handler did after it.
    if (fx.suspended) {
      answer = fx.suspended;
      if (answer.error) this.#log.error("handler failed", { agent: this.name, type: req.type, requestId: req.requestId, err: answer.error.message });
    }
    return JSON.stringify(answer);
  }

  #route(req: WireRequest): Route<S> | undefined {
    let handler: MessageHandler<any, S> | undefined;
    switch (req.type) {
      case "Webhook": {
        const w = this.#webhooks.get(str(req.webhook?.method));
        return w && { kind: "webhook", handler: w };
      }
      case "Chat":
        handler = this.#chat;
        break;
      case "File":
        handler = this.#file;
        break;
      case "Data":
        handler = this.#data.get(dataMethod(req.message as WireMessage).toLowerCase())?.handler;
        break;
    }
    return handler && { kind: "message", handler };
  }

  // failure is what the caller is told of a handler that threw: a Fail's status and message, a
  // Retry, or, for anything else, a 500 that names no internals (the error is logged).
  #failure(req: WireRequest, err: unknown): WireError {
    const where = { agent: this.name, type: req.type, requestId: req.requestId, attempt: req.attempt };
    if (err instanceof Retry) {
      this.#log.warn("handler failed; agentbus will retry", { ...where, err: err.message, cause: err.cause });
      return { status: 503, message: err.message, retry: true };
    }
    if (err instanceof Fail) {
      if (err.cause !== undefined) this.#log.warn("handler failed", { ...where, status: err.status, cause: err.cause });
      return { status: err.status, message: err.message, retry: false };
    }
    this.#log.error("handler failed", { ...where, err });
    return { status: 500, message: "the handler failed", retry: false };
  }
}

// Output writes the answer: one JSON object, or, once a handler sent a delta of a streamed
// request, JSON lines, each written as it comes.
class Output {
  readonly #res: http.ServerResponse;
  readonly #stream: boolean;
  #streaming = false;
  #done = false;

  constructor(res: http.ServerResponse, stream: boolean) {
    this.#res = res;
    this.#stream = stream;
  }

  readonly delta = (text: string): void => {
    if (!this.#stream || this.#done) return;
    if (!this.#streaming) {
      this.#res.writeHead(200, { "content-type": NDJSON_TYPE });
      this.#streaming = true;
    }
    this.#res.write(JSON.stringify({ delta: String(text) }) + "\n");
  };

  finish(answer: string): void {
    this.#done = true;
    if (this.#streaming) {
      this.#res.end(answer + "\n");
      return;
    }
    const body = Buffer.from(answer);
    this.#res.writeHead(200, { "content-type": JSON_TYPE, "content-length": body.length });
    this.#res.end(body);
  }
}

function wireResponse(r: WebhookResponse | void): WireResponse {
  const out: WireResponse = {};
  if (!r) return out;
  if (r.status !== undefined) out.status = r.status;
  if (r.contentType !== undefined) out.contentType = r.contentType;
  if (typeof r.body === "string") out.body = r.body;
  else if (r.body !== undefined) out.bodyBase64 = Buffer.from(r.body.buffer, r.body.byteOffset, r.body.byteLength).toString("base64");
  return out;
}

// requestSignal is aborted at the request's deadline or when the host hangs up before the
// answer is sent.
function requestSignal(req: WireRequest, res: http.ServerResponse): AbortSignal {
  const ac = new AbortController();
  const ms = new Date(str(req.deadline)).getTime() - Date.now();
  const timer = Number.isFinite(ms) ? setTimeout(() => ac.abort(new Error("the request's deadline passed")), Math.max(ms, 0)) : undefined;
  timer?.unref();
  const closed = (): void => {
    clearTimeout(timer);
    if (!res.writableFinished) ac.abort(new Error("the host hung up"));
  };
  // Made when a handler first reads it: the host may have hung up already.
  if (res.closed) closed();
  else res.once("close", closed);
  return ac.signal;
}

// readBody reads the whole body; undefined when it is longer than limit.
function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer | undefined> {
  if (Number(req.headers["content-length"]) > limit) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        resolve(undefined);
        req.removeAllListeners("data");
        req.resume();
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks, size)));
    req.on("error", reject);
  });
}

function plain(res: http.ServerResponse, status: number, message: string, headers: http.OutgoingHttpHeaders = {}): void {
  const body = Buffer.from(message + "\n");
  res.writeHead(status, { ...headers, "content-type": "text/plain; charset=utf-8", "content-length": body.length });
  res.end(body);
}

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}
