"""examples/agent_loop.py against stand-ins of the Sandbox API (TLS, verified with a CA bundle
named by $AIRLOCK_CA_FILE) and of the sandbox's MCP endpoint."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
import unittest
from unittest import mock

from fake import CA_FILE, Answer, FakeServer, Request
from test_mcp import TOKEN, respond as mcp_respond

HERE = os.path.dirname(os.path.abspath(__file__))


class ExampleTest(unittest.TestCase):
    def test_agent_loop(self) -> None:
        mcp = FakeServer(mcp_respond)
        self.addCleanup(mcp.close)

        def api_respond(n: int, req: Request) -> Answer:
            if req.path == "/v1/sandboxes/acquire":
                return 200, {}, {"claim": "c", "phase": "Bound", "addresses": [{"name": "mcp", "url": mcp.url}],
                                 "headers": {"Authorization": TOKEN}}
            if req.path == "/v1/sandboxes/renew":
                return 204, {}, None
            return 202, {}, {"claims": []}
        api = FakeServer(api_respond, tls=True)
        self.addCleanup(api.close)
        with tempfile.TemporaryDirectory() as d:
            token = os.path.join(d, "token")
            with open(token, "w", encoding="utf-8") as f:
                f.write("sa-token")
            env = {"AIRLOCK_SANDBOX_API": api.url, "AIRLOCK_TOKEN_FILE": token, "AIRLOCK_CA_FILE": CA_FILE,
                   "AIRLOCK_NAMESPACE": "team-a", "AIRLOCK_RUNTIME": "agent"}
            spec = importlib.util.spec_from_file_location("agent_loop", os.path.join(HERE, "..", "examples", "agent_loop.py"))
            assert spec and spec.loader
            example = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(example)
            out = io.StringIO()
            with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out):
                self.assertEqual(example.main("s1"), 0)
        self.assertIn("Write -> Wrote hello.py", out.getvalue())
        self.assertTrue(out.getvalue().endswith("\nclosed session s1 (0 sandbox(es))\n"), out.getvalue())
        self.assertEqual([r.body["params"]["name"] for r in mcp.requests], ["Write", "Bash", "Read"])
        # One renewal (the throttle), then the close.
        self.assertEqual(api.paths(), ["/v1/sandboxes/acquire", "/v1/sandboxes/renew", "/v1/sessions/close"])


if __name__ == "__main__":
    unittest.main()
