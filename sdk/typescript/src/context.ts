// What a handler gets and gives: its context, with the request's fields and the effects it may
// have on its instance, its failures, and webhook responses.

import {
  type FileInfo,
  JSON_TYPE,
  type MessageType,
  type Post,
  type Reply,
  type Tell,
  type Timer,
  type WireAnswer,
  type WireMessage,
  type WireRequest,
  type WireTimer,
  type WireWebhook,
} from "./protocol.js";

/**
 * Fail ends a request with a status (400 to 599; anything else is 500) and a message the caller
 * sees, as a Go handler's agent.Errorf: `throw new Fail(404, "no such order")`. Its cause, if
 * any, is logged and never sent.
 */
export class Fail extends Error {
  override name = "Fail";
  readonly status: number;
  constructor(status: number, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.status = Number.isInteger(status) && status >= 400 && status <= 599 ? status : 500;
  }
}

/**
 * Retry is a passing failure, such as a service that did not answer: `throw new Retry("the
 * model timed out")`. agentbus tries the request again with backoff and dead-letters it after its
 * last attempt; the conversation's later requests wait meanwhile.
 */
export class Retry extends Error {
  override name = "Retry";
}

/** Context is what every handler gets: the request's instance and what it may do to it. */
export class Context<S = unknown> {
  readonly type: MessageType;
  readonly agent: string;
  readonly tenantId: string;
  readonly workflowId: string;
  readonly workflowType: string;
  readonly activation: string;
  readonly runId: string;
  /**
   * The workflow host serving the instance now (with several hosts, the one that owns its
   * partition); "" from a host that does not send it.
   */
  readonly hostId: string;
  /** The participant of the conversation (lowercased by agentbus). */
  readonly participantId: string;
  /** The same on every attempt of the request. */
  readonly requestId: string;
  /** 1 on the first delivery; more when the request is tried again. */
  readonly attempt: number;
  /** When the host stops waiting for the answer. */
  readonly deadline: Date;
  /** Whether the caller asked for the reply streamed (see MessageContext.delta). */
  readonly stream: boolean;
  readonly #fx: Effects<S>;
  #signal: AbortSignal | (() => AbortSignal);

  /** @internal */
  constructor(req: WireRequest, fx: Effects<S>, signal: AbortSignal | (() => AbortSignal)) {
    this.type = req.type;
    this.agent = str(req.agent);
    this.tenantId = str(req.tenantId);
    this.workflowId = str(req.workflowId);
    this.workflowType = str(req.workflowType);
    this.activation = str(req.activation);
    this.runId = str(req.runId);
    this.hostId = str(req.hostId);
    this.participantId = str(req.participantId);
    this.requestId = str(req.requestId);
    this.attempt = typeof req.attempt === "number" ? req.attempt : 1;
    this.deadline = new Date(str(req.deadline));
    this.stream = req.stream === true;
    this.#signal = signal;
    this.#fx = fx;
  }

  /**
   * Aborted at the deadline or when the host hangs up: pass it to fetch and the like. It is made
   * when first read, so that a handler that never reads it costs no timer.
   */
  get signal(): AbortSignal {
    if (typeof this.#signal === "function") this.#signal = this.#signal();
    return this.#signal;
  }

  /** The instance's state: null for a fresh run; what setState was given, once called. */
  get state(): S | null {
    return this.#fx.state as S | null;
  }

  /**
   * setState makes state the instance's new state, written when the request is answered. The
   * write is compare-and-set: when another conversation changed the state meanwhile, agentbus
   * sends the request again with the new state, and only the last answer counts.
   */
  setState(state: S): void {
    this.#fx.open();
    if (state === undefined) throw new TypeError("setState needs a state; null clears it");
    this.#fx.state = state;
    this.#fx.stateSet = true;
  }

  /** post sends an Agent2User message to a thread of the instance once the state is written. */
  post(post: Post): void {
    this.#fx.open();
    this.#fx.posts.push(post);
  }

  /** setTimer sets a timer of the instance, replacing the one of the same name. */
  setTimer(timer: Timer): void {
    this.#fx.open();
    this.#fx.timers.push(wireTimer(timer));
  }

  /** cancelTimer removes the instance's timer of that name. */
  cancelTimer(name: string): void {
    this.#fx.open();
    this.#fx.cancelTimers.push(name);
  }

  /** tell sends an Agent2Agent message to an instance of the tenant once the state is written. */
  tell(tell: Tell): void {
    this.#fx.open();
    this.#fx.tells.push({ ...tell, type: tell.type ?? (tell.method ? "Data" : "Chat") });
  }

  /**
   * complete completes the instance once the request is answered: its next request starts a new
   * run (a new runId) with fresh state (null). The rest of the answer is carried out as in any
   * other; a handler that throws completes nothing.
   */
  complete(): void {
    this.#fx.open();
    this.#fx.complete = true;
  }
}

/**
 * UploadedFile is the file of a File message: its name, content type, size in bytes and hex
 * SHA-256, and its content, which agentbus sends for a file of at most 4 MiB (null for a larger
 * one). A file sent without content has size 0; invalid is true when what was sent was not
 * base64.
 */
export interface UploadedFile {
  name: string;
  contentType: string;
  size: number;
  sha256: string;
  invalid: boolean;
  content: Buffer | null;
}

function uploadedFile(f: FileInfo): UploadedFile {
  return {
    name: str(f.name),
    contentType: str(f.contentType),
    size: typeof f.size === "number" ? f.size : 0,
    sha256: str(f.sha256),
    invalid: f.invalid === true,
    content: typeof f.content === "string" ? Buffer.from(f.content, "base64") : null,
  };
}

/** MessageContext is what a Chat, Data or File handler gets. D is the type of data. */
export class MessageContext<D = unknown, S = unknown> extends Context<S> {
  /** The chat text, the Data method, or the file's caption. */
  readonly text: string;
  /** Data: the method's name; "" otherwise. */
  readonly method: string;
  /** Data: the method's parameters; otherwise the data sent, if any (null when none). */
  readonly data: D;
  readonly scope: string;
  readonly hint: string;
  /** The name of the agent's own timer that sent the message; "" for a message a caller sent. */
  readonly timer: string;
  /** File: the uploaded file; null otherwise. */
  readonly file: UploadedFile | null;
  readonly #delta: (text: string) => void;

  /** @internal */
  constructor(req: WireRequest, fx: Effects<S>, signal: AbortSignal | (() => AbortSignal), delta: (text: string) => void) {
    super(req, fx, signal);
    const m = req.message as WireMessage;
    this.text = str(m.text);
    this.method = req.type === "Data" ? dataMethod(m) : "";
    this.data = (m.data ?? null) as D;
    this.scope = str(m.scope);
    this.hint = str(m.hint);
    this.timer = str(m.timer);
    this.file = m.file ? uploadedFile(m.file) : null;
    this.#delta = delta;
  }

  /**
   * delta sends a piece of the reply's text to a caller that asked for the reply streamed, as it
   * is produced (a model's tokens). It does nothing when stream is false. The reply the handler
   * returns should still hold the whole text: callers that do not stream get only that.
   */
  delta(text: string): void {
    if (text) this.#delta(text);
  }
}

/** WebhookContext is what a webhook handler gets: the HTTP call agentbus received. */
export class WebhookContext<S = unknown> extends Context<S> {
  /** The webhook method name. */
  readonly method: string;
  /** The query parameters (for one given more than once, its first value). */
  readonly params: Record<string, string>;
  /** The caller's headers, by lowercase name (repeated ones joined with ", "). */
  readonly headers: Record<string, string>;
  readonly contentType: string;
  /** The raw body, byte for byte (empty when there was none). */
  readonly body: Buffer;

  /** @internal */
  constructor(req: WireRequest, fx: Effects<S>, signal: AbortSignal | (() => AbortSignal)) {
    super(req, fx, signal);
    const w = req.webhook as WireWebhook;
    this.method = str(w.method);
    this.params = {};
    for (const [name, value] of Object.entries(w.params ?? {})) {
      this.params[name] = Array.isArray(value) ? String(value[0] ?? "") : String(value);
    }
    this.headers = {};
    for (const [name, value] of Object.entries(w.headers ?? {})) {
      this.headers[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : String(value);
    }
    this.contentType = str(w.contentType);
    this.body = Buffer.from(str(w.body), "base64");
  }
}

/** A webhook handler's answer to its caller: status 200 when left out. */
export interface WebhookResponse {
  status?: number;
  contentType?: string;
  /** Text, or bytes (sent in base64). */
  body?: string | Uint8Array;
}

type Awaitable<T> = T | Promise<T>;
export type MessageHandler<D = unknown, S = unknown> = (ctx: MessageContext<D, S>) => Awaitable<Reply | void>;
export type WebhookHandler<S = unknown> = (ctx: WebhookContext<S>) => Awaitable<WebhookResponse | void>;

/** A response with a text/plain body. */
export function text(status: number, body: string): WebhookResponse {
  return { status, contentType: "text/plain; charset=utf-8", body };
}

/** A response with value encoded as JSON. */
export function json(status: number, value: unknown): WebhookResponse {
  return { status, contentType: JSON_TYPE, body: JSON.stringify(value) };
}

/** A response with the given bytes and content type. */
export function bytes(status: number, contentType: string, body: Uint8Array): WebhookResponse {
  return { status, contentType, body };
}

/**
 * Effects collects what a handler does to its instance while it runs; they are sent with its
 * answer, and only when it succeeds.
 * @internal
 */
export class Effects<S> {
  state: S | null;
  stateSet = false;
  readonly posts: Post[] = [];
  readonly timers: WireTimer[] = [];
  readonly cancelTimers: string[] = [];
  readonly tells: Tell[] = [];
  complete = false;
  #closed = false;

  constructor(state: S | null) {
    this.state = state;
  }

  open(): void {
    if (this.#closed) throw new Error("the request was answered: a handler's effects count only while it runs");
  }

  close(): void {
    this.#closed = true;
  }

  answer(a: WireAnswer): WireAnswer {
    if (this.stateSet) a.state = this.state;
    if (this.posts.length) a.posts = this.posts;
    if (this.timers.length) a.timers = this.timers;
    if (this.cancelTimers.length) a.cancelTimers = this.cancelTimers;
    if (this.tells.length) a.tells = this.tells;
    if (this.complete) a.complete = true;
    return a;
  }
}

function wireTimer(t: Timer): WireTimer {
  if (!t.name) throw new TypeError("a timer needs a name");
  const when = [t.at, t.afterMs, t.every, t.cron].filter((v) => v !== undefined).length;
  if (when !== 1) throw new TypeError(`timer ${t.name}: give exactly one of at, afterMs, every and cron`);
  const { at, ...rest } = t;
  return at === undefined ? rest : { ...rest, at: at instanceof Date ? at.toISOString() : at };
}

// dataMethod is a Data message's method: its method field, or its text for a host that sends
// only that.
export function dataMethod(m: WireMessage): string {
  return str(m.method) || str(m.text);
}

export function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}
