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

The acquire answer's attestation is the operator's signed isolation statement about the sandbox
(what sandboxd showed of its boundary before any tool ran, bound to the claim and its token).
Config(verify_isolation=True) makes acquire verify it with the operator's published keys
(isolation-keys.pem of the ConfigMap airlock-ca) and raise IsolationError when it is missing or
does not verify, and require_dedicated_kernel=True also refuses a sandbox on the node's kernel;
the verified statement is sandbox.isolation. verify_isolation(sandbox, keys_pem, namespace)
verifies one answer's. The Ed25519 check is this package's own (_ed25519.py, RFC 8032).
docs/clients.md in the airlock repository compares the Go, Python and TypeScript clients.
"""

from ._api import (DEFAULT_API, DEFAULT_CA_FILE, DEFAULT_IDLE_TIMEOUT, DEFAULT_ISOLATION_KEYS_FILE,
                   DEFAULT_TOKEN_FILE, ENV_API, ENV_CA_FILE, ENV_ISOLATION_KEYS_FILE, ENV_NAMESPACE, ENV_RUNTIME,
                   ENV_TOKEN_FILE, AcquireTimeout, AirlockError, APIError, Client, Config, ConfigError, Conflict,
                   Failed, Forbidden, IsolationError, NotFound, Refused, Sandbox, Session, Unauthorized,
                   Unavailable, verify_isolation)
from .mcp import MCPClient, MCPError, ToolResult

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_API", "DEFAULT_CA_FILE", "DEFAULT_IDLE_TIMEOUT", "DEFAULT_ISOLATION_KEYS_FILE", "DEFAULT_TOKEN_FILE",
    "ENV_API", "ENV_CA_FILE", "ENV_ISOLATION_KEYS_FILE", "ENV_NAMESPACE", "ENV_RUNTIME", "ENV_TOKEN_FILE",
    "AcquireTimeout", "AirlockError", "APIError", "Client", "Config", "ConfigError", "Conflict", "Failed",
    "Forbidden", "IsolationError", "MCPClient", "MCPError", "NotFound", "Refused", "Sandbox", "Session",
    "ToolResult", "Unauthorized", "Unavailable", "verify_isolation",
]
