#!/usr/bin/env python3
"""A runtime's agent loop with an airlock sandbox, to copy: acquire, Write, Bash and Read through
MCP (renewing after each call), close. In a pod that runs as the AgentRuntime's ServiceAccount,
with the projected token and airlock-ca mounted (docs/clients.md):

    AIRLOCK_RUNTIME=agent python3 agent_loop.py session-1

A real agent asks its model which tool to call next; here the "model" is a fixed plan.
"""

import sys

from airlock_client import AcquireTimeout, APIError, Config, Refused, Session
from airlock_client.mcp import MCPClient

HANDLE = "codegen/default"

PLAN = [  # what the model would ask for, one tool call at a time
    ("Write", {"file_path": "hello.py", "content": "print('hello from the sandbox')\n"}),
    ("Bash", {"command": "python3 hello.py || echo 'no python3 in this sandbox'"}),
    ("Read", {"file_path": "hello.py"}),
]


def main(session_id: str) -> int:
    session = Session(session_id, Config())  # runtime from $AIRLOCK_RUNTIME, the rest from the pod
    try:
        sandbox = session.acquire(HANDLE)
    except Refused as err:  # a limit of the runtime: not queued, try later
        print("refused (%s): %s" % (err.reason, err.message), file=sys.stderr)
        return 1
    except (APIError, AcquireTimeout) as err:
        print("no sandbox: %s" % err, file=sys.stderr)
        return 1
    print("sandbox %s at %s (warm %s, resumed %s)" % (sandbox.claim, sandbox.mcp_url, sandbox.warm,
                                                      sandbox.resumed_workspace is not None))
    try:
        mcp = MCPClient(sandbox)
        for tool, arguments in PLAN:
            result = mcp.call_tool(tool, arguments)
            print("%s -> %s%s" % (tool, "ERROR " if result.is_error else "", result.text.strip()))
            session.renew(HANDLE)  # after each tool call: at most one API write per idle/2
    finally:
        closed = session.close()  # reaps the sandbox now, with its sync-back
        print("closed session %s (%d sandbox(es))" % (session_id, len(closed.get("claims") or [])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "example-session"))
