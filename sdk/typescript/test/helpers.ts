// Helpers of the tests: an agent served on 127.0.0.1 by the kit's own server, and requests
// signed and POSTed to it over real HTTP, as a workflow host sends them.

import * as http from "node:http";
import type { AddressInfo } from "node:net";
import type { TestContext } from "node:test";

import { type Agent, type Logger, sign, type WireAnswer, type WireRequest } from "../src/index.js";

/** The secret of the agents under test. */
export const SECRET = "whsec_" + Buffer.alloc(32, 7).toString("base64");

/** A Logger that keeps what it is given. */
export class MemoryLogger implements Logger {
  readonly lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
  warn(message: string, fields: Record<string, unknown>): void {
    this.lines.push({ level: "warn", message, fields });
  }
  error(message: string, fields: Record<string, unknown>): void {
    this.lines.push({ level: "error", message, fields });
  }
}

export interface Served {
  url: string;
  /** How many TCP connections the server accepted. */
  connections(): number;
  /** A client that keeps its connections alive, closed with the test. */
  client: http.Agent;
}

/** serve listens with agent on a free port of 127.0.0.1 until the test ends. */
export async function serve(t: TestContext, agent: Agent<any>): Promise<Served> {
  const server = await agent.listen(0, "127.0.0.1");
  let connections = 0;
  server.on("connection", () => connections++);
  const client = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(async () => {
    client.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/agentbus`, connections: () => connections, client };
}

let seq = 0;

/** request returns a protocol 1 request with the fields given and plausible others. */
export function request(fields: Partial<WireRequest>): WireRequest {
  seq++;
  return {
    protocol: 1,
    type: "Data",
    agent: "Tester",
    tenantId: "default",
    workflowId: "default:Tester:Supervisor Workflow:shop",
    workflowType: "Supervisor Workflow",
    activation: "shop",
    runId: "run-1",
    hostId: "host-1",
    participantId: "ada",
    requestId: `req-${seq}`,
    attempt: 1,
    deadline: new Date(Date.now() + 30_000).toISOString(),
    stream: false,
    state: null,
    message: null,
    webhook: null,
    ...fields,
  };
}

export interface PostOptions {
  secret?: string;
  /** Unix seconds; now when left out. */
  timestamp?: number;
  /** Replaces or, with undefined, removes headers. */
  headers?: Record<string, string | undefined>;
  method?: string;
  client?: http.Agent;
  /** Called with each chunk of the answer's body as it arrives. */
  onChunk?: (chunk: string) => void;
}

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  /** The socket the answer came on, to tell connections apart. */
  socket: unknown;
}

/** post signs body and POSTs it to url as a workflow host does. */
export function post(url: string, body: WireRequest | string | Buffer, o: PostOptions = {}): Promise<Answer> {
  const raw = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === "string" ? body : JSON.stringify(body));
  const id = "msg_" + (typeof body === "object" && !Buffer.isBuffer(body) ? body.requestId : "raw");
  const ts = o.timestamp ?? Math.floor(Date.now() / 1000);
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "agentbus-protocol": "1",
    "webhook-id": id,
    "webhook-timestamp": String(ts),
    "webhook-signature": sign(o.secret ?? SECRET, id, ts, raw),
  };
  for (const [k, v] of Object.entries(o.headers ?? {})) {
    if (v === undefined) delete headers[k];
    else headers[k] = v;
  }
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: o.method ?? "POST", headers, agent: o.client ?? false }, (res) => {
      const chunks: string[] = [];
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        chunks.push(c);
        o.onChunk?.(c);
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: chunks.join(""), socket: res.socket }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(raw);
  });
}

/** call POSTs req and returns the answer object, requiring a 200 with JSON. */
export async function call(url: string, req: WireRequest, o: PostOptions = {}): Promise<WireAnswer> {
  const a = await post(url, req, o);
  if (a.status !== 200) throw new Error(`status ${a.status}: ${a.text}`);
  if (a.headers["content-type"] !== "application/json") throw new Error(`content type ${a.headers["content-type"]}`);
  return JSON.parse(a.text);
}

/** data is a Data request of method with params. */
export function data(method: string, params: unknown, fields: Partial<WireRequest> = {}): WireRequest {
  return request({ type: "Data", message: { text: method, method, data: params }, ...fields });
}
