// The wire format of agentbus's remote-agent protocol, version 1 (docs/remote-agents.md): what a
// workflow host POSTs to the agent and what the agent answers. Field names are the JSON ones.

/** The protocol version this kit speaks. */
export const PROTOCOL = 1;

/** The header that names the protocol version of a request. */
export const PROTOCOL_HEADER = "agentbus-protocol";

/** Content types of an answer: one JSON object, or a stream of JSON lines. */
export const JSON_TYPE = "application/json";
export const NDJSON_TYPE = "application/x-ndjson";

export type MessageType = "Chat" | "Data" | "File" | "Webhook";

/**
 * An uploaded file of a File message as the host sends it: size in bytes, the hex SHA-256, and
 * the content in base64 for a file of at most 4 MiB (left out for a larger one). A file sent
 * without content has size 0; invalid is true when what was sent was not base64.
 */
export interface FileInfo {
  name: string;
  contentType: string;
  size: number;
  sha256?: string;
  content?: string;
  invalid?: boolean;
}

/** The request a workflow host sends. */
export interface WireRequest {
  protocol: number;
  type: MessageType;
  agent: string;
  tenantId: string;
  workflowId: string;
  workflowType: string;
  activation: string;
  runId: string;
  /** The workflow host serving the instance now. */
  hostId: string;
  participantId: string;
  requestId: string;
  attempt: number;
  deadline: string;
  stream: boolean;
  state: unknown;
  message: WireMessage | null;
  webhook: WireWebhook | null;
  /**
   * The steps and waits the request recorded so far, in order (empty on a first send; left out
   * by a host older than steps).
   */
  journal?: JournalEntry[] | null;
}

/**
 * A recorded step or wait: its name, and its result (any JSON; a wait's is the WaitEvent that
 * ended it) or its error.
 */
export interface JournalEntry {
  name: string;
  result?: unknown;
  error?: StepError;
}

/** A step's recorded failure: a Fail's status and message. */
export interface StepError {
  status: number;
  message: string;
}

/** The event that ended a wait, as a wait's journal entry holds it: empty fields are left out. */
export interface WaitEvent {
  type: "chat" | "data" | "signal" | "timeout";
  /** chat: the message's text. */
  text?: string;
  /** data: the method called; signal: the signal's name. */
  method?: string;
  /** data: the call's parameters; signal: its data. */
  data?: unknown;
  participantId?: string;
  requestId?: string;
  /** When it came, RFC 3339. */
  at?: string;
}

/** An answer's step, for the host to record: its result or its error. */
export interface WireStep {
  name: string;
  result?: unknown;
  error?: StepError;
}

/**
 * An answer's Agent2Agent call, which the host makes as a step: a Data method of an instance of
 * the tenant. The journal's entry is the callee's result, or its failure.
 */
export interface WireCall {
  name: string;
  agent?: string;
  workflowType?: string;
  activation?: string;
  workflowId?: string;
  method: string;
  params?: unknown;
}

/** An answer's read of the request's thread, which the host makes as a step: its entry is {"messages": [...]}. */
export interface WireHistory {
  name: string;
  size?: number;
  scope?: string;
}

/** An answer's wait: what ends it. */
export interface WireWait {
  name: string;
  chat?: boolean;
  methods?: string[];
  signals?: string[];
  timeoutMs?: number;
}

export interface WireMessage {
  text?: string;
  method?: string;
  data?: unknown;
  scope?: string;
  hint?: string;
  timer?: string;
  file?: FileInfo | null;
}

export interface WireWebhook {
  method: string;
  params?: Record<string, string | string[]> | null;
  headers?: Record<string, string | string[]> | null;
  contentType?: string;
  /** The raw body in base64. */
  body?: string | null;
}

/** The answer to a request; every field is optional. */
export interface WireAnswer {
  reply?: Reply;
  response?: WireResponse;
  state?: unknown;
  posts?: Post[];
  timers?: WireTimer[];
  cancelTimers?: string[];
  tells?: Tell[];
  /** true completes the instance once the request is answered: its next request starts a new run with fresh state. */
  complete?: boolean;
  error?: WireError;
  /** A step to record: the host sends the request again with it in the journal. The other fields are then ignored. */
  step?: WireStep;
  /** A wait: the host parks the request until it ends. The other fields are then ignored. */
  wait?: WireWait;
  /** An Agent2Agent call the host makes as a step. The other fields are then ignored. */
  call?: WireCall;
  /** A read of the request's thread the host makes as a step. The other fields are then ignored. */
  history?: WireHistory;
}

/** A Chat, Data or File handler's reply: text, data, both, or neither (no reply). */
export interface Reply {
  text?: string;
  data?: unknown;
}

export interface WireResponse {
  status?: number;
  contentType?: string;
  body?: string;
  bodyBase64?: string;
}

export interface WireError {
  status: number;
  message: string;
  retry: boolean;
}

/** An Agent2User message to a thread of the instance. */
export interface Post {
  /** The thread's participant; the request's when left out. */
  participantId?: string;
  text?: string;
  data?: unknown;
  scope?: string;
  hint?: string;
}

/**
 * A timer of the instance: exactly one of at, afterMs, every and cron says when it fires. When it
 * does, it sends the instance a Data message to method with data, or, without a method, a Chat
 * message with text; its handler sees timer set to name. Setting a timer replaces the one of
 * the same name.
 */
export interface Timer {
  name: string;
  /** Once, at this time. */
  at?: Date | string;
  /** Once, this many milliseconds from now. */
  afterMs?: number;
  /** Repeatedly, at this Go duration ("90s", "1m", "1h30m"). */
  every?: string;
  /** On a cron schedule of six fields, seconds first ("0 30 9 * * MON-FRI"), read in timeZone (UTC by default). */
  cron?: string;
  timeZone?: string;
  method?: string;
  data?: unknown;
  text?: string;
}

export interface WireTimer extends Omit<Timer, "at"> {
  at?: string;
}

/**
 * An Agent2Agent message to an instance of the tenant: to agent (this agent when left out), the
 * instance named by activation or workflowId. type is Data when a method is given, else Chat,
 * unless set.
 */
export interface Tell {
  agent?: string;
  activation?: string;
  workflowId?: string;
  type?: "Chat" | "Data";
  method?: string;
  text?: string;
  data?: unknown;
}

/** A Data method as registered: schema is the JSON Schema of its parameters. */
export interface MethodInfo {
  name: string;
  description?: string;
  schema?: unknown;
}

/** The body of the request that registers an agent (POST /api/v1/admin/…/agents). */
export interface Registration {
  name: string;
  url: string;
  chat: boolean;
  file: boolean;
  webhooks: string[];
  methods: MethodInfo[];
  workflowTypes?: string[];
  tenants?: string[];
  secret: string;
  timeoutSeconds?: number;
  maxConcurrent?: number;
  partitions?: number;
}

const TYPES: ReadonlySet<string> = new Set(["Chat", "Data", "File", "Webhook"]);

/**
 * decodeRequest parses and checks a request body. It throws an Error, whose message is safe to
 * answer, when the body is not a protocol 1 request.
 */
export function decodeRequest(body: Buffer, protocolHeader: string | undefined): WireRequest {
  if (protocolHeader !== undefined && protocolHeader !== String(PROTOCOL)) {
    throw new Error(`unsupported protocol ${JSON.stringify(protocolHeader)}; this agent speaks ${PROTOCOL}`);
  }
  let req: WireRequest;
  try {
    req = JSON.parse(body.toString("utf8"));
  } catch {
    throw new Error("the body is not JSON");
  }
  if (typeof req !== "object" || req === null || Array.isArray(req)) {
    throw new Error("the body is not a JSON object");
  }
  if (req.protocol !== PROTOCOL) {
    throw new Error(`unsupported protocol ${JSON.stringify(req.protocol)}; this agent speaks ${PROTOCOL}`);
  }
  if (!TYPES.has(req.type)) {
    throw new Error(`unknown type ${JSON.stringify(req.type)}`);
  }
  const part = req.type === "Webhook" ? req.webhook : req.message;
  if (typeof part !== "object" || part === null) {
    throw new Error(`a ${req.type} request needs its ${req.type === "Webhook" ? "webhook" : "message"}`);
  }
  const journal: unknown = req.journal;
  if (journal !== undefined && journal !== null) {
    if (!Array.isArray(journal)) throw new Error("journal is not an array");
    for (const e of journal) {
      if (typeof e !== "object" || e === null || typeof e.name !== "string") throw new Error("a journal entry is not an object with a name");
      if (e.error !== undefined && e.error !== null && (typeof e.error !== "object" || Array.isArray(e.error))) {
        throw new Error("a journal entry's error is not an object");
      }
    }
  }
  return req;
}
