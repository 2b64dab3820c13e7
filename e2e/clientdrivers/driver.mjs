// The TypeScript client (clients/typescript) driven by the e2e suite (e2e/clients_scripts_test.go):
// one JSON command a line on stdin, one JSON answer a line on stdout with the command's id.
// Commands run concurrently (an acquire may wait on another session's close). The identity comes
// from the environment (AIRLOCK_*); argv[2] is the compiled package's index.js as a file:// URL.
// The sessions' clock is Date.now moved forward by the command "step".
import readline from "node:readline";

const ac = await import(process.argv[2]);
let offset = 0;
const sessions = new Map();

function session(c) {
  const key = `${c.session}/${c.runtime ?? ""}`;
  if (!sessions.has(key)) {
    sessions.set(key, new ac.Session(c.session, { runtime: c.runtime, allowPlainHttp: true, waitSeconds: c.waitSeconds || 1,
      idleTimeoutSeconds: c.idleTimeout, acquireTimeoutSeconds: c.acquireTimeout, now: () => Date.now() + offset }));
  }
  return sessions.get(key);
}

async function run(c) {
  try {
    if (c.op === "step") {
      offset += c.seconds * 1000;
      return {};
    }
    const s = session(c);
    switch (c.op) {
      case "acquire": {
        const sb = await s.acquire(c.handle);
        return { claim: sb.claim, phase: sb.answer.phase, mcpUrl: sb.mcpUrl, authorization: sb.authorization };
      }
      case "renew":
        return { sent: await s.renew(c.handle) };
      case "close":
        return { closed: (await s.close()).claims.length };
    }
    return { error: { class: `unknown op ${c.op}` } };
  } catch (err) {
    if (err instanceof ac.AcquireTimeout) return { error: { class: err.name, phase: err.phase, reason: err.reason, message: err.message } };
    if (err instanceof ac.APIError) {
      return { error: { class: err.name, status: err.status, code: err.code, reason: err.reason, message: err.message } };
    }
    return { error: { class: err.name, message: err.message } };
  }
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  const c = JSON.parse(line);
  run(c).then((got) => process.stdout.write(JSON.stringify({ ...got, id: c.id }) + "\n"));
});
