import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import type { Sandbox } from "./session.js";

export interface ConnectOptions {
  /** The client's name and version, as the MCP server sees them. */
  name?: string;
  version?: string;
}

/** The transport of the official MCP SDK to the sandbox: streamable HTTP to its MCP endpoint,
 * with the Authorization header on every request. Hand it to a framework that takes a transport. */
export function transport(sandbox: Sandbox): StreamableHTTPClientTransport {
  return new StreamableHTTPClientTransport(new URL(sandbox.mcpUrl), {
    requestInit: { headers: sandbox.headers },
  });
}

/** An MCP Client of the official SDK, already connected to the sandbox. Close it with
 * client.close() when done (the airlock session is closed apart, with Session.close). */
export async function connect(sandbox: Sandbox, opts: ConnectOptions = {}): Promise<Client> {
  const client = new Client({ name: opts.name ?? "airlock-client-typescript", version: opts.version ?? "0.1.0" });
  await client.connect(transport(sandbox));
  return client;
}

/** The text of a tools/call result's text contents, joined. */
export function resultText(result: object): string {
  const raw = (result as { content?: unknown }).content;
  const content: unknown[] = Array.isArray(raw) ? raw : [];
  return content
    .filter((c): c is { type: "text"; text: string } => typeof c === "object" && c !== null && (c as { type?: unknown }).type === "text")
    .map((c) => c.text)
    .join("");
}
