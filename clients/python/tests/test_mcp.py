"""MCPClient against a stand-in of sandboxd's /mcp (the 2026-07-28 stateless revision)."""

from __future__ import annotations

import json
import unittest
from typing import Any, Dict

from fake import Answer, FakeServer, Request

import airlock_client as ac
from airlock_client.mcp import PROTOCOL_VERSION, sse_messages

TOKEN = "Bearer claim-token"


def respond(n: int, req: Request) -> Answer:
    """What sandboxd checks of a stateless request, and a few answers."""
    h, body = req.headers, req.body
    if h.get("Authorization") != TOKEN:
        return 401, {}, b"unauthorized"
    meta = (body.get("params") or {}).get("_meta") or {}
    if (h.get("MCP-Protocol-Version") != PROTOCOL_VERSION or meta.get("io.modelcontextprotocol/protocolVersion") != PROTOCOL_VERSION
            or "io.modelcontextprotocol/clientCapabilities" not in meta or h.get("Mcp-Method") != body["method"]
            or "Mcp-Session-Id" in h):
        return 400, {}, {"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": -32020, "message": "header mismatch"}}
    method, params, msg_id = body["method"], body["params"], body["id"]

    def result(r: Dict[str, Any]) -> Answer:
        return 200, {}, {"jsonrpc": "2.0", "id": msg_id, "result": r}
    if method == "server/discover":
        return result({"supportedVersions": [PROTOCOL_VERSION], "capabilities": {"tools": {}},
                       "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "airlock-sandboxd", "version": "v0"}}})
    if method == "tools/list" and not params.get("cursor"):
        return result({"tools": [{"name": "Read"}, {"name": "Write"}], "nextCursor": "2"})
    if method == "tools/list":
        return result({"tools": [{"name": "Bash"}]})
    if method == "tools/call":
        if h.get("Mcp-Name") != params["name"]:
            return 400, {}, {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32020, "message": "Mcp-Name"}}
        if params["name"] == "Bash":
            # As an event stream, with a keepalive comment and a notification first.
            events = (": keepalive\n\n"
                      "event: message\ndata: " + json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}) + "\n\n"
                      "data: " + json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": {
                          "content": [{"type": "text", "text": "hi\n"}], "isError": False}}) + "\n\n")
            return 200, {"Content-Type": "text/event-stream"}, events.encode()
        if params["name"] == "Write":
            return result({"content": [{"type": "text", "text": "Wrote " + params["arguments"]["file_path"]}]})
        if params["name"] == "Read":
            return result({"content": [{"type": "text", "text": "File does not exist."}], "isError": True})
        return 200, {}, {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32602, "message": "unknown tool " + params["name"]}}
    return 200, {}, {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "method not found"}}


class MCPClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.srv = FakeServer(respond)
        self.addCleanup(self.srv.close)
        self.sandbox = ac.Sandbox.from_answer("codegen/default", {
            "claim": "c", "phase": "Bound", "addresses": [{"name": "mcp", "url": self.srv.url}],
            "headers": {"Authorization": TOKEN}})
        self.mcp = ac.MCPClient(self.sandbox)

    def test_stateless_requests(self) -> None:
        """Each request is one POST to /mcp with the revision's headers and _meta, the sandbox's
        Authorization, and no session."""
        self.assertEqual(self.mcp.server_info()["name"], "airlock-sandboxd")
        self.assertEqual([t["name"] for t in self.mcp.list_tools()], ["Read", "Write", "Bash"])
        bash = self.mcp.call_tool("Bash", {"command": "echo hi"})
        self.assertEqual((bash.text, bash.is_error), ("hi\n", False))
        read = self.mcp.call_tool("Read", {"file_path": "nope"})
        self.assertTrue(read.is_error)
        self.assertEqual(self.srv.paths(), ["/mcp"] * 5)
        ids = [r.body["id"] for r in self.srv.requests]
        self.assertEqual(len(set(ids)), 5)
        call = self.srv.requests[3].body
        self.assertEqual(call["params"]["name"], "Bash")
        self.assertEqual(call["params"]["arguments"], {"command": "echo hi"})
        self.assertEqual(call["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["name"], "airlock-client-python")

    def test_errors(self) -> None:
        with self.assertRaises(ac.MCPError) as cm:
            self.mcp.call_tool("Nope")
        self.assertEqual(cm.exception.code, -32602)
        unauthorized = ac.MCPClient(url=self.sandbox.mcp_url, headers={"Authorization": "Bearer wrong"})
        with self.assertRaises(ac.MCPError) as cm:
            unauthorized.list_tools()
        self.assertEqual(cm.exception.status, 401)

    def test_sse_messages(self) -> None:
        self.assertEqual(sse_messages(b'event: other\ndata: {"a": 1}\n\ndata: {"b":\ndata: 2}\n\n'), [{"b": 2}])


if __name__ == "__main__":
    unittest.main()
