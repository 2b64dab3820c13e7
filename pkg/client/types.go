package client

import (
	"time"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// The wire types of the Sandbox API (SPEC section 4). The operator's server (pkg/sandboxapi)
// decodes and encodes these same types, so the client and the server cannot drift apart; this
// package imports nothing from Kubernetes, so runtimes can use it cheaply.

// Address is one reachable address of a sandbox: one per port of its SandboxClass.
type Address struct {
	// Name is the class port's name, e.g. "mcp".
	Name string `json:"name"`
	// URL is the address, e.g. http://<service>.<namespace>.svc:8080.
	URL string `json:"url"`
}

// AcquireRequest is the body of POST /v1/sandboxes/acquire.
type AcquireRequest struct {
	// Namespace is the AgentRuntime's namespace.
	Namespace string `json:"namespace"`
	// Runtime is the AgentRuntime's name.
	Runtime string `json:"runtime"`
	// Session is the runtime's session id: 1 to 256 printable ASCII characters, no spaces.
	Session string `json:"session"`
	// Handle is <sandbox>/<instance>, e.g. "codegen/default".
	Handle string `json:"handle"`
	// WaitSeconds bounds how long the call waits for the claim to bind: 0 answers at once,
	// nil means the default (30); at most 300.
	WaitSeconds *int `json:"waitSeconds,omitempty"`
}

// AcquireResponse is the answer to an acquire: 200 with Phase "Bound", Addresses and Headers,
// or 202 with the phase the claim is still in (call again: acquire is idempotent).
type AcquireResponse struct {
	// Claim is the SandboxClaim's name.
	Claim string `json:"claim"`
	// Phase is the claim's phase: "Bound" for a 200.
	Phase string `json:"phase"`
	// Reason is the claim's status.reason, when it has one, or, while a pod of the claim cannot
	// run, the reason of its PodLost condition (NodeUnreachable, ...) (202 only).
	Reason string `json:"reason,omitempty"`
	// Message says, while a pod of the claim cannot run, why, naming the pod and its node, for a
	// person to read (202 only).
	Message string `json:"message,omitempty"`
	// Addresses are the sandbox's addresses, one per class port (200 only).
	Addresses []Address `json:"addresses,omitempty"`
	// Headers are the HTTP headers to send to the sandbox: Authorization, the per-claim bearer
	// token (200 only).
	Headers map[string]string `json:"headers,omitempty"`
	// ResumedWorkspace is set when the sandbox resumed the workspace an earlier claim of the same
	// runtime, session and handle left (kept for the runtime's workspaceRetention): it starts
	// with that claim's files (200 only).
	ResumedWorkspace *ResumedWorkspace `json:"resumedWorkspace,omitempty"`
	// Warm is set when the claim adopted a member of its class's warm pool: the sandbox was
	// running before this acquire (200 only).
	Warm bool `json:"warm,omitempty"`
	// IdleTimeoutSeconds is the runtime's spec.sandbox.idleTimeout in seconds: a sandbox not
	// renewed for that long is reaped, and a renewal within half of it writes nothing (SPEC
	// section 3), so a client renews at most once per half of it (200 only).
	IdleTimeoutSeconds int64 `json:"idleTimeoutSeconds,omitempty"`
	// Attestation is the operator's signed isolation statement about the sandbox (SPEC section
	// 4, docs/isolation.md): what sandboxd showed of its boundary before any tool ran, bound to
	// the claim, its pod and node, its record and its token. Verify it with
	// Sandbox.VerifyIsolation or Config.VerifyIsolation (200 only, when the operator read
	// evidence).
	Attestation *attestation.Attestation `json:"attestation,omitempty"`
}

// ResumedWorkspace is the kept workspace a sandbox resumed.
type ResumedWorkspace struct {
	// KeptAt is when the earlier claim's workspace was kept.
	KeptAt time.Time `json:"keptAt"`
	// KeptBy is the name of the claim that left it.
	KeptBy string `json:"keptBy,omitempty"`
}

// RenewRequest is the body of POST /v1/sandboxes/renew.
type RenewRequest struct {
	Namespace string `json:"namespace"`
	Runtime   string `json:"runtime"`
	Session   string `json:"session"`
	Handle    string `json:"handle"`
}

// SessionRequest is the body of POST /v1/sessions/open and POST /v1/sessions/close.
type SessionRequest struct {
	Namespace string `json:"namespace"`
	Runtime   string `json:"runtime"`
	Session   string `json:"session"`
}

// SessionClaim is one claim of a session, as sessions/open and sessions/close report it.
type SessionClaim struct {
	// Claim is the SandboxClaim's name; empty when the claim was refused before it was created.
	Claim string `json:"claim,omitempty"`
	// Handle is the claim's handle; for an eager sandbox, "<sandbox>/default".
	Handle string `json:"handle"`
	// Phase is the claim's phase ("Pending" for a claim just created, "Refused" for a claim the
	// operator refused without creating it).
	Phase string `json:"phase"`
	// Reason is the refusal's reason (MaxPerSession, MaxInstances) or the claim's status.reason.
	Reason string `json:"reason,omitempty"`
}

// SessionResponse is the answer of sessions/open (200) and sessions/close (202).
type SessionResponse struct {
	Claims []SessionClaim `json:"claims"`
}

// ErrorResponse is the body of every error answer: {"error": code, "message": text}, plus
// "reason" for 429 refused and 502 failed.
type ErrorResponse struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}

// Error codes of the Sandbox API (SPEC section 4), and those this implementation adds.
const (
	CodeInvalid          = "invalid"            // 400, and 413 for a body over 64 KiB
	CodeUnauthorized     = "unauthorized"       // 401
	CodeForbidden        = "forbidden"          // 403
	CodeNotFound         = "not_found"          // 404
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeDisabled         = "disabled"           // 409: the runtime may hold no sandbox
	CodeNotBound         = "not_bound"          // 409: renew of a claim that is not Bound
	CodeConflict         = "conflict"           // 409: the claim's name is taken by another session or handle
	CodeRefused          = "refused"            // 429, with reason
	CodeInternal         = "internal"           // 500
	CodeFailed           = "failed"             // 502, with reason
	CodeUnavailable      = "unavailable"        // 503: caches not synced, or TokenReview unreachable
)

// Reasons of 429 refusals.
const (
	ReasonMaxPerSession = "MaxPerSession"
	ReasonMaxInstances  = "MaxInstances"
)

// ReasonPreviousRuntime is the reason of a 202 acquire whose claim name is held by a claim of an
// earlier AgentRuntime of the same name (deleted and created again): that claim is never
// answered; it goes (garbage collection, or reaping when it was orphaned), and the next call
// acquires afresh.
const ReasonPreviousRuntime = "PreviousRuntime"

// Limits of requests.
const (
	// MaxBodyBytes is the largest request body the API reads; a larger one is answered 413.
	MaxBodyBytes = 64 << 10
	// DefaultWaitSeconds is acquire's waitSeconds when the request does not say.
	DefaultWaitSeconds = 30
	// MaxWaitSeconds is the largest waitSeconds.
	MaxWaitSeconds = 300
	// MaxSessionLength is the longest session id.
	MaxSessionLength = 256
	// MaxHandleLength is the longest handle.
	MaxHandleLength = 127
)
