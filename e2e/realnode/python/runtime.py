#!/usr/bin/env python3
"""An agent runtime in Python, standard library only, that uses an airlock sandbox.

It is what a runtime written in another language than Go does (docs/sandbox-api.md): from a pod
that runs as the AgentRuntime's ServiceAccount, it

  1. acquires a sandbox through the Sandbox API (POST /v1/sandboxes/acquire, HTTPS verified with
     the CA bundle of the ConfigMap airlock-ca, a projected ServiceAccount token with audience
     airlock read from its file before each call), calling again while the answer is 202;
  2. opens an MCP session at the sandbox's address over streamable HTTP (POST /mcp) with the
     acquire answer's Authorization header, lists the tools and calls the ones it is asked to
     (its answers may come as JSON or as a server-sent event stream);
  3. renews the claim after the calls, ends the MCP session and closes the airlock session
     (POST /v1/sessions/close), which reaps the sandbox with its sync-back.

It prints one line "RESULT <JSON>" on stdout (what the real-node e2e reads,
e2e/realnode_python_test.go) and exits 0 when every step answered as the API describes; on the
first failure it says which step failed, prints the RESULT so far with "error" set, and exits 1.

    python3 runtime.py --namespace NS --runtime agent --session S --handle codegen/default \\
        --call '{"tool": "Write", "arguments": {"file_path": "a.txt", "content": "hi"}}'

Nothing here is airlock's API beyond pkg/client/openapi.json; it is a test helper and an
example, not a supported client.
"""

import argparse
import json
import ssl
import sys
import time
import urllib.error
import urllib.request

DEFAULT_API = "https://airlock-sandbox-api.airlock-system.svc:8443"
DEFAULT_TOKEN_FILE = "/var/run/secrets/airlock/token"  # a projected token, audience airlock
DEFAULT_CA_FILE = "/var/run/airlock/ca/ca.crt"  # the ConfigMap airlock-ca
MCP_PROTOCOL = "2025-06-18"


class Failure(Exception):
    """A step that did not answer as the API describes."""


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: urllib would follow one with the Authorization header to any host.
    The redirect comes back as the HTTP answer it is (http_call), for the caller to refuse."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def opener(context=None):
    """An opener without proxies from the environment and without redirects."""
    handlers = [urllib.request.ProxyHandler({}), NoRedirects()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def http_call(op, method, url, body=None, headers=None, timeout=60):
    """Sends a request; returns (status, headers, body bytes) for every HTTP answer, errors too."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with op.open(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read() if err.fp else b""


class SandboxAPI:
    """The four endpoints of pkg/client/openapi.json that a runtime calls."""

    def __init__(self, base, token_file, ca_file):
        if not base.startswith("https://"):
            raise Failure("the Sandbox API URL %r is not https://: the token would cross in clear" % base)
        self.base = base.rstrip("/")
        self.token_file = token_file
        # Verifies the server's certificate and its name with the CA bundle alone.
        self.op = opener(ssl.create_default_context(cafile=ca_file))

    def token(self):
        # The kubelet rotates the projected token: read it before each call.
        with open(self.token_file, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise Failure("the token file %s is empty" % self.token_file)
        return token

    def post(self, path, body, timeout=60):
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "Authorization": "Bearer " + self.token()}
        status, answer_headers, data = http_call(self.op, "POST", self.base + path, body, headers, timeout)
        if 300 <= status < 400:
            raise Failure("%s answered %d, a redirect to %s: not followed (the token is for the Sandbox API only)"
                          % (path, status, answer_headers.get("Location")))
        answer = None
        if data:
            try:
                answer = json.loads(data)
            except ValueError:
                raise Failure("%s answered %d with a body that is not JSON: %r" % (path, status, data[:200]))
        if status >= 400:
            err = answer if isinstance(answer, dict) else {}
            raise Failure("%s answered %d %s: %s" % (path, status, err.get("error"), err.get("message")))
        return status, answer

    def acquire(self, namespace, runtime, session, handle, wait_seconds, deadline):
        body = {"namespace": namespace, "runtime": runtime, "session": session, "handle": handle,
                "waitSeconds": wait_seconds}
        while True:
            status, answer = self.post("/v1/sandboxes/acquire", body, timeout=wait_seconds + 30)
            if status == 200:
                if answer.get("phase") != "Bound" or not answer.get("addresses"):
                    raise Failure("acquire answered 200 without a Bound address: %r" % answer)
                return answer
            if status != 202:
                raise Failure("acquire answered %d" % status)
            # Still Queued or Binding: acquire is idempotent, call again.
            if time.monotonic() > deadline:
                raise Failure("acquire still %s at the deadline" % answer.get("phase"))

    def renew(self, namespace, runtime, session, handle):
        status, _ = self.post("/v1/sandboxes/renew", {"namespace": namespace, "runtime": runtime,
                                                      "session": session, "handle": handle})
        return status

    def close_session(self, namespace, runtime, session):
        status, _ = self.post("/v1/sessions/close", {"namespace": namespace, "runtime": runtime,
                                                     "session": session})
        return status


def sse_messages(data):
    """The JSON messages of a text/event-stream body (event "message" or unnamed)."""
    out, event, lines = [], "message", []
    for raw in data.decode("utf-8").splitlines() + [""]:
        if raw == "":
            if lines and event == "message":
                out.append(json.loads("\n".join(lines)))
            event, lines = "message", []
        elif raw.startswith(":"):
            continue  # a comment (keepalive)
        elif raw.startswith("event:"):
            event = raw[len("event:"):].strip()
        elif raw.startswith("data:"):
            lines.append(raw[len("data:"):].lstrip(" "))
    return out


class MCPSession:
    """A client session of MCP's streamable HTTP transport (POST /mcp), one request at a time."""

    def __init__(self, url, headers, timeout=120):
        self.endpoint = url.rstrip("/") + "/mcp"
        self.headers = dict(headers)
        self.timeout = timeout
        self.session_id = None
        self.protocol = None
        self.next_id = 1
        self.op = opener()

    def _headers(self):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        h.update(self.headers)
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        if self.protocol:
            h["MCP-Protocol-Version"] = self.protocol
        return h

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        status, _, _ = http_call(self.op, "POST", self.endpoint, msg, self._headers(), self.timeout)
        if status != 202:
            raise Failure("MCP notification %s answered %d, want 202" % (method, status))

    def request(self, method, params):
        msg_id = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        status, headers, data = http_call(self.op, "POST", self.endpoint, msg, self._headers(), self.timeout)
        if status != 200:
            raise Failure("MCP %s answered HTTP %d: %r" % (method, status, data[:200]))
        if headers.get("Mcp-Session-Id"):
            self.session_id = headers["Mcp-Session-Id"]
        ctype = headers.get("Content-Type", "")
        messages = sse_messages(data) if ctype.startswith("text/event-stream") else [json.loads(data)]
        for m in messages:
            if m.get("id") == msg_id and ("result" in m or "error" in m):
                if "error" in m:
                    raise Failure("MCP %s: error %s" % (method, m["error"]))
                return m["result"]
        raise Failure("MCP %s: no answer to request %d in %d messages" % (method, msg_id, len(messages)))

    def initialize(self):
        result = self.request("initialize", {
            "protocolVersion": MCP_PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "airlock-python-runtime", "version": "0.1.0"}})
        self.protocol = result.get("protocolVersion")
        self.notify("notifications/initialized")
        return result

    def close(self):
        """Ends the session (DELETE /mcp); returns the HTTP status."""
        status, _, _ = http_call(self.op, "DELETE", self.endpoint, None, self._headers(), self.timeout)
        return status


def tool_text(result):
    return "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def run(args, out):
    deadline = time.monotonic() + args.timeout
    step = "the Sandbox API's client"
    try:
        api = SandboxAPI(args.api, args.token_file, args.ca_file)
        step = "acquire"
        got = api.acquire(args.namespace, args.runtime, args.session, args.handle, args.wait_seconds, deadline)
        url = got["addresses"][0]["url"]
        out.update(claim=got.get("claim"), phase=got.get("phase"), url=url)

        step = "MCP without the Authorization header"
        status, _, _ = http_call(opener(), "POST", url.rstrip("/") + "/mcp", {
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": MCP_PROTOCOL, "capabilities": {},
                "clientInfo": {"name": "no-header", "version": "0"}}},
            {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        out["noHeaderStatus"] = status

        step = "MCP initialize"
        mcp = MCPSession(url, got.get("headers") or {})
        info = mcp.initialize()
        out["protocol"] = mcp.protocol
        out["server"] = info.get("serverInfo", {}).get("name")
        step = "MCP tools/list"
        out["tools"] = sorted(t["name"] for t in mcp.request("tools/list", {}).get("tools", []))
        out["calls"] = []
        for call in args.call:
            step = "MCP tools/call " + call["tool"]
            result = mcp.request("tools/call", {"name": call["tool"], "arguments": call.get("arguments", {})})
            out["calls"].append({"tool": call["tool"], "isError": bool(result.get("isError")), "text": tool_text(result)})
        step = "MCP session end"
        out["mcpCloseStatus"] = mcp.close()

        step = "renew"
        out["renewStatus"] = api.renew(args.namespace, args.runtime, args.session, args.handle)
        step = "sessions/close"
        out["closeStatus"] = api.close_session(args.namespace, args.runtime, args.session)
    except (Failure, OSError, ValueError, KeyError, ssl.SSLError) as err:
        out["error"] = "%s: %s" % (step, err)
        return 1
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--api", default=DEFAULT_API, help="the Sandbox API's base URL (https)")
    p.add_argument("--token-file", default=DEFAULT_TOKEN_FILE)
    p.add_argument("--ca-file", default=DEFAULT_CA_FILE)
    p.add_argument("--namespace", required=True)
    p.add_argument("--runtime", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--handle", default="codegen/default")
    p.add_argument("--wait-seconds", type=int, default=60, help="acquire's waitSeconds (1-300)")
    p.add_argument("--timeout", type=int, default=240, help="seconds for the whole run")
    p.add_argument("--call", type=json.loads, action="append", default=[],
                   help='a tool call, as JSON: {"tool": NAME, "arguments": {...}} (repeatable)')
    args = p.parse_args(argv)
    for call in args.call:
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
            p.error("--call %r: want {\"tool\": NAME, \"arguments\": {...}}" % (call,))
    out = {}
    code = run(args, out)
    if out.get("error"):
        print("runtime.py: " + out["error"], file=sys.stderr)
    print("RESULT " + json.dumps(out), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
