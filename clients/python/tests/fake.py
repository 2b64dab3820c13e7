"""A stand-in of the Sandbox API and of a sandbox's MCP endpoint (http.server in a thread)."""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
# The package from this checkout, unless it is installed.
sys.path.insert(0, os.path.join(HERE, "..", "src"))

TESTDATA = os.path.join(HERE, "testdata")
CA_FILE = os.path.join(TESTDATA, "ca.crt")  # signed server.crt (127.0.0.1, localhost)

# An answer: (status, headers, body); body None for none, bytes as they are, else JSON.
Answer = Tuple[int, Dict[str, str], Any]


class Request:
    def __init__(self, path: str, headers: Any, body: Any) -> None:
        self.path, self.headers, self.body = path, headers, body


class FakeServer:
    """Records every request and answers with respond(n, request), n counting from 0."""

    def __init__(self, respond: Callable[[int, Request], Answer], tls: bool = False) -> None:
        self.requests: List[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                req = Request(self.path, self.headers, body)  # case-insensitive, as HTTP
                with server._lock:
                    n = len(server.requests)
                    server.requests.append(req)
                status, headers, out = respond(n, req)
                data = b"" if out is None else out if isinstance(out, bytes) else json.dumps(out).encode()
                self.send_response(status)
                headers = dict(headers)
                headers.setdefault("Content-Type", "application/json")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(os.path.join(TESTDATA, "server.crt"), os.path.join(TESTDATA, "server.key"))
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = "%s://127.0.0.1:%d" % (scheme, self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def paths(self) -> List[str]:
        with self._lock:
            return [r.path for r in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()


class FakeClock:
    """The session's clock and sleep: sleeping moves the clock, nothing waits."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.slept: List[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, d: float) -> None:
        self.slept.append(d)
        self.t += d

    def step(self, d: float) -> None:
        self.t += d


def error(status: int, code: str, message: str, reason: str = "", headers: Optional[Dict[str, str]] = None) -> Answer:
    body = {"error": code, "message": message}
    if reason:
        body["reason"] = reason
    return status, headers or {}, body
