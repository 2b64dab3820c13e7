#!/usr/bin/env python3
"""An agent runtime in Python that uses an airlock sandbox through airlock_client (clients/python).

It is the real-node e2e's runtime in Python (e2e/realnode_python_test.go runs it in a pod as
the AgentRuntime's ServiceAccount; the image has this file at /runtime.py and the package beside
it, /airlock_client, as hack/imagebuild/build-images.sh lays them out). With the package, it

  1. acquires a sandbox through the Sandbox API (HTTPS verified with the CA bundle of the
     ConfigMap airlock-ca, a projected ServiceAccount token with audience airlock read from its
     file before each call), waiting through 202s;
  2. checks that the sandbox refuses an MCP request without the acquire answer's Authorization
     header, then, over MCP 2026-07-28 (one POST per request), discovers the server, lists the
     tools and calls the ones it is asked to;
  3. renews the claim after the calls and closes the airlock session (POST /v1/sessions/close),
     which reaps the sandbox with its sync-back.

It prints one line "RESULT <JSON>" on stdout (what the e2e reads) and exits 0 when every step
answered as the API describes; on the first failure it says which step failed, prints the RESULT
so far with "error" set, and exits 1.

    python3 runtime.py --namespace NS --runtime agent --session S --handle codegen/default \\
        --call '{"tool": "Write", "arguments": {"file_path": "a.txt", "content": "hi"}}'

clients/python/examples/agent_loop.py is the example to copy; this is the e2e's instrumented
version of it.
"""

import argparse
import json
import os
import ssl
import sys

# python3 -I (the image's entrypoint) leaves the script's directory off sys.path; the package
# airlock_client is beside this file there (or installed with pip from clients/python).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from airlock_client import AirlockError, Config, Session  # noqa: E402
from airlock_client._api import DEFAULT_API, DEFAULT_CA_FILE, DEFAULT_TOKEN_FILE, http_call, opener  # noqa: E402
from airlock_client.mcp import PROTOCOL_VERSION, MCPClient  # noqa: E402


def run(args, out):
    step = "the Sandbox API's client"
    try:
        session = Session(args.session, Config(
            runtime=args.runtime, namespace=args.namespace, api=args.api, token_file=args.token_file,
            ca_file=args.ca_file, wait_seconds=args.wait_seconds, acquire_timeout=args.timeout))
        step = "acquire"
        sandbox = session.acquire(args.handle)
        url = sandbox.mcp_url[:-len("/mcp")]
        out.update(claim=sandbox.claim, phase=sandbox.answer.get("phase"), url=url)

        step = "MCP without the Authorization header"
        status, _, _ = http_call(opener(), "POST", sandbox.mcp_url, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "no-header", "version": "0"}}},
            {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        out["noHeaderStatus"] = status

        step = "MCP server/discover"
        mcp = MCPClient(sandbox, client_name="airlock-python-runtime")
        discovered = mcp.discover()
        if PROTOCOL_VERSION not in (discovered.get("supportedVersions") or []):
            raise AirlockError("the sandbox does not support %s: %r" % (PROTOCOL_VERSION, discovered.get("supportedVersions")))
        out["protocol"] = PROTOCOL_VERSION
        out["server"] = mcp.server_info(discovered).get("name")
        step = "MCP tools/list"
        out["tools"] = sorted(t["name"] for t in mcp.list_tools())
        out["calls"] = []
        for call in args.call:
            step = "MCP tools/call " + call["tool"]
            result = mcp.call_tool(call["tool"], call.get("arguments", {}))
            out["calls"].append({"tool": call["tool"], "isError": result.is_error, "text": result.text})

        step = "renew"
        session.renew(args.handle)
        out["renewStatus"] = session.client.last_status
        step = "sessions/close"
        session.close()
        out["closeStatus"] = session.client.last_status
    except (AirlockError, OSError, ValueError, KeyError, ssl.SSLError) as err:
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
