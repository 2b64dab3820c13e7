import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";

import { main } from "../examples/agent_loop.js";
import { CA_FILE, FakeAPI, FakeSandbox } from "./fake.js";

// examples/agent_loop.ts against stand-ins of the Sandbox API (TLS, verified with the CA bundle
// $AIRLOCK_CA_FILE names) and of the sandbox's MCP server.
it("runs the example's agent loop", async () => {
  const sandbox = await new FakeSandbox("claim-token").start();
  const api = await new FakeAPI((_, r) => {
    if (r.path === "/v1/sandboxes/acquire") {
      return { status: 200, body: { claim: "c", phase: "Bound", addresses: [{ name: "mcp", url: sandbox.url }], headers: { Authorization: "Bearer claim-token" } } };
    }
    if (r.path === "/v1/sandboxes/renew") return { status: 204 };
    return { status: 202, body: { claims: [] } };
  }, true).start();
  const dir = mkdtempSync(join(tmpdir(), "airlock-example-"));
  writeFileSync(join(dir, "token"), "sa-token");
  const env = { AIRLOCK_SANDBOX_API: api.url, AIRLOCK_TOKEN_FILE: join(dir, "token"), AIRLOCK_CA_FILE: CA_FILE, AIRLOCK_NAMESPACE: "team-a", AIRLOCK_RUNTIME: "agent" };
  const saved = { ...process.env };
  Object.assign(process.env, env);
  const lines: string[] = [];
  try {
    assert.equal(await main("s1", (l) => lines.push(l)), 0);
  } finally {
    process.env = saved;
    await sandbox.close();
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  }
  assert.ok(lines.includes("Write -> Wrote hello.py"), lines.join("\n"));
  assert.equal(lines.at(-1), "closed session s1 (0 sandbox(es))");
  assert.deepEqual(sandbox.calls.map((c) => c.name), ["Write", "Bash", "Read"]);
  // One renewal (the throttle), then the close.
  assert.deepEqual(api.paths(), ["/v1/sandboxes/acquire", "/v1/sandboxes/renew", "/v1/sessions/close"]);
});
