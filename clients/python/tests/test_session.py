"""Session against a stand-in of the Sandbox API."""

from __future__ import annotations

import os
import ssl
import tempfile
import unittest
from typing import Any, Callable, Dict
from unittest import mock

from fake import CA_FILE, Answer, FakeClock, FakeServer, Request, error

import airlock_client as ac

BOUND: Dict[str, Any] = {
    "claim": "agent-0123456789", "phase": "Bound",
    "addresses": [{"name": "metrics", "url": "http://10.0.0.1:9090"}, {"name": "mcp", "url": "http://10.0.0.1:8080/"}],
    "headers": {"Authorization": "Bearer claim-token"},
}


class SessionTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.token_file = os.path.join(self.dir.name, "token")
        self.write_token("sa-token-1")
        self.clock = FakeClock()

    def write_token(self, token: str) -> None:
        with open(self.token_file, "w", encoding="utf-8") as f:
            f.write(token + "\n")

    def serve(self, respond: Callable[[int, Request], Answer], tls: bool = False) -> FakeServer:
        srv = FakeServer(respond, tls=tls)
        self.addCleanup(srv.close)
        return srv

    def session(self, srv: FakeServer, **kw: Any) -> ac.Session:
        cfg = ac.Config(runtime="agent", namespace="team-a", api=srv.url, token_file=self.token_file,
                        allow_plain_http=srv.url.startswith("http://"), now=self.clock.now, sleep=self.clock.sleep, **kw)
        if srv.url.startswith("https://"):
            cfg.ca_file = CA_FILE
        return ac.Session("s1", cfg)

    def test_acquire_waits_through_202s(self) -> None:
        """202s are called again (after a Retry-After when there is one), a 503 after its
        Retry-After; the token file is read before each call; the answer's fields are read."""
        def respond(n: int, req: Request) -> Answer:
            if n == 0:
                self.write_token("sa-token-2")  # the kubelet rotated it
                return 202, {}, {"claim": "c", "phase": "Queued"}
            if n == 1:
                return 202, {"Retry-After": "2"}, {"claim": "c", "phase": "Binding"}
            if n == 2:
                return error(503, "unavailable", "caches", headers={"Retry-After": "3"})
            return 200, {}, dict(BOUND, warm=True, resumedWorkspace={"keptAt": "2026-12-01T08:00:00Z", "keptBy": "old"},
                                 attestation={"kernel": "6.1", "signature": "abc"})
        srv = self.serve(respond)
        sb = self.session(srv, wait_seconds=45).acquire("codegen/default")
        self.assertEqual(sb.mcp_url, "http://10.0.0.1:8080/mcp")
        self.assertEqual(sb.headers, {"Authorization": "Bearer claim-token"})
        self.assertEqual((sb.claim, sb.handle, sb.warm), ("agent-0123456789", "codegen/default", True))
        self.assertEqual(sb.resumed_workspace, {"keptAt": "2026-12-01T08:00:00Z", "keptBy": "old"})
        self.assertEqual(sb.attestation, {"kernel": "6.1", "signature": "abc"})
        self.assertEqual(self.clock.slept, [2, 3])
        self.assertEqual(srv.paths(), ["/v1/sandboxes/acquire"] * 4)
        for i, r in enumerate(srv.requests):
            self.assertEqual(r.headers["Authorization"], "Bearer sa-token-1" if i == 0 else "Bearer sa-token-2")
            self.assertEqual(r.body, {"namespace": "team-a", "runtime": "agent", "session": "s1",
                                      "handle": "codegen/default", "waitSeconds": 45})

    def test_acquire_deadline(self) -> None:
        """The wait ends at acquire_timeout with the last 202's phase and reason; no call asks to
        wait longer than the time left."""
        srv = self.serve(lambda n, r: (202, {"Retry-After": "10"}, {"claim": "c", "phase": "Queued", "reason": "MaxConcurrent"}))
        with self.assertRaises(ac.AcquireTimeout) as cm:
            self.session(srv, wait_seconds=300, acquire_timeout=25).acquire("codegen/default")
        self.assertEqual((cm.exception.phase, cm.exception.reason), ("Queued", "MaxConcurrent"))
        self.assertIn("still Queued (MaxConcurrent)", str(cm.exception))
        waits = [r.body["waitSeconds"] for r in srv.requests]
        self.assertEqual(waits, [25, 15, 5])

    def test_errors(self) -> None:
        """Each error status is its class, with the operator's code, reason and message; acquire
        does not call again."""
        cases = [
            (401, "unauthorized", "", ac.Unauthorized), (403, "forbidden", "", ac.Forbidden),
            (404, "not_found", "", ac.NotFound), (409, "disabled", "", ac.Conflict),
            (429, "refused", "MaxPerSession", ac.Refused), (502, "failed", "ImagePullBackOff", ac.Failed),
        ]
        for status, code, reason, cls in cases:
            with self.subTest(status=status):
                srv = self.serve(lambda n, r, s=status, c=code, rs=reason: error(s, c, "the operator says", rs))
                s = self.session(srv)
                with self.assertRaises(cls) as cm:
                    s.acquire("codegen/default")
                e = cm.exception
                self.assertIsInstance(e, ac.APIError)
                self.assertEqual((e.status, e.code, e.reason, e.message), (status, code, reason, "the operator says"))
                if reason:
                    self.assertIn(reason, str(e))
                self.assertEqual(len(srv.requests), 1)
                with self.assertRaises(cls):
                    s.renew("codegen/default")

    def test_renew_follows_the_runtimes_idle_timeout(self) -> None:
        """The acquire answer's idleTimeoutSeconds sets the handle's renewal interval (half of
        it), so a runtime with a short idle timeout is renewed in time without configuring it; a
        shorter configured idle_timeout still wins."""
        def respond(n: int, req: Request) -> Answer:
            if req.path == "/v1/sandboxes/acquire":
                return 200, {}, dict(BOUND, idleTimeoutSeconds=60)
            return 204, {}, None
        srv = self.serve(respond)
        for configured, every in ((0, 30), (3600, 30), (20, 10)):
            with self.subTest(configured=configured):
                s = self.session(srv, idle_timeout=configured)
                self.assertTrue(s.renew("codegen/default"))
                s.acquire("codegen/default")
                self.clock.step(every - 1)
                self.assertFalse(s.renew("codegen/default"))
                self.clock.step(1)
                self.assertTrue(s.renew("codegen/default"))

    def test_renew_throttle(self) -> None:
        """At most one renewal per half idle timeout per handle, on the session's clock; a failed
        one is not counted; close forgets them."""
        fail = [False]

        def respond(n: int, req: Request) -> Answer:
            if req.path == "/v1/sandboxes/renew":
                return error(409, "not_bound", "Reaping") if fail[0] else (204, {}, None)
            if req.path == "/v1/sessions/close":
                return 202, {}, {"claims": [{"claim": "c", "handle": "codegen/default", "phase": "Bound"}]}
            return error(404, "not_found", req.path)
        srv = self.serve(respond)
        s = self.session(srv, idle_timeout=600)

        def renewals() -> int:
            return srv.paths().count("/v1/sandboxes/renew")
        self.assertTrue(s.renew("codegen/default"))
        for _ in range(10):
            self.clock.step(29)
            self.assertFalse(s.renew("codegen/default"))
        self.assertTrue(s.renew("lint/default"))
        self.clock.step(10)  # 300 s after the first
        self.assertTrue(s.renew("codegen/default"))
        self.assertEqual(renewals(), 3)
        fail[0] = True
        self.clock.step(300)
        with self.assertRaises(ac.Conflict):
            s.renew("codegen/default")
        fail[0] = False
        self.assertTrue(s.renew("codegen/default"))
        self.assertEqual(s.close()["claims"][0]["claim"], "c")
        self.assertTrue(s.renew("codegen/default"))
        self.assertEqual(renewals(), 6)

    def test_tls_with_the_ca_bundle(self) -> None:
        """The API is verified with the CA bundle; another bundle, plain HTTP and redirects are
        refused before the token goes anywhere else."""
        srv = self.serve(lambda n, r: (200, {}, BOUND), tls=True)
        self.assertEqual(self.session(srv).acquire("codegen/default").claim, "agent-0123456789")
        # The bundle file is read again when it changes (a rotation of the operator's CA).
        bundle = os.path.join(self.dir.name, "ca.crt")
        with open(bundle, "w", encoding="utf-8") as f:
            f.write("")
        s = ac.Session("s1", ac.Config(runtime="agent", namespace="team-a", api=srv.url, token_file=self.token_file, ca_file=CA_FILE))
        s.client._ca_file = bundle  # as if the mounted file were this one, now empty
        with self.assertRaises(ssl.SSLError):
            s.acquire("codegen/default")
        with open(CA_FILE, encoding="utf-8") as src, open(bundle, "w", encoding="utf-8") as f:
            f.write(src.read() + "\n")
        self.assertEqual(s.acquire("codegen/default").claim, "agent-0123456789")
        other = ac.Config(runtime="agent", namespace="team-a", api=srv.url, token_file=self.token_file,
                          ca_file=os.path.join(os.path.dirname(ac.__file__), "py.typed"))
        with self.assertRaises(Exception):
            ac.Session("s1", other).acquire("codegen/default")
        with self.assertRaisesRegex(ac.ConfigError, "is not https://"):
            ac.Session("s1", ac.Config(runtime="agent", namespace="team-a", api="http://127.0.0.1:1", token_file=self.token_file))
        redirect = self.serve(lambda n, r: (307, {"Location": "https://example.com/x"}, None))
        with self.assertRaisesRegex(ac.APIError, "answered 307, a redirect to https://example.com/x: not followed"):
            self.session(redirect).acquire("codegen/default")

    def test_config_from_the_environment(self) -> None:
        env = {ac.ENV_API: "https://api.example:8443", ac.ENV_TOKEN_FILE: "/env/token", ac.ENV_CA_FILE: "/env/ca.crt",
               ac.ENV_NAMESPACE: "env-ns", ac.ENV_RUNTIME: "env-rt"}
        with mock.patch.dict(os.environ, env):
            c = ac.Config().complete()
            self.assertEqual((c.api, c.token_file, c.ca_file, c.namespace, c.runtime),
                             ("https://api.example:8443", "/env/token", "/env/ca.crt", "env-ns", "env-rt"))
            c = ac.Config(runtime="rt", namespace="ns", api="https://other", wait_seconds=1000).complete()
            self.assertEqual((c.api, c.namespace, c.runtime, c.wait_seconds), ("https://other", "ns", "rt", 300))
        with mock.patch.dict(os.environ, {ac.ENV_RUNTIME: ""}):
            with self.assertRaisesRegex(ac.ConfigError, ac.ENV_RUNTIME):
                ac.Config(namespace="ns").complete()
        with mock.patch.dict(os.environ, {ac.ENV_API: "", ac.ENV_TOKEN_FILE: "", ac.ENV_CA_FILE: ""}):
            c = ac.Config(runtime="rt", namespace="ns").complete()
            self.assertEqual((c.api, c.token_file, c.ca_file), (ac.DEFAULT_API, ac.DEFAULT_TOKEN_FILE, ac.DEFAULT_CA_FILE))


if __name__ == "__main__":
    unittest.main()
