package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// Where a runtime's pod finds its identity, and the environment variables that override each.
// The three clients (Go, clients/python, clients/typescript) read the same ones.
const (
	// DefaultAPI is the Sandbox API Service the manifests install ($AIRLOCK_SANDBOX_API).
	DefaultAPI = "https://airlock-sandbox-api.airlock-system.svc:8443"
	// DefaultTokenFile is where the runtime's pod mounts a projected ServiceAccount token with
	// audience airlock ($AIRLOCK_TOKEN_FILE). The kubelet rotates it; it is read for every call.
	DefaultTokenFile = "/var/run/secrets/airlock/token"
	// DefaultNamespaceFile is the pod's own namespace, when the ServiceAccount's default token
	// is mounted ($AIRLOCK_NAMESPACE wins).
	DefaultNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	// DefaultIdleTimeout is AgentRuntime spec.sandbox.idleTimeout's default: a Session renews at
	// most once per half of it unless told the runtime's own.
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultAcquireTimeout bounds Session.Acquire's wait through 202s.
	DefaultAcquireTimeout = 10 * time.Minute
)

// Environment variables that override the defaults above (Config's fields win over both).
const (
	EnvAPI       = "AIRLOCK_SANDBOX_API"
	EnvTokenFile = "AIRLOCK_TOKEN_FILE"
	EnvCAFile    = "AIRLOCK_CA_FILE"
	EnvNamespace = "AIRLOCK_NAMESPACE"
	EnvRuntime   = "AIRLOCK_RUNTIME"
)

// Config says who a runtime is and where its Sandbox API is. Every field has a default taken
// from where the runtime runs (its pod), which the environment variables above override.
type Config struct {
	// API is the Sandbox API's base URL: $AIRLOCK_SANDBOX_API, else DefaultAPI.
	API string
	// TokenFile is the projected ServiceAccount token (audience airlock), read for every call so
	// that the kubelet's rotation is followed: $AIRLOCK_TOKEN_FILE, else DefaultTokenFile.
	// Ignored when TokenSource is set.
	TokenFile string
	// TokenSource returns the token for each call, instead of TokenFile.
	TokenSource func() (string, error)
	// CAFile is the CA bundle of the ConfigMap airlock-ca, re-read when it changes:
	// $AIRLOCK_CA_FILE, else DefaultCAFile. Ignored when HTTPClient is set.
	CAFile string
	// ServerName is the name the API's certificate is verified for, when not the URL's host.
	ServerName string
	// HTTPClient calls the API instead of one that verifies with CAFile.
	HTTPClient *http.Client
	// PlainHTTP allows an "http://" API (an operator run with --tls-mode=none).
	PlainHTTP bool
	// Namespace is the AgentRuntime's namespace: $AIRLOCK_NAMESPACE, else the pod's own
	// (DefaultNamespaceFile).
	Namespace string
	// Runtime is the AgentRuntime's name: $AIRLOCK_RUNTIME. Required.
	Runtime string
	// IdleTimeout is the runtime's spec.sandbox.idleTimeout: Renew sends at most one renewal per
	// half of it for each handle (SPEC section 3: the operator writes no more). The acquire
	// answer says the runtime's own (idleTimeoutSeconds), and the shorter of the two is used;
	// with neither (an operator that does not say it, and zero here), DefaultIdleTimeout.
	IdleTimeout time.Duration
	// AcquireTimeout bounds each Acquire's wait through 202s (the context may bound it sooner).
	// Zero: DefaultAcquireTimeout.
	AcquireTimeout time.Duration
	// WaitSeconds is each acquire call's waitSeconds (at most MaxWaitSeconds). Zero:
	// DefaultWaitSeconds.
	WaitSeconds int
	// Now is the clock of the renewal throttle; nil: time.Now.
	Now func() time.Time
	// VerifyIsolation makes Acquire verify each sandbox's isolation attestation with the keys
	// in IsolationKeysFile and refuse (ErrIsolation) a sandbox whose statement is missing or
	// does not verify; the verified statement is Sandbox.Isolation.
	VerifyIsolation bool
	// RequireDedicatedKernel, with VerifyIsolation, also refuses a sandbox on the node's kernel.
	RequireDedicatedKernel bool
	// IsolationKeysFile is the operator's published keys: $AIRLOCK_ISOLATION_KEYS_FILE, else
	// DefaultIsolationKeysFile.
	IsolationKeysFile string
}

// complete fills the defaults in.
func (c Config) complete() (Config, error) {
	pick := func(v, env, def string) string {
		if v != "" {
			return v
		}
		if e := os.Getenv(env); e != "" {
			return e
		}
		return def
	}
	c.API = pick(c.API, EnvAPI, DefaultAPI)
	c.TokenFile = pick(c.TokenFile, EnvTokenFile, DefaultTokenFile)
	c.CAFile = pick(c.CAFile, EnvCAFile, DefaultCAFile)
	c.IsolationKeysFile = pick(c.IsolationKeysFile, EnvIsolationKeysFile, DefaultIsolationKeysFile)
	c.Runtime = pick(c.Runtime, EnvRuntime, "")
	if c.Namespace = pick(c.Namespace, EnvNamespace, ""); c.Namespace == "" {
		b, err := os.ReadFile(DefaultNamespaceFile)
		if err != nil {
			return c, fmt.Errorf("no namespace: set Config.Namespace or $%s (%w)", EnvNamespace, err)
		}
		c.Namespace = strings.TrimSpace(string(b))
	}
	if c.Runtime == "" {
		return c, fmt.Errorf("no runtime: set Config.Runtime or $%s to the AgentRuntime's name", EnvRuntime)
	}
	if c.AcquireTimeout <= 0 {
		c.AcquireTimeout = DefaultAcquireTimeout
	}
	if c.WaitSeconds <= 0 {
		c.WaitSeconds = DefaultWaitSeconds
	}
	c.WaitSeconds = min(c.WaitSeconds, MaxWaitSeconds)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.TokenSource == nil {
		c.TokenSource = TokenFile(c.TokenFile)
	}
	return c, nil
}

// Session is one session of an agent runtime (SPEC section 4): it acquires the session's
// sandboxes by handle, renews them after tool calls, and closes the session. It is safe for
// concurrent use.
//
//	s, err := client.NewSession(client.Config{Runtime: "agent"}, "session-1")
//	sb, err := s.Acquire(ctx, "codegen/default") // waits through 202s
//	// MCP over streamable HTTP at sb.MCPURL with sb.Header() (or sb.HTTPClient(nil))
//	_ = s.Renew(ctx, "codegen/default")          // after each tool call: cheap
//	_ = s.Close(ctx)                             // reaps the session's sandboxes, with sync-back
type Session struct {
	client *Client
	cfg    Config
	id     string
	// wait sleeps d or until ctx is done (a seam for tests).
	wait func(ctx context.Context, d time.Duration) error

	mu      sync.Mutex
	renewed map[string]time.Time     // handle -> when its last renewal was answered
	idle    map[string]time.Duration // handle -> the idle timeout its acquire answer said
}

// NewSession returns the session id of the runtime cfg describes. Nothing is sent yet.
func NewSession(cfg Config, id string) (*Session, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		if hc, err = NewHTTPClient(TLSOptions{CAFile: cfg.CAFile, ServerName: cfg.ServerName}); err != nil && !cfg.PlainHTTP {
			return nil, err
		}
		if hc == nil {
			hc = http.DefaultClient // plain HTTP without a CA bundle
		}
	}
	var opts []Option
	if cfg.PlainHTTP {
		opts = append(opts, PlainHTTP())
	}
	return &Session{
		client:  New(cfg.API, cfg.TokenSource, hc, opts...),
		cfg:     cfg,
		id:      id,
		wait:    waitToRetry,
		renewed: map[string]time.Time{},
		idle:    map[string]time.Duration{},
	}, nil
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Client is the Sandbox API client the session calls (for OpenSession and the like).
func (s *Session) Client() *Client { return s.client }

// Sandbox is an acquired sandbox: what a framework needs to reach its MCP server, and what the
// acquire answer says about it.
type Sandbox struct {
	// Handle is the handle it was acquired by.
	Handle string
	// Claim is its SandboxClaim's name.
	Claim string
	// MCPURL is its MCP endpoint (streamable HTTP): the address named "mcp" (else the first)
	// followed by /mcp.
	MCPURL string
	// Authorization is the value of the Authorization header every MCP request must carry: the
	// claim's bearer token (sandboxd refuses requests without it).
	Authorization string
	// Warm says the claim adopted a member of the class's warm pool.
	Warm bool
	// ResumedWorkspace is set when the sandbox resumed a kept workspace.
	ResumedWorkspace *ResumedWorkspace
	// Isolation is the verified isolation statement, when Config.VerifyIsolation asked for it
	// (else nil: Response.Attestation is the unverified one, for VerifyIsolation).
	Isolation *attestation.Statement
	// Response is the whole acquire answer.
	Response *AcquireResponse
}

// Header is the HTTP header to send with every MCP request: Authorization (and any other the
// acquire answer named).
func (sb *Sandbox) Header() http.Header {
	h := http.Header{}
	for k, v := range sb.Response.Headers {
		h.Set(k, v)
	}
	return h
}

// HTTPClient returns an http.Client that adds Header to every request, through base (nil:
// http.DefaultTransport): hand it to an MCP client, e.g. the Go SDK's
// &mcp.StreamableClientTransport{Endpoint: sb.MCPURL, HTTPClient: sb.HTTPClient(nil)}.
func (sb *Sandbox) HTTPClient(base http.RoundTripper) *http.Client {
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{Transport: &headerTransport{header: sb.Header(), base: base}}
}

type headerTransport struct {
	header http.Header
	base   http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.header {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// newSandbox reads a 200 answer.
func newSandbox(handle string, resp *AcquireResponse) (*Sandbox, error) {
	if len(resp.Addresses) == 0 {
		return nil, fmt.Errorf("sandbox %s: the acquire answer (claim %s, %s) has no address", handle, resp.Claim, resp.Phase)
	}
	addr := resp.Addresses[0]
	for _, a := range resp.Addresses {
		if a.Name == "mcp" {
			addr = a
			break
		}
	}
	return &Sandbox{
		Handle:           handle,
		Claim:            resp.Claim,
		MCPURL:           strings.TrimRight(addr.URL, "/") + "/mcp",
		Authorization:    resp.Headers["Authorization"],
		Warm:             resp.Warm,
		ResumedWorkspace: resp.ResumedWorkspace,
		Response:         resp,
	}, nil
}

// Acquire returns the session's sandbox of handle ("<sandbox>/<instance>"), creating its claim
// when there is none. It calls again while the answer is 202 (acquire is idempotent), and after a
// 503, each after the answer's Retry-After when it has one, until the sandbox is Bound, the API
// answers an error (an *APIError: errors.Is it ErrRefused, ErrFailed, ...), or AcquireTimeout
// (or ctx) runs out, which returns an error that wraps context.DeadlineExceeded and names the
// claim's phase.
func (s *Session) Acquire(ctx context.Context, handle string) (*Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AcquireTimeout)
	defer cancel()
	var last *AcquireResponse // the last 202
	var lastErr error         // the last 503
	for {
		wait := s.cfg.WaitSeconds
		if deadline, ok := ctx.Deadline(); ok {
			wait = min(wait, max(0, int(time.Until(deadline)/time.Second)))
		}
		req := AcquireRequest{Namespace: s.cfg.Namespace, Runtime: s.cfg.Runtime, Session: s.id, Handle: handle, WaitSeconds: &wait}
		resp, status, retry, err := s.client.acquireOnce(ctx, req)
		var apiErr *APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable:
			retry, lastErr = apiErr.RetryAfter, apiErr
		case err != nil && ctx.Err() != nil:
			return nil, s.stillWaiting(handle, last, lastErr, ctx.Err())
		case err != nil:
			return nil, err
		case status == http.StatusOK:
			if resp.IdleTimeoutSeconds > 0 {
				s.mu.Lock()
				s.idle[handle] = time.Duration(resp.IdleTimeoutSeconds) * time.Second
				s.mu.Unlock()
			}
			sb, err := newSandbox(handle, resp)
			if err != nil {
				return nil, err
			}
			if err := s.verifyIsolation(sb); err != nil {
				return nil, err
			}
			return sb, nil
		default:
			last = resp
		}
		if wait == 0 && retry == 0 {
			retry = defaultRetryAfter // a 202 at once: do not spin
		}
		waitErr := ctx.Err()
		if retry > 0 && waitErr == nil {
			waitErr = s.wait(ctx, retry)
		}
		if waitErr != nil {
			return nil, s.stillWaiting(handle, last, lastErr, waitErr)
		}
	}
}

// stillWaiting is Acquire's error when its wait ends before the sandbox is Bound.
func (s *Session) stillWaiting(handle string, last *AcquireResponse, lastErr, err error) error {
	if last != nil {
		return fmt.Errorf("sandbox %s of session %s is still %s%s: %w", handle, s.id, last.Phase, because(last), err)
	}
	if lastErr != nil {
		return fmt.Errorf("sandbox %s of session %s: %w (the last answer: %w)", handle, s.id, err, lastErr)
	}
	return fmt.Errorf("sandbox %s of session %s: %w", handle, s.id, err)
}

// because is the reason and message of a 202, for an error.
func because(r *AcquireResponse) string {
	var out string
	if r.Reason != "" {
		out += " (" + r.Reason + ")"
	}
	if r.Message != "" {
		out += ": " + r.Message
	}
	return out
}

// renewEvery is how often Renew sends for handle: half the shorter of the idle timeout its
// acquire answer said and Config.IdleTimeout, DefaultIdleTimeout's half with neither. s.mu held.
func (s *Session) renewEvery(handle string) time.Duration {
	idle := s.idle[handle]
	if c := s.cfg.IdleTimeout; c > 0 && (idle == 0 || c < idle) {
		idle = c
	}
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	return idle / 2
}

// Renew tells the operator that the sandbox of handle was used: call it after each tool call.
// It sends at most one renewal per half the runtime's idle timeout for each handle (SPEC section 3: the
// operator writes status.lastUsedAt no more often), so calling it after every call costs
// nothing in between. It reports whether it sent one. A renewal that fails is not counted:
// the next call sends again.
func (s *Session) Renew(ctx context.Context, handle string) (sent bool, err error) {
	now := s.cfg.Now()
	s.mu.Lock()
	last, ok := s.renewed[handle]
	if ok && now.Sub(last) < s.renewEvery(handle) {
		s.mu.Unlock()
		return false, nil
	}
	s.renewed[handle] = now // taken before the call: a concurrent Renew does not send too
	s.mu.Unlock()
	if err := s.client.Renew(ctx, RenewRequest{Namespace: s.cfg.Namespace, Runtime: s.cfg.Runtime, Session: s.id, Handle: handle}); err != nil {
		s.mu.Lock()
		if s.renewed[handle].Equal(now) { // not counted: the next call sends again
			if ok {
				s.renewed[handle] = last
			} else {
				delete(s.renewed, handle)
			}
		}
		s.mu.Unlock()
		return true, err
	}
	return true, nil
}

// Close asks the operator to reap every sandbox of the session now, with sync-back (it returns
// once the request is recorded). A later Acquire of the same session id acquires afresh.
func (s *Session) Close(ctx context.Context) (*SessionResponse, error) {
	resp, err := s.client.CloseSession(ctx, SessionRequest{Namespace: s.cfg.Namespace, Runtime: s.cfg.Runtime, Session: s.id})
	if err == nil {
		s.mu.Lock()
		clear(s.renewed)
		s.mu.Unlock()
	}
	return resp, err
}
