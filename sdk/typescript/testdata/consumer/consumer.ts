// A program of a project that installed the kit from its tarball: it imports the kit by its
// package name, serves an agent, sends it a signed request and an unsigned one, and prints what
// came back as one JSON line.
import { Agent, newSecret, sign } from "@agentbus/remote-agent";

const secret = newSecret();
// No logger: the unsigned request's refusal would otherwise be logged beside the output.
const agent = new Agent({ name: "Installed", secret, logger: null });
agent.data<{ values: number[] }>("sum", (ctx) => ({ data: { sum: ctx.data.values.reduce((a, b) => a + b, 0) } }));

const server = await agent.listen(0, "127.0.0.1");
const address = server.address();
if (address === null || typeof address === "string") throw new Error("the server has no port");
const url = `http://127.0.0.1:${address.port}/agentbus`;

const body = JSON.stringify({
  protocol: 1,
  type: "Data",
  agent: "Installed",
  tenantId: "default",
  requestId: "req-1",
  attempt: 1,
  message: { text: "sum", method: "sum", data: { values: [2, 3] } },
});
const timestamp = Math.floor(Date.now() / 1000);
const headers = { "content-type": "application/json", "agentbus-protocol": "1", "webhook-id": "msg_1", "webhook-timestamp": String(timestamp) };
const signed = await fetch(url, {
  method: "POST",
  headers: { ...headers, "webhook-signature": sign(secret, "msg_1", timestamp, body) },
  body,
});
const answer: unknown = await signed.json();
const unsigned = await fetch(url, { method: "POST", headers, body });
await unsigned.arrayBuffer();
server.closeAllConnections();
server.close();
console.log(JSON.stringify({ signed: signed.status, answer, unsigned: unsigned.status }));
