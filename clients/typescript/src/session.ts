import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as https from "node:https";

import { AcquireTimeout, AirlockError, APIError, ConfigError, errorClasses, Unavailable } from "./errors.js";
import { DEFAULT_ISOLATION_KEYS_FILE, IsolationError, verifyIsolation, type IsolationStatement } from "./isolation.js";

// Where a runtime's pod finds its identity, and the environment variables that override each
// (the same as the Go and Python clients).
export const DEFAULT_API = "https://airlock-sandbox-api.airlock-system.svc:8443";
export const DEFAULT_TOKEN_FILE = "/var/run/secrets/airlock/token"; // projected, audience airlock
export const DEFAULT_CA_FILE = "/var/run/airlock/ca/ca.crt"; // the ConfigMap airlock-ca
export const DEFAULT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
export const DEFAULT_IDLE_TIMEOUT_SECONDS = 30 * 60; // AgentRuntime spec.sandbox.idleTimeout's default
export const DEFAULT_ACQUIRE_TIMEOUT_SECONDS = 10 * 60;
export const DEFAULT_WAIT_SECONDS = 30;
export const MAX_WAIT_SECONDS = 300;
const DEFAULT_RETRY_AFTER = 1;
const MAX_RETRY_AFTER = 30;

export const ENV_API = "AIRLOCK_SANDBOX_API";
export const ENV_ISOLATION_KEYS_FILE = "AIRLOCK_ISOLATION_KEYS_FILE";
export const ENV_TOKEN_FILE = "AIRLOCK_TOKEN_FILE";
export const ENV_CA_FILE = "AIRLOCK_CA_FILE";
export const ENV_NAMESPACE = "AIRLOCK_NAMESPACE";
export const ENV_RUNTIME = "AIRLOCK_RUNTIME";

/** Who the runtime is and where its Sandbox API is. Empty fields come from the environment
 * (AIRLOCK_SANDBOX_API, AIRLOCK_TOKEN_FILE, AIRLOCK_CA_FILE, AIRLOCK_NAMESPACE, AIRLOCK_RUNTIME),
 * else from the pod (the defaults above; the namespace from the ServiceAccount's mount). */
export interface Config {
  runtime?: string;
  namespace?: string;
  api?: string;
  /** Read before every call: the kubelet rotates the projected token. */
  tokenFile?: string;
  /** The airlock-ca bundle, read for every call (it follows a rotation). */
  caFile?: string;
  /** Allow an http:// API (an operator run with --tls-mode=none). */
  allowPlainHttp?: boolean;
  /** The runtime's spec.sandbox.idleTimeout: renew sends at most once per half of the shorter of
   * it and the acquire answer's idleTimeoutSeconds; with neither (0 or unset here, and an
   * operator that does not say it), DEFAULT_IDLE_TIMEOUT_SECONDS. */
  idleTimeoutSeconds?: number;
  acquireTimeoutSeconds?: number;
  waitSeconds?: number;
  /** Verify each Bound answer's isolation statement with the keys in isolationKeysFile, and
   * refuse (IsolationError) a sandbox whose statement is missing or does not verify. */
  verifyIsolation?: boolean;
  /** With verifyIsolation: also refuse a sandbox whose kernel is not its own ("Dedicated"). */
  requireDedicatedKernel?: boolean;
  /** The operator's published keys: $AIRLOCK_ISOLATION_KEYS_FILE, else
   * DEFAULT_ISOLATION_KEYS_FILE; read at each acquire (it follows a rotation). */
  isolationKeysFile?: string;
  /** The clock of the renewal throttle and the acquire deadline, in ms (tests). */
  now?: () => number;
  /** Acquire's wait between calls, in ms (tests). */
  sleep?: (ms: number) => Promise<void>;
}

export type CompleteConfig = Required<Config>;

export function completeConfig(c: Config = {}, env: NodeJS.ProcessEnv = process.env): CompleteConfig {
  const pick = (v: string | undefined, name: string, def: string) => v || env[name] || def;
  let namespace = pick(c.namespace, ENV_NAMESPACE, "");
  if (!namespace) {
    try {
      namespace = readFileSync(DEFAULT_NAMESPACE_FILE, "utf8").trim();
    } catch (err) {
      throw new ConfigError(`no namespace: set namespace or $${ENV_NAMESPACE} (${(err as Error).message})`);
    }
  }
  const runtime = pick(c.runtime, ENV_RUNTIME, "");
  if (!runtime) throw new ConfigError(`no runtime: set runtime or $${ENV_RUNTIME} to the AgentRuntime's name`);
  return {
    runtime,
    namespace,
    api: pick(c.api, ENV_API, DEFAULT_API),
    tokenFile: pick(c.tokenFile, ENV_TOKEN_FILE, DEFAULT_TOKEN_FILE),
    caFile: pick(c.caFile, ENV_CA_FILE, DEFAULT_CA_FILE),
    allowPlainHttp: c.allowPlainHttp ?? false,
    verifyIsolation: c.verifyIsolation ?? false,
    requireDedicatedKernel: c.requireDedicatedKernel ?? false,
    isolationKeysFile: pick(c.isolationKeysFile, ENV_ISOLATION_KEYS_FILE, DEFAULT_ISOLATION_KEYS_FILE),
    idleTimeoutSeconds: c.idleTimeoutSeconds || 0,
    acquireTimeoutSeconds: c.acquireTimeoutSeconds || DEFAULT_ACQUIRE_TIMEOUT_SECONDS,
    waitSeconds: Math.max(1, Math.min(c.waitSeconds || DEFAULT_WAIT_SECONDS, MAX_WAIT_SECONDS)),
    now: c.now ?? Date.now,
    sleep: c.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms))),
  };
}

/** The acquire answer (pkg/client/openapi.json AcquireResponse). */
export interface AcquireResponse {
  claim: string;
  phase: string;
  reason?: string;
  message?: string;
  addresses?: { name: string; url: string }[];
  headers?: Record<string, string>;
  resumedWorkspace?: { keptAt: string; keptBy?: string };
  idleTimeoutSeconds?: number;
  warm?: boolean;
  /** The operator's signed isolation statement (Sandbox.verifyIsolation checks it). */
  attestation?: Record<string, unknown>;
}

export interface SessionClaim {
  claim?: string;
  handle: string;
  phase: string;
  reason?: string;
}

/** An acquired sandbox: its MCP endpoint and the header every MCP request must carry, and what
 * the acquire answer says about it. */
export class Sandbox {
  readonly handle: string;
  readonly claim: string;
  /** The MCP endpoint (streamable HTTP): the address named "mcp" (else the first) + /mcp. */
  readonly mcpUrl: string;
  /** The Authorization header's value: the claim's bearer token. */
  readonly authorization: string;
  readonly warm: boolean;
  readonly resumedWorkspace?: { keptAt: string; keptBy?: string };
  /** The operator's signed isolation statement, as sent: verifyIsolation checks it. */
  readonly attestation?: Record<string, unknown>;
  /** The verified statement, when the session verifies isolation (Config.verifyIsolation). */
  isolation?: IsolationStatement;
  readonly answer: AcquireResponse;

  constructor(handle: string, answer: AcquireResponse) {
    const addresses = answer.addresses ?? [];
    if (answer.phase !== "Bound" || addresses.length === 0) {
      throw new AirlockError(`sandbox ${handle}: the acquire answer has no Bound address: ${JSON.stringify(answer)}`);
    }
    const addr = addresses.find((a) => a.name === "mcp") ?? addresses[0];
    this.handle = handle;
    this.claim = answer.claim;
    this.mcpUrl = addr.url.replace(/\/+$/, "") + "/mcp";
    this.authorization = answer.headers?.Authorization ?? "";
    this.warm = answer.warm ?? false;
    this.resumedWorkspace = answer.resumedWorkspace;
    this.attestation = answer.attestation;
    this.answer = answer;
  }

  /** Checks the acquire answer's attestation against the operator's published keys (the PEM of
   * isolation-keys.pem, DEFAULT_ISOLATION_KEYS_FILE in a runtime's pod): signed by one of them,
   * about this claim of namespace and the token this sandbox is opened with. Returns the
   * statement (its kernel: "Dedicated", "Shared" or "Unknown"); throws IsolationError. */
  verifyIsolation(keysPem: string, namespace: string): IsolationStatement {
    const token = this.authorization.replace(/^Bearer /, "");
    return verifyIsolation(this.attestation, keysPem, { token, namespace, claim: this.claim });
  }

  /** The HTTP headers for the sandbox's MCP server (Authorization). */
  get headers(): Record<string, string> {
    return { ...(this.answer.headers ?? { Authorization: this.authorization }) };
  }
}

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: unknown;
}

function retryAfter(headers: http.IncomingHttpHeaders): number {
  const v = headers["retry-after"];
  const secs = Number.parseInt(Array.isArray(v) ? v[0] : (v ?? ""), 10);
  return Number.isNaN(secs) ? 0 : Math.min(Math.max(secs, 0), MAX_RETRY_AFTER);
}

/** The Sandbox API's four calls, one request each: the token file read before each, the API
 * verified with the CA bundle, plain HTTP refused unless allowed, redirects never followed. */
export class Client {
  readonly base: string;
  /** The last answer's HTTP status. */
  lastStatus = 0;

  constructor(
    api: string,
    private readonly tokenFile: string,
    private readonly caFile: string,
    allowPlainHttp = false,
  ) {
    if (api.startsWith("http://") && !allowPlainHttp) {
      throw new ConfigError(`the Sandbox API URL ${api} is not https://: the token would cross in clear (allowPlainHttp for --tls-mode=none)`);
    }
    if (!api.startsWith("https://") && !api.startsWith("http://")) {
      throw new ConfigError(`the Sandbox API URL ${api} is not https://`);
    }
    this.base = api.replace(/\/+$/, "");
  }

  token(): string {
    const token = readFileSync(this.tokenFile, "utf8").trim();
    if (!token) throw new ConfigError(`the token file ${this.tokenFile} is empty`);
    return token;
  }

  /** POSTs body to path; resolves a 2xx, rejects with the APIError subclass of any other. */
  async post(path: string, body: unknown, timeoutSeconds = 60): Promise<Reply> {
    const url = new URL(this.base + path);
    const data = Buffer.from(JSON.stringify(body));
    const headers = {
      "Content-Type": "application/json",
      Accept: "application/json",
      Authorization: `Bearer ${this.token()}`,
      "Content-Length": String(data.length),
    };
    const reply = await new Promise<{ status: number; headers: http.IncomingHttpHeaders; raw: Buffer }>((resolve, reject) => {
      const opts: https.RequestOptions = { method: "POST", headers, timeout: timeoutSeconds * 1000 };
      const req =
        url.protocol === "https:"
          ? https.request(url, { ...opts, ca: readFileSync(this.caFile), agent: false })
          : http.request(url, opts);
      req.on("timeout", () => req.destroy(new AirlockError(`${path}: no answer in ${timeoutSeconds} s`)));
      req.on("error", reject);
      req.on("response", (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, raw: Buffer.concat(chunks) }));
        res.on("error", reject);
      });
      req.end(data);
    });
    this.lastStatus = reply.status;
    const { status } = reply;
    if (status >= 300 && status < 400) {
      const location = reply.headers.location;
      throw new APIError(path, status, "", `a redirect to ${location}`, "", 0,
        `${path} answered ${status}, a redirect to ${location}: not followed (the token is for the Sandbox API only)`);
    }
    let parsed: unknown = undefined;
    if (reply.raw.length > 0) {
      try {
        parsed = JSON.parse(reply.raw.toString("utf8"));
      } catch {
        if (status < 400) throw new APIError(path, status, "", `an answer that is not JSON: ${reply.raw.subarray(0, 200)}`);
      }
    }
    if (status < 200 || status >= 300) {
      const err = (parsed && typeof parsed === "object" ? parsed : {}) as Record<string, unknown>;
      const detail = parsed ? String(err.message ?? "") : reply.raw.subarray(0, 200).toString("utf8").trim();
      const cls = errorClasses[status] ?? APIError;
      const retry = status === 503 ? (reply.headers["retry-after"] ? retryAfter(reply.headers) : DEFAULT_RETRY_AFTER) : 0;
      throw new cls(path, status, String(err.error ?? ""), detail, String(err.reason ?? ""), retry);
    }
    return { status, headers: reply.headers, body: parsed };
  }
}

/** One session of an agent runtime: acquire its sandboxes by handle, renew them after each tool
 * call (at most one renewal per half idle timeout per handle, SPEC section 3), close it. */
export class Session {
  readonly id: string;
  readonly config: CompleteConfig;
  readonly client: Client;
  private readonly renewed = new Map<string, number>();
  private readonly idle = new Map<string, number>(); // handle -> the idle timeout its acquire answer said, seconds

  constructor(id: string, config: Config = {}) {
    this.id = id;
    this.config = completeConfig(config);
    const c = this.config;
    this.client = new Client(c.api, c.tokenFile, c.caFile, c.allowPlainHttp);
  }

  private body(extra: Record<string, unknown> = {}): Record<string, unknown> {
    return { namespace: this.config.namespace, runtime: this.config.runtime, session: this.id, ...extra };
  }

  /** The session's sandbox of handle, once Bound. Calls again on 202 (after its Retry-After when
   * it has one) and on 503 (after its Retry-After, else 1 s) until acquireTimeoutSeconds;
   * rejects with the APIError subclass of any other error answer, AcquireTimeout at the
   * deadline. */
  async acquire(handle: string): Promise<Sandbox> {
    const c = this.config;
    const deadline = c.now() + c.acquireTimeoutSeconds * 1000;
    let last: AcquireResponse | undefined;
    for (;;) {
      const left = (deadline - c.now()) / 1000;
      if (left <= 0) throw new AcquireTimeout(handle, last?.phase ?? "", last?.reason ?? "", last?.message ?? "");
      const wait = Math.max(0, Math.min(c.waitSeconds, Math.floor(left)));
      let retry = 0;
      try {
        const reply = await this.client.post("/v1/sandboxes/acquire", this.body({ handle, waitSeconds: wait }), wait + 30);
        const got = (reply.body ?? {}) as AcquireResponse;
        if (reply.status === 200) {
          const sandbox = new Sandbox(handle, got);
          if (typeof got.idleTimeoutSeconds === "number" && got.idleTimeoutSeconds > 0) this.idle.set(handle, got.idleTimeoutSeconds);
          if (c.verifyIsolation) sandbox.isolation = this.proveIsolation(sandbox);
          return sandbox;
        }
        last = got;
        retry = retryAfter(reply.headers);
      } catch (err) {
        if (!(err instanceof Unavailable)) throw err;
        retry = err.retryAfter;
      }
      if (wait === 0 && retry === 0) retry = DEFAULT_RETRY_AFTER; // an answer at once: do not spin
      if (retry > 0) await c.sleep(Math.min(retry * 1000, Math.max(deadline - c.now(), 0)));
    }
  }

  /** The sandbox's verified statement, or IsolationError: not signed by a published key, not
   * about this sandbox, or (requireDedicatedKernel) not a kernel of its own. A refused sandbox
   * stays the session's claim: close reaps it. */
  private proveIsolation(sandbox: Sandbox): IsolationStatement {
    const c = this.config;
    let keys: string;
    try {
      keys = readFileSync(c.isolationKeysFile, "utf8");
    } catch (err) {
      throw new IsolationError(`sandbox ${sandbox.handle}: the operator's isolation keys: ${(err as Error).message}`);
    }
    let statement: IsolationStatement;
    try {
      statement = sandbox.verifyIsolation(keys, c.namespace);
    } catch (err) {
      throw new IsolationError(`sandbox ${sandbox.handle} (claim ${sandbox.claim}): its isolation is not proven: ${(err as Error).message}`);
    }
    if (c.requireDedicatedKernel && statement.kernel !== "Dedicated") {
      throw new IsolationError(`sandbox ${sandbox.handle} (claim ${sandbox.claim}) runs on kernel "${statement.kernel}" on node ${statement.node}, not a kernel of its own`);
    }
    return statement;
  }

  /** Half the shorter of the handle's acquire answer's idle timeout and the configured one
   * (DEFAULT_IDLE_TIMEOUT_SECONDS's half with neither), in milliseconds. */
  private renewEveryMs(handle: string): number {
    const known = [this.idle.get(handle) ?? 0, this.config.idleTimeoutSeconds].filter((t) => t > 0);
    return ((known.length ? Math.min(...known) : DEFAULT_IDLE_TIMEOUT_SECONDS) * 1000) / 2;
  }

  /** Tells the operator the sandbox was used; call it after each tool call. Sends at most one
   * renewal per half idle timeout for each handle; resolves whether it sent one. A renewal that
   * fails rejects and is not counted. */
  async renew(handle: string): Promise<boolean> {
    const now = this.config.now();
    const last = this.renewed.get(handle);
    if (last !== undefined && now - last < this.renewEveryMs(handle)) return false;
    this.renewed.set(handle, now); // taken before the call: a concurrent renew does not send too
    try {
      await this.client.post("/v1/sandboxes/renew", this.body({ handle }));
    } catch (err) {
      if (this.renewed.get(handle) === now) {
        // not counted: the next call sends again
        if (last === undefined) this.renewed.delete(handle);
        else this.renewed.set(handle, last);
      }
      throw err;
    }
    return true;
  }

  /** Creates the claims of the runtime's eager sandboxes for this session (sessions/open). */
  async open(): Promise<{ claims: SessionClaim[] }> {
    return (await this.client.post("/v1/sessions/open", this.body())).body as { claims: SessionClaim[] };
  }

  /** Reaps every sandbox of the session now, with sync-back (sessions/close). */
  async close(): Promise<{ claims: SessionClaim[] }> {
    const reply = await this.client.post("/v1/sessions/close", this.body());
    this.renewed.clear();
    return reply.body as { claims: SessionClaim[] };
  }
}
