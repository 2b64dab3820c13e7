/**
 * airlock's client for agent runtimes in TypeScript: acquire a sandbox through the Sandbox API
 * (SPEC section 4), get an MCP Client of the official SDK connected to it, renew it after each
 * tool call, close the session. The acquire answer's attestation (the isolation evidence,
 * signed by the operator) is checked by sandbox.verifyIsolation(keysPem, namespace).
 * docs/clients.md in the airlock repository compares the Go, Python and TypeScript clients.
 *
 *     const session = new Session("session-1", { runtime: "agent" });
 *     const sandbox = await session.acquire("codegen/default");
 *     const mcp = await connect(sandbox);
 *     const result = await mcp.callTool({ name: "Bash", arguments: { command: "echo hi" } });
 *     await session.renew("codegen/default");
 *     await mcp.close();
 *     await session.close();
 */
export * from "./errors.js";
export * from "./session.js";
export * from "./mcp.js";
export * from "./isolation.js";
