import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";

import {
  AcquireTimeout, APIError, ConfigError, Conflict, Failed, Forbidden, NotFound, Refused, Session, Unauthorized,
  completeConfig, connect, resultText, DEFAULT_API, DEFAULT_CA_FILE, DEFAULT_TOKEN_FILE, type Config,
} from "../src/index.js";
import { CA_FILE, FakeAPI, FakeClock, FakeSandbox, type Answer, type Request } from "./fake.js";

const BOUND = {
  claim: "agent-0123456789",
  phase: "Bound",
  addresses: [{ name: "metrics", url: "http://10.0.0.1:9090" }, { name: "mcp", url: "http://10.0.0.1:8080/" }],
  headers: { Authorization: "Bearer claim-token" },
};

const error = (status: number, code: string, message: string, reason = "", headers?: Record<string, string>): Answer => ({
  status, headers, body: reason ? { error: code, message, reason } : { error: code, message },
});

describe("Session", () => {
  let dir: string;
  let tokenFile: string;
  let clock: FakeClock;
  const servers: { close(): Promise<void> }[] = [];

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "airlock-client-"));
    tokenFile = join(dir, "token");
    writeFileSync(tokenFile, "sa-token-1\n");
    clock = new FakeClock();
  });
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  const serve = async (respond: (n: number, r: Request) => Answer, tls = false) => {
    const api = await new FakeAPI(respond, tls).start();
    servers.push(api);
    return api;
  };
  const session = (api: FakeAPI, extra: Config = {}) =>
    new Session("s1", {
      runtime: "agent", namespace: "team-a", api: api.url, tokenFile, allowPlainHttp: api.url.startsWith("http://"),
      caFile: CA_FILE, now: clock.now, sleep: clock.sleep, ...extra,
    });

  it("acquires through 202s, honouring Retry-After, reading the token file before each call", async () => {
    const api = await serve((n) => {
      if (n === 0) {
        writeFileSync(tokenFile, "sa-token-2\n"); // the kubelet rotated it
        return { status: 202, body: { claim: "c", phase: "Queued" } };
      }
      if (n === 1) return { status: 202, headers: { "Retry-After": "2" }, body: { claim: "c", phase: "Binding" } };
      if (n === 2) return error(503, "unavailable", "caches", "", { "Retry-After": "3" });
      return { status: 200, body: { ...BOUND, warm: true, resumedWorkspace: { keptAt: "2026-12-01T08:00:00Z", keptBy: "old" }, attestation: { kernel: "6.1" } } };
    });
    const sb = await session(api, { waitSeconds: 45 }).acquire("codegen/default");
    assert.equal(sb.mcpUrl, "http://10.0.0.1:8080/mcp");
    assert.deepEqual(sb.headers, { Authorization: "Bearer claim-token" });
    assert.equal(sb.claim, "agent-0123456789");
    assert.equal(sb.warm, true);
    assert.deepEqual(sb.resumedWorkspace, { keptAt: "2026-12-01T08:00:00Z", keptBy: "old" });
    assert.deepEqual(sb.attestation, { kernel: "6.1" });
    assert.deepEqual(clock.slept, [2000, 3000]);
    assert.deepEqual(api.paths(), Array(4).fill("/v1/sandboxes/acquire"));
    api.requests.forEach((r, i) => {
      assert.equal(r.headers.authorization, i === 0 ? "Bearer sa-token-1" : "Bearer sa-token-2");
      assert.deepEqual(r.body, { namespace: "team-a", runtime: "agent", session: "s1", handle: "codegen/default", waitSeconds: 45 });
    });
  });

  it("stops at the deadline with the last phase, never asking to wait past it", async () => {
    const api = await serve(() => ({ status: 202, headers: { "Retry-After": "10" }, body: { claim: "c", phase: "Queued", reason: "MaxConcurrent" } }));
    await assert.rejects(session(api, { waitSeconds: 300, acquireTimeoutSeconds: 25 }).acquire("codegen/default"), (err: unknown) => {
      assert.ok(err instanceof AcquireTimeout);
      assert.equal(err.phase, "Queued");
      assert.match(err.message, /still Queued \(MaxConcurrent\)/);
      return true;
    });
    assert.deepEqual(api.requests.map((r) => r.body.waitSeconds), [25, 15, 5]);
  });

  it("answers each error status with its class and the operator's reason, without calling again", async () => {
    const cases: [number, string, string, typeof APIError][] = [
      [401, "unauthorized", "", Unauthorized], [403, "forbidden", "", Forbidden], [404, "not_found", "", NotFound],
      [409, "disabled", "", Conflict], [429, "refused", "MaxPerSession", Refused], [502, "failed", "ImagePullBackOff", Failed],
    ];
    for (const [status, code, reason, cls] of cases) {
      const api = await serve(() => error(status, code, "the operator says", reason));
      const s = session(api);
      await assert.rejects(s.acquire("codegen/default"), (err: unknown) => {
        assert.ok(err instanceof cls, `${status}: ${err}`);
        assert.ok(err instanceof APIError);
        assert.deepEqual([err.status, err.code, err.reason, err.detail], [status, code, reason, "the operator says"]);
        if (reason) assert.match(err.message, new RegExp(reason));
        return true;
      });
      assert.equal(api.requests.length, 1);
      await assert.rejects(s.renew("codegen/default"), cls);
    }
  });

  it("renews at most once per half idle timeout per handle", async () => {
    let fail = false;
    const api = await serve((_, r) => {
      if (r.path === "/v1/sandboxes/renew") return fail ? error(409, "not_bound", "Reaping") : { status: 204 };
      if (r.path === "/v1/sessions/close") return { status: 202, body: { claims: [{ claim: "c", handle: "codegen/default", phase: "Bound" }] } };
      return error(404, "not_found", r.path);
    });
    const s = session(api, { idleTimeoutSeconds: 600 });
    const renewals = () => api.paths().filter((p) => p === "/v1/sandboxes/renew").length;
    assert.equal(await s.renew("codegen/default"), true);
    for (let i = 0; i < 10; i++) {
      clock.step(29_000);
      assert.equal(await s.renew("codegen/default"), false);
    }
    assert.equal(await s.renew("lint/default"), true);
    clock.step(10_000); // 300 s after the first
    assert.equal(await s.renew("codegen/default"), true);
    assert.equal(renewals(), 3);
    fail = true;
    clock.step(300_000);
    await assert.rejects(s.renew("codegen/default"), Conflict);
    fail = false;
    assert.equal(await s.renew("codegen/default"), true);
    assert.equal((await s.close()).claims[0].claim, "c");
    assert.equal(await s.renew("codegen/default"), true);
    assert.equal(renewals(), 6);
  });

  it("renews as often as the acquire answer's idleTimeoutSeconds asks", async () => {
    // The runtime's idle timeout (60 s) sets the handle's renewal interval (30 s) without any
    // configuration; a shorter configured one still wins.
    const api = await serve((_, r) => {
      if (r.path === "/v1/sandboxes/acquire") return { status: 200, body: { ...BOUND, idleTimeoutSeconds: 60 } };
      return { status: 204 };
    });
    for (const [configured, every] of [[0, 30], [3600, 30], [20, 10]]) {
      const s = session(api, { idleTimeoutSeconds: configured });
      assert.equal(await s.renew("codegen/default"), true);
      await s.acquire("codegen/default");
      clock.step((every - 1) * 1000);
      assert.equal(await s.renew("codegen/default"), false, `configured ${configured}: sent before ${every} s`);
      clock.step(1000);
      assert.equal(await s.renew("codegen/default"), true, `configured ${configured}: none after ${every} s`);
    }
  });

  it("verifies the API with the CA bundle and refuses plain HTTP and redirects", async () => {
    const api = await serve(() => ({ status: 200, body: BOUND }), true);
    assert.equal((await session(api).acquire("codegen/default")).claim, "agent-0123456789");
    const otherCA = join(dir, "other.crt");
    writeFileSync(otherCA, "");
    await assert.rejects(session(api, { caFile: otherCA }).acquire("codegen/default"));
    assert.throws(() => new Session("s1", { runtime: "agent", namespace: "ns", api: "http://127.0.0.1:1", tokenFile }), /is not https:\/\//);
    const redirect = await serve(() => ({ status: 307, headers: { Location: "https://example.com/x" } }));
    await assert.rejects(session(redirect).acquire("codegen/default"), /answered 307, a redirect to https:\/\/example.com\/x: not followed/);
  });

  it("takes the identity from the environment, the fields winning", () => {
    const env = {
      AIRLOCK_SANDBOX_API: "https://api.example:8443", AIRLOCK_TOKEN_FILE: "/env/token", AIRLOCK_CA_FILE: "/env/ca.crt",
      AIRLOCK_NAMESPACE: "env-ns", AIRLOCK_RUNTIME: "env-rt",
    };
    let c = completeConfig({}, env);
    assert.deepEqual([c.api, c.tokenFile, c.caFile, c.namespace, c.runtime], ["https://api.example:8443", "/env/token", "/env/ca.crt", "env-ns", "env-rt"]);
    c = completeConfig({ runtime: "rt", namespace: "ns", api: "https://other", waitSeconds: 1000 }, env);
    assert.deepEqual([c.api, c.namespace, c.runtime, c.waitSeconds], ["https://other", "ns", "rt", 300]);
    assert.throws(() => completeConfig({ namespace: "ns" }, {}), (err: unknown) => err instanceof ConfigError && /AIRLOCK_RUNTIME/.test(err.message));
    c = completeConfig({ runtime: "rt", namespace: "ns" }, {});
    assert.deepEqual([c.api, c.tokenFile, c.caFile], [DEFAULT_API, DEFAULT_TOKEN_FILE, DEFAULT_CA_FILE]);
  });

  it("connects the official SDK's Client to the sandbox with its Authorization header", async () => {
    const sandbox = await new FakeSandbox("claim-token").start();
    servers.push(sandbox);
    const api = await serve(() => ({ status: 200, body: { ...BOUND, addresses: [{ name: "mcp", url: sandbox.url }] } }));
    const sb = await session(api).acquire("codegen/default");
    const mcp = await connect(sb);
    try {
      const tools = await mcp.listTools();
      assert.deepEqual(tools.tools.map((t) => t.name), ["Write", "Bash", "Read"]);
      await mcp.callTool({ name: "Write", arguments: { file_path: "a.txt", content: "hello\n" } });
      assert.equal(resultText(await mcp.callTool({ name: "Read", arguments: { file_path: "a.txt" } })), "hello\n");
    } finally {
      await mcp.close();
    }
    assert.equal(sandbox.refused, 0);
    assert.deepEqual(sandbox.calls.map((c) => c.name), ["Write", "Read"]);
  });
});
