"""The Sandbox API (SPEC section 4, pkg/client/openapi.json): a session of an agent runtime."""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import _attestation

# Where a runtime's pod finds its identity, and the environment variables that override each
# (the same as the Go and TypeScript clients).
DEFAULT_API = "https://airlock-sandbox-api.airlock-system.svc:8443"
DEFAULT_TOKEN_FILE = "/var/run/secrets/airlock/token"  # a projected token, audience airlock
DEFAULT_CA_FILE = "/var/run/airlock/ca/ca.crt"  # the ConfigMap airlock-ca
# The operator's isolation keys: the key isolation-keys.pem of the ConfigMap airlock-ca.
DEFAULT_ISOLATION_KEYS_FILE = "/var/run/airlock/ca/isolation-keys.pem"
DEFAULT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_IDLE_TIMEOUT = 30 * 60.0  # AgentRuntime spec.sandbox.idleTimeout's default, seconds
DEFAULT_ACQUIRE_TIMEOUT = 10 * 60.0
DEFAULT_WAIT_SECONDS = 30
MAX_WAIT_SECONDS = 300
DEFAULT_RETRY_AFTER = 1.0  # after a 503 without Retry-After
MAX_RETRY_AFTER = 30.0

ENV_API = "AIRLOCK_SANDBOX_API"
ENV_TOKEN_FILE = "AIRLOCK_TOKEN_FILE"
ENV_CA_FILE = "AIRLOCK_CA_FILE"
ENV_NAMESPACE = "AIRLOCK_NAMESPACE"
ENV_RUNTIME = "AIRLOCK_RUNTIME"
ENV_ISOLATION_KEYS_FILE = "AIRLOCK_ISOLATION_KEYS_FILE"


class AirlockError(Exception):
    """Every error of this package."""


class ConfigError(AirlockError):
    """The runtime's identity or the API's address is missing or unsafe."""


class APIError(AirlockError):
    """A non-success answer of the Sandbox API, with the operator's code, reason and message."""

    status: int = 0

    def __init__(self, path: str, status: int, code: str = "", message: str = "", reason: str = "",
                 retry_after: float = 0.0, text: str = "") -> None:
        self.path, self.status, self.code, self.message, self.reason = path, status, code, message, reason
        self.retry_after = retry_after
        if not text:
            text = "%s answered %d" % (path, status)
            if code:
                text += " " + code
            if reason and reason not in message:
                text += " (%s)" % reason
            if message:
                text += ": " + message
        super().__init__(text)


class Unauthorized(APIError):
    """401: no token, or one TokenReview does not accept (audience, expiry)."""


class Forbidden(APIError):
    """403: a valid token that is not the AgentRuntime's ServiceAccount."""


class NotFound(APIError):
    """404: the runtime, its registry entry or the class does not exist."""


class Conflict(APIError):
    """409: disabled (the runtime may hold no sandbox), conflict, or not_bound (renew)."""


class Refused(APIError):
    """429: a limit was reached (reason MaxPerSession, MaxInstances, ...): not queued."""


class Failed(APIError):
    """502: the claim and its one replacement failed; reason is the operator's."""


class Unavailable(APIError):
    """503: the operator cannot answer now; acquire calls again after retry_after."""


class AcquireTimeout(AirlockError):
    """The sandbox was not Bound within the deadline; phase is the last 202's."""

    def __init__(self, handle: str, phase: str, reason: str = "", message: str = "") -> None:
        self.handle, self.phase, self.reason, self.message = handle, phase, reason, message
        text = "sandbox %s is still %s" % (handle, phase or "unanswered")
        if reason:
            text += " (%s)" % reason
        text += " at the deadline"
        if message:
            text += ": " + message
        super().__init__(text)


class IsolationError(AirlockError):
    """The sandbox's isolation is not proven: the acquire answer's attestation is missing, does
    not verify with the operator's published keys, is about another sandbox, or (with
    require_dedicated_kernel) says the sandbox runs on the node's kernel."""


_ERRORS = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 429: Refused, 502: Failed,
           503: Unavailable}


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: urllib would follow one with the Authorization header to any host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


def opener(context: Optional[ssl.SSLContext] = None) -> urllib.request.OpenerDirector:
    """An opener without proxies from the environment and without redirects."""
    handlers: List[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({}), _NoRedirects()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def http_call(op: urllib.request.OpenerDirector, method: str, url: str, body: Any = None,
              headers: Optional[Mapping[str, str]] = None, timeout: float = 60) -> Tuple[int, Any, bytes]:
    """Sends a request; returns (status, headers, body) for every HTTP answer, errors too."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    try:
        with op.open(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read() if err.fp else b""


def _retry_after(headers: Any) -> float:
    try:
        secs = int(str(headers.get("Retry-After", "")).strip())
    except ValueError:
        return 0.0
    return min(float(max(secs, 0)), MAX_RETRY_AFTER)


class Client:
    """The Sandbox API's four calls, one request each. It reads the token file before every
    call (the kubelet rotates it), verifies the API with the CA bundle, refuses plain HTTP unless
    allowed, and never follows a redirect. last_status is the last answer's HTTP status."""

    def __init__(self, api: str, token_file: str, ca_file: Optional[str] = None, *,
                 allow_plain_http: bool = False, context: Optional[ssl.SSLContext] = None) -> None:
        if api.startswith("http://") and not allow_plain_http:
            raise ConfigError("the Sandbox API URL %r is not https://: the token would cross in clear "
                              "(allow_plain_http for an operator run with --tls-mode=none)" % api)
        if not api.startswith(("https://", "http://")):
            raise ConfigError("the Sandbox API URL %r is not https://" % api)
        self.base = api.rstrip("/")
        self.token_file = token_file
        self.last_status = 0
        # The server's certificate and name verified with the CA bundle alone; the bundle is
        # read again when its file changes (the kubelet updates the mounted ConfigMap when the
        # operator rotates its CA). A context given is used as it is.
        self._ca_file = (ca_file or DEFAULT_CA_FILE) if context is None and api.startswith("https://") else ""
        self._ca_stamp: Optional[Tuple[int, int, int]] = None
        self._op = opener(context)
        self._refresh_ca()

    def _refresh_ca(self) -> None:
        if not self._ca_file:
            return
        st = os.stat(self._ca_file)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp != self._ca_stamp:
            self._op = opener(ssl.create_default_context(cafile=self._ca_file))
            self._ca_stamp = stamp

    def token(self) -> str:
        with open(self.token_file, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ConfigError("the token file %s is empty" % self.token_file)
        return token

    def post(self, path: str, body: Mapping[str, Any], timeout: float = 60) -> Tuple[int, Any, Any]:
        """POSTs body to path; returns (status, headers, decoded answer) of a 2xx, raises
        APIError (the subclass of its status) for any other."""
        self._refresh_ca()
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "Authorization": "Bearer " + self.token()}
        status, answer_headers, data = http_call(self._op, "POST", self.base + path, body, headers, timeout)
        self.last_status = status
        if 300 <= status < 400:
            location = answer_headers.get("Location")
            raise APIError(path, status, message="a redirect to %s" % location,
                           text="%s answered %d, a redirect to %s: not followed (the token is for the Sandbox API only)"
                           % (path, status, location))
        answer: Any = None
        if data:
            try:
                answer = json.loads(data)
            except ValueError:
                if status < 400:
                    raise APIError(path, status, message="an answer that is not JSON: %r" % data[:200])
                answer = None
        if status >= 400 or status < 200:
            err = answer if isinstance(answer, dict) else {}
            cls = _ERRORS.get(status, APIError)
            retry = 0.0
            if status == 503:
                retry = _retry_after(answer_headers) if answer_headers.get("Retry-After") else DEFAULT_RETRY_AFTER
            message = str(err.get("message", "")) if err else data[:200].decode("utf-8", "replace").strip()
            raise cls(path, status, str(err.get("error", "")), message, str(err.get("reason", "")), retry)
        return status, answer_headers, answer

    def acquire_once(self, namespace: str, runtime: str, session: str, handle: str,
                     wait_seconds: int) -> Tuple[int, Dict[str, Any], float]:
        body = {"namespace": namespace, "runtime": runtime, "session": session, "handle": handle,
                "waitSeconds": wait_seconds}
        status, headers, answer = self.post("/v1/sandboxes/acquire", body, timeout=wait_seconds + 30)
        return status, answer or {}, _retry_after(headers)

    def renew(self, namespace: str, runtime: str, session: str, handle: str) -> None:
        self.post("/v1/sandboxes/renew", {"namespace": namespace, "runtime": runtime, "session": session, "handle": handle})

    def open_session(self, namespace: str, runtime: str, session: str) -> Dict[str, Any]:
        return self.post("/v1/sessions/open", {"namespace": namespace, "runtime": runtime, "session": session})[2] or {}

    def close_session(self, namespace: str, runtime: str, session: str) -> Dict[str, Any]:
        return self.post("/v1/sessions/close", {"namespace": namespace, "runtime": runtime, "session": session})[2] or {}


@dataclass
class Config:
    """Who the runtime is and where its Sandbox API is. Empty fields come from the environment
    (AIRLOCK_SANDBOX_API, AIRLOCK_TOKEN_FILE, AIRLOCK_CA_FILE, AIRLOCK_NAMESPACE, AIRLOCK_RUNTIME,
    AIRLOCK_ISOLATION_KEYS_FILE), else from the pod (the defaults above; the namespace from the
    ServiceAccount's mount)."""

    runtime: str = ""
    namespace: str = ""
    api: str = ""
    token_file: str = ""
    ca_file: str = ""
    allow_plain_http: bool = False
    # The runtime's spec.sandbox.idleTimeout in seconds: renew sends at most once per half of
    # the shorter of it and the acquire answer's idleTimeoutSeconds; with neither (0 here, and an
    # operator that does not say it), DEFAULT_IDLE_TIMEOUT.
    idle_timeout: float = 0
    acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT
    wait_seconds: int = DEFAULT_WAIT_SECONDS
    # verify_isolation makes acquire verify each sandbox's isolation attestation with the keys
    # in isolation_keys_file (read for every sandbox: the mounted ConfigMap follows a rotation)
    # and raise IsolationError for a sandbox whose statement is missing or does not verify; the
    # verified statement is Sandbox.isolation. require_dedicated_kernel, with it, also refuses a
    # sandbox on the node's kernel.
    verify_isolation: bool = False
    require_dedicated_kernel: bool = False
    isolation_keys_file: str = ""
    # Clocks (seams for tests): the renewal throttle's and the acquire deadline's, and its sleep.
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def complete(self) -> "Config":
        c = Config(**self.__dict__)
        c.api = c.api or os.environ.get(ENV_API, "") or DEFAULT_API
        c.token_file = c.token_file or os.environ.get(ENV_TOKEN_FILE, "") or DEFAULT_TOKEN_FILE
        c.ca_file = c.ca_file or os.environ.get(ENV_CA_FILE, "") or DEFAULT_CA_FILE
        c.isolation_keys_file = (c.isolation_keys_file or os.environ.get(ENV_ISOLATION_KEYS_FILE, "")
                                 or DEFAULT_ISOLATION_KEYS_FILE)
        c.runtime = c.runtime or os.environ.get(ENV_RUNTIME, "")
        c.namespace = c.namespace or os.environ.get(ENV_NAMESPACE, "")
        if not c.namespace:
            try:
                with open(DEFAULT_NAMESPACE_FILE, encoding="utf-8") as f:
                    c.namespace = f.read().strip()
            except OSError as err:
                raise ConfigError("no namespace: set Config.namespace or $%s (%s)" % (ENV_NAMESPACE, err)) from err
        if not c.runtime:
            raise ConfigError("no runtime: set Config.runtime or $%s to the AgentRuntime's name" % ENV_RUNTIME)
        c.wait_seconds = max(1, min(c.wait_seconds, MAX_WAIT_SECONDS))
        return c


@dataclass
class Sandbox:
    """An acquired sandbox: its MCP endpoint and the header every MCP request must carry, and
    what the acquire answer says about it. attestation is the operator's signed isolation
    statement as the answer carries it ({statement, signature, keyID}), unverified; isolation
    is the verified statement when Config.verify_isolation asked for it (else None:
    verify_isolation(sandbox, keys_pem, namespace) verifies attestation)."""

    handle: str
    claim: str
    mcp_url: str
    authorization: str
    warm: bool = False
    resumed_workspace: Optional[Dict[str, Any]] = None
    attestation: Optional[Dict[str, Any]] = None
    answer: Dict[str, Any] = field(default_factory=dict)
    isolation: Optional[Dict[str, Any]] = None

    @property
    def headers(self) -> Dict[str, str]:
        """The HTTP headers for the sandbox's MCP server (Authorization)."""
        return dict(self.answer.get("headers") or {"Authorization": self.authorization})

    @classmethod
    def from_answer(cls, handle: str, answer: Dict[str, Any]) -> "Sandbox":
        addresses = answer.get("addresses") or []
        if answer.get("phase") != "Bound" or not addresses:
            raise AirlockError("sandbox %s: the acquire answer has no Bound address: %r" % (handle, answer))
        addr = next((a for a in addresses if a.get("name") == "mcp"), addresses[0])
        return cls(handle=handle, claim=str(answer.get("claim", "")), mcp_url=str(addr["url"]).rstrip("/") + "/mcp",
                   authorization=str((answer.get("headers") or {}).get("Authorization", "")),
                   warm=bool(answer.get("warm")), resumed_workspace=answer.get("resumedWorkspace"),
                   attestation=answer.get("attestation"), answer=answer)


def verify_isolation(sandbox: Sandbox, keys_pem: bytes, namespace: str) -> Dict[str, Any]:
    """Verifies the acquire answer's attestation with the operator's published keys (keys_pem,
    the PEM of isolation-keys.pem): signed by one of them, about this sandbox's claim of
    namespace and the bearer token its answer carries, its evidence what its digest says.
    Returns the statement as its JSON decodes: its "kernel" says whether the sandbox runs on a
    kernel of its own ("Dedicated") or the node's ("Shared"). Raises IsolationError."""
    if not sandbox.attestation:
        raise IsolationError("the acquire answer of claim %s carries no attestation" % sandbox.claim)
    try:
        keys = _attestation.parse_public_keys(keys_pem)
    except ValueError as err:
        raise IsolationError("the operator's keys: %s" % err) from None
    token = sandbox.authorization[len("Bearer "):] if sandbox.authorization.startswith("Bearer ") else ""
    if not token:
        raise IsolationError("the acquire answer of claim %s has no bearer token" % sandbox.claim)
    try:
        return _attestation.verify(sandbox.attestation, keys, token, namespace, sandbox.claim)
    except ValueError as err:
        raise IsolationError("claim %s: %s" % (sandbox.claim, err)) from None


class Session:
    """One session of an agent runtime: acquire its sandboxes by handle, renew them after each
    tool call (at most one renewal per half idle timeout per handle, SPEC section 3), close it.

        s = Session("session-1", Config(runtime="agent"))
        sb = s.acquire("codegen/default")      # waits through 202s
        # MCP at sb.mcp_url with sb.headers (airlock_client.mcp.MCPClient(sb))
        s.renew("codegen/default")             # after each tool call: cheap
        s.close()                              # reaps the session's sandboxes, with sync-back
    """

    def __init__(self, session_id: str, config: Optional[Config] = None, client: Optional[Client] = None) -> None:
        self.id = session_id
        self.config = (config or Config()).complete()
        c = self.config
        self.client = client or Client(c.api, c.token_file, c.ca_file, allow_plain_http=c.allow_plain_http)
        self._lock = threading.Lock()
        self._renewed: Dict[str, float] = {}
        self._idle: Dict[str, float] = {}  # handle -> the idle timeout its acquire answer said

    def acquire(self, handle: str) -> Sandbox:
        """The session's sandbox of handle, once Bound. Calls again on 202 (after its Retry-After
        when it has one) and on 503 (after its Retry-After, else 1 s) until acquire_timeout;
        raises the APIError subclass of any other error answer, AcquireTimeout at the deadline,
        and with Config.verify_isolation IsolationError for a sandbox whose isolation is not
        proven (the claim stays the session's: close reaps it)."""
        c = self.config
        deadline = c.now() + c.acquire_timeout
        last: Dict[str, Any] = {}
        while True:
            left = deadline - c.now()
            if left <= 0:
                raise AcquireTimeout(handle, str(last.get("phase", "")), str(last.get("reason", "")), str(last.get("message", "")))
            wait = max(0, min(c.wait_seconds, int(left)))
            try:
                status, answer, retry = self.client.acquire_once(c.namespace, c.runtime, self.id, handle, wait)
            except Unavailable as err:
                retry = err.retry_after
            else:
                if status == 200:
                    sandbox = Sandbox.from_answer(handle, answer)
                    idle = answer.get("idleTimeoutSeconds")
                    if isinstance(idle, (int, float)) and idle > 0:
                        with self._lock:
                            self._idle[handle] = float(idle)
                    self._verify_isolation(sandbox)
                    return sandbox
                last = answer
            if wait == 0 and retry == 0:
                retry = DEFAULT_RETRY_AFTER  # an answer at once: do not spin
            if retry > 0:
                c.sleep(min(retry, max(deadline - c.now(), 0)))

    def _verify_isolation(self, sandbox: Sandbox) -> None:
        """acquire's check when Config.verify_isolation is set."""
        c = self.config
        if not c.verify_isolation:
            return
        try:
            with open(c.isolation_keys_file, "rb") as f:
                keys_pem = f.read()
        except OSError as err:
            raise IsolationError("reading the operator's keys: %s" % err) from None
        statement = verify_isolation(sandbox, keys_pem, c.namespace)
        if c.require_dedicated_kernel and statement.get("kernel") != "Dedicated":
            raise IsolationError("claim %s runs on the node's kernel (%s), and a kernel of its own is required"
                                 % (sandbox.claim, statement.get("nodeKernel")))
        sandbox.isolation = statement

    def _renew_every(self, handle: str) -> float:
        """Half the shorter of the handle's acquire answer's idle timeout and the configured one
        (DEFAULT_IDLE_TIMEOUT's half with neither). self._lock held."""
        known = [t for t in (self._idle.get(handle, 0.0), self.config.idle_timeout) if t > 0]
        return (min(known) if known else DEFAULT_IDLE_TIMEOUT) / 2

    def renew(self, handle: str) -> bool:
        """Tells the operator the sandbox was used; call it after each tool call. Sends at most
        one renewal per half idle timeout for each handle; returns whether it sent one. A
        renewal that fails raises and is not counted."""
        now = self.config.now()
        with self._lock:
            last = self._renewed.get(handle)
            if last is not None and now - last < self._renew_every(handle):
                return False
            self._renewed[handle] = now  # taken before the call: a concurrent renew does not send too
        try:
            self.client.renew(self.config.namespace, self.config.runtime, self.id, handle)
        except BaseException:
            with self._lock:
                if self._renewed.get(handle) == now:  # not counted: the next call sends again
                    if last is None:
                        del self._renewed[handle]
                    else:
                        self._renewed[handle] = last
            raise
        return True

    def open(self) -> Dict[str, Any]:
        """Creates the claims of the runtime's eager sandboxes for this session (sessions/open)."""
        return self.client.open_session(self.config.namespace, self.config.runtime, self.id)

    def close(self) -> Dict[str, Any]:
        """Reaps every sandbox of the session now, with sync-back (sessions/close)."""
        answer = self.client.close_session(self.config.namespace, self.config.runtime, self.id)
        with self._lock:
            self._renewed.clear()
        return answer
