// The isolation attestation against what Go's pkg/attestation signs (testdata/attestation.json,
// written by its TestPythonFixtures, the same cases the Python client is held to: verified ones,
// forgeries, malleated and non-canonical signatures, other tokens, claims, namespaces and keys).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";

import { IsolationError, Sandbox, Session, parseIsolationKeys, verifyIsolation } from "../src/index.js";
import { FakeAPI } from "./fake.js";

interface Fixtures {
  keys: string;
  namespace: string;
  claim: string;
  token: string;
  cases: { name: string; attestation: unknown; verifies: boolean }[];
}

const fixtures: Fixtures = JSON.parse(readFileSync(new URL("../../test/testdata/attestation.json", import.meta.url), "utf8"));
const expect = { token: fixtures.token, namespace: fixtures.namespace, claim: fixtures.claim };

describe("verifyIsolation", () => {
  it("has the cases Go signed", () => {
    assert.ok(fixtures.cases.length >= 20, `${fixtures.cases.length} cases`);
    assert.ok(fixtures.cases.some((c) => c.verifies) && fixtures.cases.some((c) => !c.verifies));
  });
  for (const c of fixtures.cases) {
    it(`${c.name}: ${c.verifies ? "verifies" : "refused"}`, () => {
      if (c.verifies) {
        const s = verifyIsolation(c.attestation, fixtures.keys, expect);
        assert.equal(s.claim, fixtures.claim);
        assert.equal(s.namespace, fixtures.namespace);
        assert.match(s.kernel, /^(Dedicated|Shared)$/);
      } else {
        assert.throws(() => verifyIsolation(c.attestation, fixtures.keys, expect), IsolationError);
      }
    });
  }
  it("refuses a verified statement for another token, claim or namespace", () => {
    const ok = fixtures.cases.find((c) => c.name === "verified")!;
    for (const other of [{ ...expect, token: "another" }, { ...expect, claim: "c2" }, { ...expect, namespace: "team-b" }]) {
      assert.throws(() => verifyIsolation(ok.attestation, fixtures.keys, other), IsolationError);
    }
  });
  it("refuses without an attestation, and a bundle that is not the operator's", () => {
    assert.throws(() => verifyIsolation(undefined, fixtures.keys, expect), /no attestation/);
    assert.throws(() => parseIsolationKeys(""), /no public key/);
    assert.throws(() => parseIsolationKeys("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), /CERTIFICATE/);
    assert.throws(() => parseIsolationKeys(fixtures.keys.replace(/-----END PUBLIC KEY-----\n?$/, "")), /END/);
  });
});

describe("Sandbox.verifyIsolation", () => {
  it("checks the answer's attestation with the sandbox's own token and claim", () => {
    const ok = fixtures.cases.find((c) => c.name === "verified")!;
    const answer = {
      claim: fixtures.claim, phase: "Bound", addresses: [{ name: "mcp", url: "http://10.0.0.1:8080" }],
      headers: { Authorization: `Bearer ${fixtures.token}` }, attestation: ok.attestation as Record<string, unknown>,
    };
    assert.equal(new Sandbox("codegen/default", answer).verifyIsolation(fixtures.keys, fixtures.namespace).claim, fixtures.claim);
    const other = { ...answer, headers: { Authorization: "Bearer another-token" } };
    assert.throws(() => new Sandbox("codegen/default", other).verifyIsolation(fixtures.keys, fixtures.namespace), IsolationError);
    const none = { ...answer, attestation: undefined };
    assert.throws(() => new Sandbox("codegen/default", none).verifyIsolation(fixtures.keys, fixtures.namespace), /no attestation/);
  });
});

describe("Session with verifyIsolation", () => {
  const dir = mkdtempSync(join(tmpdir(), "airlock-isolation-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const tokenFile = join(dir, "token");
  writeFileSync(tokenFile, "sa-token\n");
  const keysFile = join(dir, "isolation-keys.pem");
  writeFileSync(keysFile, fixtures.keys);
  const answerOf = (name: string) => ({
    claim: fixtures.claim, phase: "Bound", addresses: [{ name: "mcp", url: "http://10.0.0.1:8080" }],
    headers: { Authorization: `Bearer ${fixtures.token}` }, attestation: fixtures.cases.find((c) => c.name === name)!.attestation,
  });
  const acquire = async (answer: unknown, extra: Record<string, unknown>) => {
    const api = await new FakeAPI(() => ({ status: 200, body: answer as Record<string, unknown> })).start();
    try {
      return await new Session("s1", {
        runtime: "agent", namespace: fixtures.namespace, api: api.url, tokenFile, allowPlainHttp: true,
        verifyIsolation: true, isolationKeysFile: keysFile, ...extra,
      }).acquire("codegen/default");
    } finally {
      await api.close();
    }
  };

  it("gives the verified statement", async () => {
    const sb = await acquire(answerOf("verified"), {});
    assert.equal(sb.isolation?.claim, fixtures.claim);
  });
  it("refuses a statement that does not verify, or none", async () => {
    await assert.rejects(acquire(answerOf("signed by an unpublished key"), {}), IsolationError);
    await assert.rejects(acquire({ ...answerOf("verified"), attestation: undefined }, {}), /no attestation/);
    await assert.rejects(acquire(answerOf("verified"), { isolationKeysFile: join(dir, "none.pem") }), /isolation keys/);
  });
  it("with requireDedicatedKernel, refuses the node's kernel", async () => {
    assert.equal((await acquire(answerOf("verified"), { requireDedicatedKernel: true })).isolation?.kernel, "Dedicated");
    await assert.rejects(acquire(answerOf("verified, shared kernel"), { requireDedicatedKernel: true }), /not a kernel of its own/);
    assert.equal((await acquire(answerOf("verified, shared kernel"), {})).isolation?.kernel, "Shared");
  });
});
