/**
 * The operator's isolation attestation (airlock's pkg/attestation; docs/isolation.md, "Verifying
 * it"): the published keys' PEM bundle (isolation-keys.pem of the ConfigMap airlock-ca), and the
 * checks of a signed statement, as pkg/client and the Python client make them. Ed25519 is Node's
 * own (node:crypto, OpenSSL: canonical R and S < L, as RFC 8032 asks).
 */
import { createHash, createPublicKey, verify, type KeyObject } from "node:crypto";

import { AirlockError } from "./errors.js";

/** The statement's format; a verifier refuses any other. */
export const ISOLATION_VERSION = "airlock.dev/isolation/v1";

/** Where a runtime's pod has the operator's isolation keys (airlock-ca mounted at
 * /var/run/airlock/ca). */
export const DEFAULT_ISOLATION_KEYS_FILE = "/var/run/airlock/ca/isolation-keys.pem";

/** The attestation of an acquire answer: the statement's bytes and its signature (base64), and
 * the signing key's ID. */
export interface Attestation {
  statement: string;
  signature: string;
  keyID: string;
}

/** What the operator attests (pkg/attestation.Statement); evidence is base64, as in its JSON. */
export interface IsolationStatement {
  version: string;
  namespace: string;
  claim: string;
  claimUID: string;
  pod: string;
  podUID: string;
  node: string;
  nodeKernel: string;
  /** "Dedicated", "Shared" or "Unknown". */
  kernel: string;
  recordDigest: string;
  tokenHash: string;
  evidenceDigest: string;
  evidence: string;
  issuedAt: string;
}

/** A sandbox whose isolation was not proven: no attestation, one that does not verify, or one
 * that does not say what was required. */
export class IsolationError extends AirlockError {}

const FIELDS = new Set([
  "version", "namespace", "claim", "claimUID", "pod", "podUID", "node", "nodeKernel", "kernel",
  "recordDigest", "tokenHash", "evidenceDigest", "evidence", "issuedAt",
]);

const PEM_BLOCK = /-----BEGIN ([^-\r\n]*)-----\r?\n([\s\S]*?)-----END \1-----/g;
// An Ed25519 key's PKIX SubjectPublicKeyInfo (RFC 8410): this prefix and the key's 32 bytes.
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function digest(b: Uint8Array): string {
  return createHash("sha256").update(b).digest("hex");
}

/** A public key's ID: the first 16 hex digits of the sha256 of its 32 bytes. */
export function keyID(raw: Uint8Array): string {
  return digest(raw).slice(0, 16);
}

function base64(value: unknown, what: string): Buffer {
  if (typeof value !== "string" || value.length % 4 !== 0 || !BASE64.test(value)) {
    throw new IsolationError(`${what} is not base64`);
  }
  return Buffer.from(value, "base64");
}

/** The Ed25519 public keys of a PEM bundle of "PUBLIC KEY" blocks, by key ID. A block of another
 * type or key kind is an error (the bundle is the operator's, whole). */
export function parseIsolationKeys(pem: string): Map<string, KeyObject> {
  const keys = new Map<string, KeyObject>();
  for (const m of pem.matchAll(PEM_BLOCK)) {
    if (m[1] !== "PUBLIC KEY") {
      throw new IsolationError(`a PEM block of type "${m[1]}" in the key bundle, want "PUBLIC KEY"`);
    }
    const der = base64(m[2].replace(/\s+/g, ""), "a PUBLIC KEY block");
    if (der.length !== SPKI_PREFIX.length + 32 || !der.subarray(0, SPKI_PREFIX.length).equals(SPKI_PREFIX)) {
      throw new IsolationError("a PUBLIC KEY block that is not an Ed25519 key");
    }
    keys.set(keyID(der.subarray(SPKI_PREFIX.length)), createPublicKey({ key: der, format: "der", type: "spki" }));
  }
  if (pem.replace(PEM_BLOCK, "").includes("-----BEGIN")) {
    throw new IsolationError("a PEM block without its END line in the key bundle");
  }
  if (keys.size === 0) {
    throw new IsolationError("no public key in the bundle");
  }
  return keys;
}

/** What a statement must be about: the sandbox this bearer token opens, of this claim and
 * namespace. */
export interface IsolationExpect {
  token: string;
  namespace: string;
  claim: string;
}

/**
 * Checks an acquire answer's attestation against the published keys (the PEM of
 * isolation-keys.pem): the key of its keyID is published, the signature holds over the
 * statement's exact bytes, the statement is of this version with only its fields, its evidence
 * is what its digest says, and it is about the sandbox of expect's token, claim and namespace.
 * Returns the statement; throws IsolationError saying what did not hold.
 */
export function verifyIsolation(attestation: unknown, keysPem: string | Map<string, KeyObject>, expect: IsolationExpect): IsolationStatement {
  const keys = typeof keysPem === "string" ? parseIsolationKeys(keysPem) : keysPem;
  if (attestation === null || typeof attestation !== "object") {
    throw new IsolationError("no attestation");
  }
  const a = attestation as Record<string, unknown>;
  const key = typeof a.keyID === "string" ? keys.get(a.keyID) : undefined;
  if (key === undefined) {
    throw new IsolationError(`attestation signed by key ${JSON.stringify(a.keyID)}, which is not among the ${keys.size} published`);
  }
  const statement = base64(a.statement, "statement");
  const signature = base64(a.signature, "signature");
  if (signature.length !== 64 || !verify(null, statement, key, signature)) {
    throw new IsolationError("the signature does not verify");
  }
  let s: Record<string, unknown>;
  try {
    s = JSON.parse(statement.toString("utf8"));
  } catch (err) {
    throw new IsolationError(`statement: ${(err as Error).message}`);
  }
  if (s === null || typeof s !== "object" || Array.isArray(s)) {
    throw new IsolationError("the statement is not a JSON object");
  }
  for (const [name, value] of Object.entries(s)) {
    if (!FIELDS.has(name)) {
      throw new IsolationError(`statement: unknown field "${name}"`);
    }
    if (name !== "evidence" && typeof value !== "string") {
      throw new IsolationError(`statement: ${name} is not a string`);
    }
  }
  const evidence = s.evidence == null ? Buffer.alloc(0) : base64(s.evidence, "the statement's evidence");
  if (s.version !== ISOLATION_VERSION) {
    throw new IsolationError(`statement version ${JSON.stringify(s.version)}, want "${ISOLATION_VERSION}"`);
  }
  if (digest(evidence) !== s.evidenceDigest) {
    throw new IsolationError("the statement's evidence is not what its digest says");
  }
  if (s.tokenHash !== digest(Buffer.from(expect.token, "utf8"))) {
    throw new IsolationError("the statement is about another sandbox: its token hash is not this token's");
  }
  if (s.claim !== expect.claim || s.namespace !== expect.namespace) {
    throw new IsolationError(`the statement is about claim ${s.namespace}/${s.claim}, not ${expect.namespace}/${expect.claim}`);
  }
  return s as unknown as IsolationStatement;
}
