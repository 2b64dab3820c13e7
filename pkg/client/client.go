// Package client calls the airlock Sandbox API (SPEC section 4) for an agent runtime: acquire a
// sandbox by handle, renew it after each tool call, open and close sessions. It authenticates
// with the runtime's ServiceAccount token, which a tokenSource returns for every request (read a
// projected token file on each call, so that kubelet's rotation is followed). It verifies the
// API's certificate with the CA bundle the operator publishes in the runtime's namespace (the
// ConfigMap airlock-ca, mounted at DefaultCAFile), and refuses plain HTTP unless asked.
//
// Session (session.go) is what a runtime uses: its identity from where it runs (Config, the
// environment), Acquire that waits through 202s within a deadline, Renew throttled to SPEC
// section 3's one write per half idle timeout, Close, and a Sandbox with the MCP endpoint and
// the header a framework needs. Client is the API's four calls, one request each. The same
// shape exists in Python (clients/python) and TypeScript (clients/typescript); docs/clients.md
// compares them. The acquire answer's attestation is verified when asked (isolation.go,
// Config.VerifyIsolation), else passed through.
//
// It depends on nothing but the standard library.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// defaultRetryAfter is how long Acquire waits before calling again after a 503 without a
// Retry-After; maxRetryAfter caps a Retry-After it is told.
const (
	defaultRetryAfter = time.Second
	maxRetryAfter     = 30 * time.Second
)

// APIError is a non-success answer of the Sandbox API.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the body's "error": one of the Code constants.
	Code string
	// Reason is the body's "reason" (429 refused: MaxPerSession or MaxInstances; 502 failed: the
	// operator's reason, e.g. ImagePullBackOff).
	Reason string
	// Message is the body's human-readable "message".
	Message string
	// RetryAfter is, for a 503, when to call again: the answer's Retry-After (at most 30 s), else
	// 1 s. It is zero for other answers.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("sandbox API: %d %s", e.Status, e.Code)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// The errors an *APIError is (errors.Is), by its status: test for a kind of failure with
// errors.Is(err, client.ErrRefused), and read the operator's code, reason and message with
// errors.As(err, &apiErr).
var (
	// ErrUnauthorized (401): no token, or one TokenReview does not accept (wrong audience,
	// expired): check the projected token's audience and file.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden (403): a valid token that is not the AgentRuntime's ServiceAccount.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound (404): the runtime, its registry entry or the class does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict (409): the runtime may hold no sandbox (disabled), the claim's name is taken by
	// another session or handle (conflict), or a renew found the claim not Bound (not_bound).
	ErrConflict = errors.New("conflict")
	// ErrRefused (429): a limit was reached (Reason: MaxPerSession, MaxInstances,
	// WorkspaceInUse); the claim is not queued, do not call again at once.
	ErrRefused = errors.New("refused")
	// ErrFailed (502): the claim and its one replacement failed; Reason is the operator's
	// (ImagePullBackOff, StartupTimeout, ...).
	ErrFailed = errors.New("failed")
	// ErrUnavailable (503): the operator cannot answer now (caches, TokenReview); Acquire calls
	// again by itself after the answer's Retry-After.
	ErrUnavailable = errors.New("unavailable")
)

// Is makes errors.Is(err, ErrRefused) and the like true for an APIError of that status.
func (e *APIError) Is(target error) bool {
	switch e.Status {
	case http.StatusUnauthorized:
		return target == ErrUnauthorized
	case http.StatusForbidden:
		return target == ErrForbidden
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusConflict:
		return target == ErrConflict
	case http.StatusTooManyRequests:
		return target == ErrRefused
	case http.StatusBadGateway:
		return target == ErrFailed
	case http.StatusServiceUnavailable:
		return target == ErrUnavailable
	}
	return false
}

// IsRefused says whether err is a 429 refusal (a limit was reached; the runtime should not
// retry at once).
func IsRefused(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusTooManyRequests
}

// Client calls one Sandbox API endpoint. It is safe for concurrent use.
type Client struct {
	baseURL     string
	tokenSource func() (string, error)
	httpClient  *http.Client
	// plainHTTP allows an "http://" baseURL (PlainHTTP).
	plainHTTP bool
}

// Option changes a Client.
type Option func(*Client)

// PlainHTTP lets a Client call an "http://" base URL, for an operator run with --tls-mode=none on
// a network you trust: the runtime's ServiceAccount token and the sandboxes' bearer tokens then
// cross it in clear. Without it a Client refuses such a URL before it sends anything.
func PlainHTTP() Option { return func(c *Client) { c.plainHTTP = true } }

// New returns a client of the Sandbox API at baseURL (e.g.
// "https://airlock-sandbox-api.airlock-system.svc:8443"). tokenSource returns the runtime's
// ServiceAccount token for each request. httpClient may be nil for one that verifies the API's
// certificate with the CA bundle at DefaultCAFile (the ConfigMap airlock-ca mounted there); use
// NewHTTPClient for another bundle, a server name, or (for debugging) no verification. It should
// have no overall Timeout shorter than the acquires' waitSeconds. An "http://" baseURL is refused
// unless the PlainHTTP option is given.
func New(baseURL string, tokenSource func() (string, error), httpClient *http.Client, opts ...Option) *Client {
	if httpClient == nil {
		httpClient = defaultHTTPClient()
	}
	c := &Client{baseURL: strings.TrimRight(baseURL, "/"), tokenSource: tokenSource, httpClient: httpClient}
	for _, o := range opts {
		o(c)
	}
	return c
}

// TokenFile is a tokenSource that reads a token file on each call, such as a projected
// ServiceAccount token at /var/run/secrets/kubernetes.io/serviceaccount/token.
func TokenFile(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// AcquireOnce asks for the sandbox of req's session and handle, once. It returns the answer and
// its HTTP status: 200 when the sandbox is Bound (the answer carries its addresses and the
// Authorization header to use), 202 when waitSeconds ran out first. Any other status is an
// *APIError.
func (c *Client) AcquireOnce(ctx context.Context, req AcquireRequest) (*AcquireResponse, int, error) {
	resp, status, _, err := c.acquireOnce(ctx, req)
	return resp, status, err
}

// acquireOnce is AcquireOnce, also returning the answer's Retry-After (zero without one).
func (c *Client) acquireOnce(ctx context.Context, req AcquireRequest) (*AcquireResponse, int, time.Duration, error) {
	var out AcquireResponse
	status, header, err := c.do(ctx, "/v1/sandboxes/acquire", req, &out)
	if err != nil {
		return nil, status, 0, err
	}
	return &out, status, retryAfter(header), nil
}

// Acquire asks for the sandbox of req's session and handle and calls again on each 202 (acquire
// is idempotent) until the sandbox is Bound, the API answers an error, or ctx is done; ctx bounds
// the whole wait, req.WaitSeconds each call. A 503 (the operator cannot reach the Kubernetes API
// server now, or its caches are not synced yet) is called again too, after the answer's
// Retry-After (1 s without one, at most 30 s).
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) (*AcquireResponse, error) {
	for {
		resp, status, err := c.AcquireOnce(ctx, req)
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable {
			if err := waitToRetry(ctx, apiErr.RetryAfter); err != nil {
				return nil, fmt.Errorf("%w (the last answer: %w)", err, apiErr)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if status == http.StatusOK {
			return resp, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sandbox %s of session %s is still %s: %w", req.Handle, req.Session, resp.Phase, err)
		}
		if req.WaitSeconds != nil && *req.WaitSeconds == 0 {
			// An immediate answer was asked for: calling again at once would spin.
			return resp, nil
		}
	}
}

// waitToRetry waits d, or until ctx is done.
func waitToRetry(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Renew tells the operator the sandbox was used (after a successful tool call), which pushes back
// its idle timeout. The operator writes at most once per half idle timeout, so calling it after
// every tool call is cheap.
func (c *Client) Renew(ctx context.Context, req RenewRequest) error {
	_, _, err := c.do(ctx, "/v1/sandboxes/renew", req, nil)
	return err
}

// OpenSession creates the claims of every eager sandbox of the runtime for a session. It does not
// wait for them to bind: acquire them by handle ("<sandbox>/default") when they are needed.
func (c *Client) OpenSession(ctx context.Context, req SessionRequest) (*SessionResponse, error) {
	var out SessionResponse
	if _, _, err := c.do(ctx, "/v1/sessions/open", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CloseSession asks the operator to reap every claim of a session now (with sync-back). It
// returns once the request is recorded, not when the claims are gone.
func (c *Client) CloseSession(ctx context.Context, req SessionRequest) (*SessionResponse, error) {
	var out SessionResponse
	if _, _, err := c.do(ctx, "/v1/sessions/close", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// do POSTs in as JSON to path and decodes a 2xx body into out (if out is not nil). It returns
// the answer's status and headers.
func (c *Client) do(ctx context.Context, path string, in, out any) (int, http.Header, error) {
	if !c.plainHTTP && len(c.baseURL) >= len("http://") && strings.EqualFold(c.baseURL[:len("http://")], "http://") {
		return 0, nil, fmt.Errorf("refusing to send the ServiceAccount token to %s over plain HTTP: use https:// (client.PlainHTTP() allows it, for an operator run with --tls-mode=none)", c.baseURL)
	}
	token, err := c.tokenSource()
	if err != nil {
		return 0, nil, fmt.Errorf("getting the ServiceAccount token: %w", err)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, resp.Header, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := &APIError{Status: resp.StatusCode}
		if resp.StatusCode == http.StatusServiceUnavailable {
			apiErr.RetryAfter = defaultRetryAfter
			if d := retryAfter(resp.Header); d > 0 || resp.Header.Get("Retry-After") == "0" {
				apiErr.RetryAfter = d
			}
		}
		var e ErrorResponse
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			apiErr.Code, apiErr.Reason, apiErr.Message = e.Error, e.Reason, e.Message
		} else {
			apiErr.Message = strings.TrimSpace(string(b))
		}
		return resp.StatusCode, resp.Header, apiErr
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, resp.Header, fmt.Errorf("decoding the answer of %s: %w", path, err)
		}
	}
	return resp.StatusCode, resp.Header, nil
}

// retryAfter is an answer's Retry-After in seconds (at most maxRetryAfter); zero without one or
// with one that is not a number of seconds.
func retryAfter(h http.Header) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || secs < 0 {
		return 0
	}
	return min(time.Duration(secs)*time.Second, maxRetryAfter)
}
