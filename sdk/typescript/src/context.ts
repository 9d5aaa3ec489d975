// What a handler gets and gives: its context, with the request's fields and the effects it may
// have on its instance, its failures, and webhook responses.

import {
  type FileInfo,
  JSON_TYPE,
  type JournalEntry,
  type MessageType,
  type Post,
  type Reply,
  type Tell,
  type Timer,
  type WaitEvent,
  type WireAnswer,
  type WireCall,
  type WireHistory,
  type WireMessage,
  type WireRequest,
  type WireTimer,
  type WireWait,
  type WireWebhook,
} from "./protocol.js";

/** How many steps and waits a request makes at most. */
export const MAX_STEPS = 1000;
/** The longest name of a step or a wait, in bytes (UTF-8). */
export const MAX_STEP_NAME_BYTES = 256;
/** The largest result of a step, encoded as JSON, in bytes. */
export const MAX_STEP_RESULT_BYTES = 256 << 10;
/** The longest wait, in milliseconds: 6 days. */
export const MAX_WAIT_MS = 6 * 24 * 60 * 60 * 1000;

/** The most messages one history read returns (MessageContext.history). */
export const MAX_HISTORY = 100;

/**
 * An Agent2Agent call (Context.call): a Data method of an instance of the tenant, of agent (this
 * agent when neither agent nor workflowId is given) and workflowType ("Supervisor Workflow" when
 * left out), named by activation ("default" when left out) or by workflowId instead.
 */
export interface CallTo {
  method: string;
  /** The callee's parameters: any JSON value. */
  params?: unknown;
  agent?: string;
  workflowType?: string;
  activation?: string;
  workflowId?: string;
}

/** A read of the request's thread (MessageContext.history). */
export interface HistoryOptions {
  /** How many messages, 1 to MAX_HISTORY; 20 when left out. */
  size?: number;
  /** Only messages of this topic. */
  scope?: string;
}

/** What ends a wait (Context.wait): at least one of them. */
export interface WaitFor {
  /** The participant's next Chat message. */
  chat?: boolean;
  /** A Data call by the participant of one of these methods. */
  methods?: string[];
  /** A signal of one of these names, sent to the conversation over agentbus's API. */
  signals?: string[];
  /** The deadline, in milliseconds from the wait's start: more than 0 and at most MAX_WAIT_MS; left out, the longest. */
  timeoutMs?: number;
}

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

/**
 * Suspend stops a handler at a step that ran, or a wait, past the journal: the kit answers with
 * the step to record or the wait. A handler that catches it (a catch-all around a step) is
 * answered the same: the kit keeps the suspension aside, and every later step throws it again.
 * @internal
 */
export class Suspend extends Error {
  override name = "Suspend";
  constructor() {
    super("the handler stepped or waits: the kit answers for it (do not catch this)");
  }
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
  /** The steps and waits the request recorded so far, in order (see step). */
  readonly journal: readonly JournalEntry[];
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
    this.journal = req.journal ?? [];
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

  /**
   * step runs fn as a durable step of the request, named name, and resolves to its result: fn
   * runs once, and every later run of the request gets its result back from the journal without
   * calling it (docs/remote-agents.md, "Steps and waits").
   *
   * The kit replays: the handler runs from the start on every send of the request, and its steps
   * and waits are numbered in the order it makes them. A step whose place is in the journal
   * resolves to the recorded result, or rejects with the recorded failure as a Fail. A step past
   * the journal runs fn and stops the handler: the kit answers with the step, agentbus records
   * it and sends the request again with it in the journal, and the handler runs again, this time
   * past the step. So a handler makes the same steps and waits in the same order on every run of
   * a request, one at a time (await each); one whose step has another name than the journal's at
   * its place fails the request (500).
   *
   * fn's result is any JSON value (at most 256 KiB encoded as Go encodes it, where <, > and &
   * take 6 bytes; undefined is null); a Fail it throws is recorded as the step's failure and
   * thrown again from the journal on every run; anything else it throws (a Retry included) goes
   * through the handler as if no step were made, and the step runs again on the request's next
   * attempt. fn must not act on the context (setState,
   * post, setTimer, tell, complete, delta) nor make steps: do those after the step, from its
   * result, where every run does them and the final answer carries them.
   *
   * The step stops the handler by rejecting with an internal error. Do not catch it: let errors
   * you do not handle go on (`catch (err) { if (!(err instanceof MyError)) throw err; … }`). A
   * handler that catches it all the same is answered with the step or the wait, whatever it does
   * next. Each step costs one more send of the request: n steps, n + 1 sends.
   */
  async step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    const fx = this.#fx;
    const n = fx.place(name, "step");
    if (n < this.journal.length) return fx.replay(this.journal[n] as JournalEntry, n, name) as T;
    if (typeof fn !== "function") throw new TypeError(`step ${JSON.stringify(name)}: fn is not a function`);
    fx.inStep = name;
    let result: T;
    try {
      result = await fn();
    } catch (err) {
      if (err instanceof Fail && fx.suspended === undefined) {
        fx.suspend({ step: { name, error: { status: err.status, message: err.message } } });
      }
      throw err;
    } finally {
      fx.inStep = undefined;
    }
    const encoded = JSON.stringify(result === undefined ? null : result);
    // As agentbus measures it: Go's encoding/json writes <, > and & (and U+2028, U+2029) escaped.
    const size = Buffer.byteLength(encoded) + 5 * (encoded.match(/[<>&]/g)?.length ?? 0) + 3 * (encoded.match(/[\u2028\u2029]/g)?.length ?? 0);
    if (size > MAX_STEP_RESULT_BYTES) {
      throw new RangeError(`step ${JSON.stringify(name)}: its result is ${size} bytes encoded, more than ${MAX_STEP_RESULT_BYTES}`);
    }
    return fx.suspend({ step: { name, result: JSON.parse(encoded) } });
  }

  /**
   * wait waits, durably, for what ends it (at least one of for's fields), and resolves to the
   * event that ended it: the participant's next Chat message, a Data call by the participant of
   * one of the methods, a signal sent to the conversation over agentbus's API, or the timeout.
   *
   * The wait is a step (see step): past the journal it stops the handler, agentbus parks the
   * request (its caller is answered 202) and holds the conversation's later requests behind it,
   * and once the event comes it sends the request again with the wait's entry, the event, in the
   * journal.
   */
  async wait(name: string, waitFor: WaitFor): Promise<WaitEvent> {
    const w: WireWait = { name };
    const methods = [...(waitFor.methods ?? [])];
    const signals = [...(waitFor.signals ?? [])];
    for (const m of methods) checkName(`wait ${JSON.stringify(name)}: method`, m);
    for (const sig of signals) checkName(`wait ${JSON.stringify(name)}: signal`, sig);
    const ms = waitFor.timeoutMs;
    if (ms !== undefined && !(typeof ms === "number" && ms > 0 && ms <= MAX_WAIT_MS)) {
      throw new RangeError(`wait ${JSON.stringify(name)}: timeoutMs is more than 0 and at most ${MAX_WAIT_MS}`);
    }
    if (!waitFor.chat && methods.length === 0 && signals.length === 0 && ms === undefined) {
      throw new TypeError(`wait ${JSON.stringify(name)}: a wait needs chat, methods, signals or timeoutMs`);
    }
    const fx = this.#fx;
    const n = fx.place(name, "wait");
    if (n < this.journal.length) return fx.replay(this.journal[n] as JournalEntry, n, name) as WaitEvent;
    if (waitFor.chat) w.chat = true;
    if (methods.length) w.methods = methods;
    if (signals.length) w.signals = signals;
    if (ms !== undefined) w.timeoutMs = Math.max(1, Math.round(ms));
    return fx.suspend({ wait: w });
  }

  /**
   * sleep sleeps, durably, for ms milliseconds: a wait named "sleep" with only a timeout (see
   * wait). The request is parked, holding nothing in the agent, and sent again once the time has
   * passed; the conversation's later requests queue behind it. Zero or less resolves at once.
   */
  async sleep(ms: number): Promise<void> {
    if (!(ms > 0)) return;
    await this.wait("sleep", { timeoutMs: ms });
  }

  /**
   * call calls a Data method of an instance of the tenant (Agent2Agent), as a durable step named
   * name, and resolves to the callee's result (its reply's data; null without).
   *
   * agentbus makes the call (docs/remote-agents.md, "Steps and waits"): past the journal the
   * call stops the handler, as a step does, the host calls the method and sends the request
   * again with the outcome in the journal, and every later run gets it from there. A call that
   * failed rejects with a Fail of the failure's status and message, on every run: 404 for an
   * unknown agent, workflow type or method, 400 for parameters its schema refuses, 202 for a
   * callee that waits (the Fail keeps the 202), the callee's own failure as it failed.
   */
  async call<T = unknown>(name: string, to: CallTo): Promise<T> {
    const what = `call ${JSON.stringify(name)}`;
    if (typeof to?.method !== "string" || to.method === "") throw new TypeError(`${what} needs a method`);
    for (const k of ["agent", "workflowType", "activation", "workflowId"] as const) {
      if (to[k] !== undefined && typeof to[k] !== "string") throw new TypeError(`${what}: ${k} is not a string`);
    }
    let params: unknown;
    if (to.params !== undefined && to.params !== null) {
      const encoded = JSON.stringify(to.params);
      if (encoded === undefined) throw new TypeError(`${what}: its params are not JSON`);
      params = JSON.parse(encoded);
    }
    const c: WireCall = { name, method: to.method };
    const agent = to.agent || (to.workflowId ? "" : this.agent);
    if (agent) c.agent = agent;
    if (to.workflowType) c.workflowType = to.workflowType;
    if (to.activation) c.activation = to.activation;
    if (to.workflowId) c.workflowId = to.workflowId;
    if (params !== undefined) c.params = params;
    return (await this.hostStep(c, "call", { call: c })) as T;
  }

  /**
   * hostStep is a step whose work the host does (a call, a history read): its recorded outcome,
   * or, past the journal, the answer that asks for it.
   * @internal
   */
  protected async hostStep(step: { name: string }, kind: string, ask: WireAnswer): Promise<unknown> {
    const fx = this.#fx;
    const n = fx.place(step.name, kind);
    if (n < this.journal.length) return fx.replay(this.journal[n] as JournalEntry, n, step.name);
    return fx.suspend(ask);
  }

  /**
   * acting refuses an effect made inside a step's function, which later runs do not call.
   * @internal
   */
  protected acting(what: string): void {
    this.#fx.acting(what);
  }

  /**
   * suspended reports whether the handler stepped or waits: what it does after that is not
   * answered (a delta is dropped).
   * @internal
   */
  protected suspended(): boolean {
    return this.#fx.suspended !== undefined;
  }
}

/** checkName checks a name as agentbus does: 1 to 256 bytes of text, without control characters or U+FFFD. */
function checkName(what: string, name: unknown): asserts name is string {
  if (typeof name !== "string" || name === "") throw new TypeError(`${what} needs a name`);
  if (/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(name)) {
    throw new TypeError(`${what} ${JSON.stringify(name)}: the name is not text`);
  }
  if (Buffer.byteLength(name) > MAX_STEP_NAME_BYTES) throw new RangeError(`${what} ${JSON.stringify(name)}: the name is longer than ${MAX_STEP_NAME_BYTES} bytes`);
  if (/[\u0000-\u001f\u007f-\u009f\ufffd]/.test(name)) {
    throw new TypeError(`${what} ${JSON.stringify(name)}: the name holds a control character or U+FFFD`);
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
   * history reads the request's thread, as a durable step named name, and resolves to its newest
   * messages (size, 1 to MAX_HISTORY, 20 by default) before the request's own, newest first, of
   * scope only when given: objects as agentbus's history API gives them.
   *
   * agentbus reads the thread (docs/remote-agents.md, "Steps and waits"): past the journal the
   * read stops the handler, as a step does, and the request comes again with the messages in the
   * journal; every later run gets the same messages from there.
   */
  async history(name: string, options: HistoryOptions = {}): Promise<Record<string, unknown>[]> {
    const size = options.size ?? 20;
    if (!Number.isInteger(size) || size < 1 || size > MAX_HISTORY) {
      throw new RangeError(`history ${JSON.stringify(name)}: size is 1 to ${MAX_HISTORY}`);
    }
    if (options.scope !== undefined && typeof options.scope !== "string") throw new TypeError(`history ${JSON.stringify(name)}: scope is not a string`);
    const h: WireHistory = { name, size };
    if (options.scope) h.scope = options.scope;
    const result = (await this.hostStep(h, "history", { history: h })) as { messages?: unknown } | null;
    return Array.isArray(result?.messages) ? (result.messages as Record<string, unknown>[]) : [];
  }

  /**
   * delta sends a piece of the reply's text to a caller that asked for the reply streamed, as it
   * is produced (a model's tokens). It does nothing when stream is false. The reply the handler
   * returns should still hold the whole text: callers that do not stream get only that.
   */
  delta(text: string): void {
    if (!text || this.suspended()) return;
    this.acting("delta");
    this.#delta(text);
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
  /** The place of the next step or wait in the journal. */
  cursor = 0;
  /** The name of the step whose function runs. */
  inStep: string | undefined;
  /** The answer that stops the handler: a step to record, a wait, or a step mismatch's error. */
  suspended: WireAnswer | undefined;
  #closed = false;

  constructor(state: S | null) {
    this.state = state;
  }

  open(): void {
    if (this.#closed) throw new Error("the request was answered: a handler's effects count only while it runs");
    this.acting("setState, post, setTimer, cancelTimer, tell or complete");
  }

  acting(what: string): void {
    if (this.inStep !== undefined) {
      throw new Error(`${what} inside the function of step ${JSON.stringify(this.inStep)}: a step's function does not act on the request; act after the step, from its result`);
    }
  }

  /** place numbers the handler's next step or wait: its place in the journal, from 0. */
  place(name: string, kind: string): number {
    checkName(kind, name);
    if (this.#closed) throw new Error("the request was answered: a step counts only while the handler runs");
    if (this.suspended !== undefined) throw new Suspend(); // the handler went on after a suspension it caught
    if (this.inStep !== undefined) throw new Error(`${kind} ${JSON.stringify(name)} inside the function of step ${JSON.stringify(this.inStep)}: steps do not nest, and run one at a time`);
    const n = this.cursor;
    if (n >= MAX_STEPS) throw new RangeError(`${kind} ${JSON.stringify(name)}: a request makes at most ${MAX_STEPS} steps and waits`);
    this.cursor++;
    return n;
  }

  /** replay is the recorded outcome of the step or wait at place n, which this run calls name. */
  replay(e: JournalEntry, n: number, name: string): unknown {
    if (e.name !== name) {
      this.suspend({
        error: {
          status: 500,
          message: `step mismatch: step ${n + 1} is ${JSON.stringify(name)} in this run, but ${JSON.stringify(e.name)} in the journal; a handler makes the same steps and waits in the same order on every run of a request`,
          retry: false,
        },
      });
    }
    if (e.error) {
      const failure = new Fail(500, String(e.error.message ?? ""));
      // As recorded: a call's 202 (the callee waits) included.
      if (Number.isInteger(e.error.status)) (failure as { status: number }).status = e.error.status;
      throw failure;
    }
    return e.result ?? null;
  }

  /** suspend stops the handler: the kit answers a, whatever the handler does next. */
  suspend(a: WireAnswer): never {
    this.suspended = a;
    throw new Suspend();
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
