"""airlock's client for agent runtimes in Python: acquire a sandbox through the Sandbox API,
call its tools over MCP, renew it, close the session. Standard library only.

    from airlock_client import Config, Session
    from airlock_client.mcp import MCPClient

    session = Session("session-1", Config(runtime="agent"))
    sandbox = session.acquire("codegen/default")
    mcp = MCPClient(sandbox)
    print(mcp.call_tool("Bash", {"command": "echo hi"}).text)
    session.renew("codegen/default")
    session.close()

The acquire answer's attestation (the isolation evidence) is passed through as JSON and NOT
verified by this version. docs/clients.md in the airlock repository compares the Go, Python and
TypeScript clients.
"""

from ._api import (DEFAULT_API, DEFAULT_CA_FILE, DEFAULT_IDLE_TIMEOUT, DEFAULT_TOKEN_FILE, ENV_API,
                   ENV_CA_FILE, ENV_NAMESPACE, ENV_RUNTIME, ENV_TOKEN_FILE, AcquireTimeout, AirlockError,
                   APIError, Client, Config, ConfigError, Conflict, Failed, Forbidden, NotFound, Refused,
                   Sandbox, Session, Unauthorized, Unavailable)
from .mcp import MCPClient, MCPError, ToolResult

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_API", "DEFAULT_CA_FILE", "DEFAULT_IDLE_TIMEOUT", "DEFAULT_TOKEN_FILE", "ENV_API", "ENV_CA_FILE",
    "ENV_NAMESPACE", "ENV_RUNTIME", "ENV_TOKEN_FILE", "AcquireTimeout", "AirlockError", "APIError", "Client",
    "Config", "ConfigError", "Conflict", "Failed", "Forbidden", "MCPClient", "MCPError", "NotFound", "Refused",
    "Sandbox", "Session", "ToolResult", "Unauthorized", "Unavailable",
]
