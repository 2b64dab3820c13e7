// A runtime's agent loop with an airlock sandbox, to copy: acquire, then Write, Bash and Read
// through the official MCP SDK's Client (renewing after each call), close. In a pod that runs as
// the AgentRuntime's ServiceAccount, with the projected token and airlock-ca mounted
// (docs/clients.md):
//
//     AIRLOCK_RUNTIME=agent node dist/examples/agent_loop.js session-1
//
// A real agent asks its model which tool to call next; here the "model" is a fixed plan.
import { pathToFileURL } from "node:url";

import { APIError, AcquireTimeout, Refused, Session, connect, resultText } from "../src/index.js";

const HANDLE = "codegen/default";

const PLAN: [string, Record<string, unknown>][] = [
  ["Write", { file_path: "hello.py", content: "print('hello from the sandbox')\n" }],
  ["Bash", { command: "python3 hello.py || echo 'no python3 in this sandbox'" }],
  ["Read", { file_path: "hello.py" }],
];

export async function main(sessionId: string, log: (line: string) => void = console.log): Promise<number> {
  const session = new Session(sessionId); // runtime from $AIRLOCK_RUNTIME, the rest from the pod
  let sandbox;
  try {
    sandbox = await session.acquire(HANDLE);
  } catch (err) {
    if (err instanceof Refused) log(`refused (${err.reason}): ${err.detail}`); // a limit: not queued
    else if (err instanceof APIError || err instanceof AcquireTimeout) log(`no sandbox: ${err.message}`);
    else throw err;
    return 1;
  }
  log(`sandbox ${sandbox.claim} at ${sandbox.mcpUrl} (warm ${sandbox.warm}, resumed ${sandbox.resumedWorkspace !== undefined})`);
  const mcp = await connect(sandbox); // an MCP Client of the official SDK, connected
  try {
    for (const [name, args] of PLAN) {
      const result = await mcp.callTool({ name, arguments: args });
      log(`${name} -> ${result.isError ? "ERROR " : ""}${resultText(result).trim()}`);
      await session.renew(HANDLE); // after each tool call: at most one API write per idle/2
    }
  } finally {
    await mcp.close();
    const closed = await session.close(); // reaps the sandbox now, with its sync-back
    log(`closed session ${sessionId} (${closed.claims?.length ?? 0} sandbox(es))`);
  }
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main(process.argv[2] ?? "example-session");
}
