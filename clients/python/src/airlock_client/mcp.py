"""A minimal MCP client for a sandbox: the 2026-07-28 revision's stateless streamable HTTP, where
each request is one POST to the MCP endpoint (no initialize, no session), carrying the protocol
version in its MCP-Protocol-Version header and in params._meta, its method in Mcp-Method and,
for tools/call, the tool in Mcp-Name. Answers come as JSON or as a text/event-stream.

For anything beyond calling tools, hand Sandbox.mcp_url and Sandbox.headers to a full MCP client
(docs/clients.md)."""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, List, Mapping, Optional

from ._api import AirlockError, http_call, opener

PROTOCOL_VERSION = "2026-07-28"
_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
_META_CLIENT = "io.modelcontextprotocol/clientInfo"
_META_SERVER = "io.modelcontextprotocol/serverInfo"


class MCPError(AirlockError):
    """An MCP request that failed: an HTTP status other than 200, or a JSON-RPC error."""

    def __init__(self, method: str, text: str, status: int = 0, code: Optional[int] = None) -> None:
        self.method, self.status, self.code = method, status, code
        super().__init__("MCP %s: %s" % (method, text))


def sse_messages(data: bytes) -> List[Dict[str, Any]]:
    """The JSON messages of a text/event-stream body (event "message" or unnamed)."""
    out: List[Dict[str, Any]] = []
    event, lines = "message", []  # type: str, List[str]
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


class ToolResult:
    """A tools/call result: its content, isError, and its text joined."""

    def __init__(self, result: Dict[str, Any]) -> None:
        self.raw = result
        self.content: List[Dict[str, Any]] = list(result.get("content") or [])
        self.is_error = bool(result.get("isError"))
        self.structured = result.get("structuredContent")

    @property
    def text(self) -> str:
        return "".join(str(c.get("text", "")) for c in self.content if c.get("type") == "text")

    def __repr__(self) -> str:
        return "ToolResult(is_error=%r, text=%r)" % (self.is_error, self.text[:80])


class MCPClient:
    """Calls a sandbox's MCP server, one POST per request. Give it a Sandbox (acquire's answer)
    or its URL and headers. Safe for use from several threads."""

    def __init__(self, sandbox: Any = None, *, url: str = "", headers: Optional[Mapping[str, str]] = None,
                 timeout: float = 300, client_name: str = "airlock-client-python", client_version: str = "0.1.0") -> None:
        if sandbox is not None:
            url, headers = sandbox.mcp_url, sandbox.headers
        if not url:
            raise ValueError("MCPClient needs a sandbox or a url")
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.client_info = {"name": client_name, "version": client_version}
        self._op = opener()
        self._lock = threading.Lock()
        self._next_id = 0

    def request(self, method: str, params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Sends one JSON-RPC request and returns its result; raises MCPError."""
        with self._lock:
            self._next_id += 1
            msg_id = self._next_id
        params = dict(params or {})
        meta = dict(params.get("_meta") or {})
        meta.update({_META_VERSION: PROTOCOL_VERSION, _META_CAPABILITIES: {}, _META_CLIENT: self.client_info})
        params["_meta"] = meta
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": PROTOCOL_VERSION, "Mcp-Method": method}
        if method == "tools/call":
            headers["Mcp-Name"] = str(params.get("name", ""))
        headers.update(self.headers)
        body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        status, answer_headers, data = http_call(self._op, "POST", self.url, body, headers, self.timeout)
        if status != 200:
            code = None
            try:
                e = json.loads(data).get("error") or {}
                code = e.get("code")
            except (ValueError, AttributeError):
                pass
            raise MCPError(method, "HTTP %d: %r" % (status, data[:200]), status=status, code=code)
        ctype = answer_headers.get("Content-Type", "") or ""
        messages = sse_messages(data) if ctype.startswith("text/event-stream") else [json.loads(data)]
        for m in messages:
            if m.get("id") == msg_id and ("result" in m or "error" in m):
                if "error" in m:
                    e = m["error"] or {}
                    raise MCPError(method, "error %s: %s" % (e.get("code"), e.get("message")), status, e.get("code"))
                return dict(m["result"] or {})
        raise MCPError(method, "no answer to request %d in %d messages" % (msg_id, len(messages)), status)

    def discover(self) -> Dict[str, Any]:
        """server/discover: the server's supported versions, capabilities and (in _meta) info."""
        return self.request("server/discover")

    def server_info(self, discovered: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The serverInfo of a discover result (name, version)."""
        d = discovered if discovered is not None else self.discover()
        return dict((d.get("_meta") or {}).get(_META_SERVER) or d.get("serverInfo") or {})

    def list_tools(self) -> List[Dict[str, Any]]:
        """Every tool the sandbox offers (following pagination)."""
        tools: List[Dict[str, Any]] = []
        cursor: Optional[str] = None
        while True:
            result = self.request("tools/list", {"cursor": cursor} if cursor else {})
            tools.extend(result.get("tools") or [])
            cursor = result.get("nextCursor")
            if not cursor:
                return tools

    def call_tool(self, name: str, arguments: Optional[Mapping[str, Any]] = None) -> ToolResult:
        """Calls a tool; a tool that fails answers is_error (the model may recover), a protocol
        failure raises MCPError."""
        return ToolResult(self.request("tools/call", {"name": name, "arguments": dict(arguments or {})}))
