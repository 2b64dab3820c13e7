// Stand-ins of the Sandbox API (node:http or node:https) and of a sandbox's MCP server (the
// official SDK's server over streamable HTTP, checking the Authorization header).
import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import type { AddressInfo } from "node:net";

import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const testdata = new URL("../../test/testdata/", import.meta.url); // from dist/test/
export const CA_FILE = new URL("ca.crt", testdata).pathname;

export interface Request {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: Record<string, unknown>;
}

export interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: unknown;
}

export class FakeAPI {
  readonly requests: Request[] = [];
  url = "";
  private server: http.Server;

  constructor(respond: (n: number, req: Request) => Answer, tls = false) {
    const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const r: Request = { path: req.url ?? "", headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}") };
        const n = this.requests.length;
        this.requests.push(r);
        const a = respond(n, r);
        const data = a.body === undefined ? "" : JSON.stringify(a.body);
        res.writeHead(a.status, { "Content-Type": "application/json", ...(a.headers ?? {}) });
        res.end(data);
      });
    };
    this.server = tls
      ? https.createServer({ cert: readFileSync(new URL("server.crt", testdata)), key: readFileSync(new URL("server.key", testdata)) }, handler)
      : http.createServer(handler);
    this.tls = tls;
  }

  private tls: boolean;

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const port = (this.server.address() as AddressInfo).port;
    this.url = `${this.tls ? "https" : "http"}://127.0.0.1:${port}`;
    return this;
  }

  paths(): string[] {
    return this.requests.map((r) => r.path);
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** An MCP server with Write, Bash and Read on /mcp, refusing requests without `Bearer <token>`. */
export class FakeSandbox {
  url = "";
  readonly calls: { name: string; arguments: Record<string, unknown> }[] = [];
  refused = 0;
  private server: http.Server;
  private files = new Map<string, string>();

  constructor(private readonly token: string) {
    this.server = http.createServer(async (req, res) => {
      if (req.headers.authorization !== `Bearer ${this.token}`) {
        this.refused++;
        res.writeHead(401).end("unauthorized");
        return;
      }
      const mcp = new Server({ name: "fake-sandboxd", version: "0" }, { capabilities: { tools: {} } });
      mcp.setRequestHandler(ListToolsRequestSchema, async () => ({
        tools: ["Write", "Bash", "Read"].map((name) => ({ name, inputSchema: { type: "object" as const } })),
      }));
      mcp.setRequestHandler(CallToolRequestSchema, async (r) => {
        const args = (r.params.arguments ?? {}) as Record<string, string>;
        this.calls.push({ name: r.params.name, arguments: args });
        switch (r.params.name) {
          case "Write":
            this.files.set(args.file_path, args.content);
            return { content: [{ type: "text", text: `Wrote ${args.file_path}` }] };
          case "Read": {
            const f = this.files.get(args.file_path);
            return f === undefined
              ? { content: [{ type: "text", text: "File does not exist." }], isError: true }
              : { content: [{ type: "text", text: f }] };
          }
          case "Bash":
            return { content: [{ type: "text", text: `ran: ${args.command}\n` }] };
        }
        return { content: [{ type: "text", text: "unknown tool" }], isError: true };
      });
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      res.on("close", () => {
        void transport.close();
        void mcp.close();
      });
      await mcp.connect(transport);
      await transport.handleRequest(req, res);
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** The session's clock and sleep: sleeping moves the clock, nothing waits. */
export class FakeClock {
  t = 1_000_000;
  slept: number[] = [];
  now = () => this.t;
  sleep = async (ms: number) => {
    this.slept.push(ms);
    this.t += ms;
  };
  step(ms: number) {
    this.t += ms;
  }
}
