// Package sandboxapi is the Sandbox API of SPEC section 4, served by every operator replica: a
// runtime acquires a sandbox by handle, renews it, and opens and closes sessions. A runtime never
// creates a claim itself: the API finds or creates the claim (under a name every replica computes
// alike, so concurrent acquires collapse into one object) and waits, driven by the SandboxClaim
// informer, until the leader's claim controller binds it.
//
// Every request is authenticated with a TokenReview of its bearer token (auth.go) and authorized
// against the named AgentRuntime's spec.serviceAccountName. Reads come from this replica's
// informer caches (kept workspaces' records too), but for one read of a legacy kept workspace's
// record when a new claim may resume it (workspace.go: only when the cache shows that record or a
// claim at its directory was seen lately; never on an ordinary acquire); the only API writes are claim creation (a replacement too: the leader links it
// to the claim it replaces), renewals' status.lastUsedAt and sessions/close's reap-requested
// annotation.
package sandboxapi

import (
	"go.opentelemetry.io/otel/trace"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/client"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
)

// FieldManager names the Sandbox API's writes.
const FieldManager = "airlock-sandbox-api"

// EventSource is the part of a shared informer the API needs: a place to hang the handler that
// wakes waiting acquires. cache.SharedIndexInformer is one.
type EventSource interface {
	AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// Config is what the Sandbox API is built from.
type Config struct {
	// KubeClient creates TokenReviews.
	KubeClient kubernetes.Interface
	// AirlockClient creates and updates claims.
	AirlockClient airlockclientset.Interface

	Runtimes   airlocklisters.AgentRuntimeLister
	Registries airlocklisters.ToolRegistryLister
	Classes    airlocklisters.SandboxClassLister
	Claims     airlocklisters.SandboxClaimLister

	// ClaimEvents is the informer behind Claims: its events wake the acquires waiting for a claim
	// to bind.
	ClaimEvents EventSource
	// KeptRecords reads the record of a kept workspace, to resume one an earlier version named
	// (workspace.go; NewKeptRecords); nil reads it with KubeClient.
	KeptRecords KeptRecords
	// KeptRecordCache is a cache of the kept workspaces' records (a Job informer filtered on
	// the records' label, on every replica; its HasSynced belongs in Synced): when set, a new
	// claim's legacy record is read with KeptRecords only if this cache shows a Job of its name,
	// or a claim at that legacy directory was seen lately (workspace.go, mayHaveLegacyRecord),
	// so that an acquire costs no API round trip; nil reads every new claim's (tests).
	KeptRecordCache batchlisters.JobLister
	// Tokens derives a Bound claim's bearer token from the operator's key (*claimtoken.Source):
	// the API never reads the claim's Secret. A token it cannot derive is 503, never an answer.
	Tokens TokenSource
	// Synced are the informers' HasSynced: until all are true the API answers 503, since a cold
	// cache would wrongly answer 404 or let a claim past the limits. Nil entries are ignored.
	Synced []cache.InformerSynced

	// Clock is the time of waits, admission and renewals; nil is the real clock.
	Clock clock.Clock
	// Audiences are the audiences asked of TokenReview; empty means the API server's own (the
	// operator's --token-audiences defaults to "airlock").
	Audiences []string
	// TracerProvider gets the acquire spans (trace.go); nil: the no-op provider.
	TracerProvider trace.TracerProvider
}

// TokenSource derives the bearer token of a claim; *claimtoken.Source is one. AdoptionToken is
// the token of a claim that adopted the warm member namespace/member: the claim's UID and its
// tools, MACed with the member's key (docs/decisions.md, "Warm members: the token is the
// adoption").
type TokenSource interface {
	Token(ctx context.Context, uid types.UID, namespace, name string) (string, error)
	AdoptionToken(ctx context.Context, namespace, member string, claimUID types.UID, tools []string) (string, error)
}

// Server is the Sandbox API: an http.Handler.
type Server struct {
	kubeClient    kubernetes.Interface
	airlockClient airlockclientset.Interface

	runtimes    airlocklisters.AgentRuntimeLister
	registries  airlocklisters.ToolRegistryLister
	classes     airlocklisters.SandboxClassLister
	claims      airlocklisters.SandboxClaimLister
	tokens      TokenSource
	keptRecords KeptRecords
	keptCache   batchlisters.JobLister
	legacySeen  *legacySeen
	synced      []cache.InformerSynced

	clock   clock.Clock
	tracer  trace.Tracer
	authn   *authenticator
	waiters *waiters
	mux     *http.ServeMux

	// onWait, if set, is called each time an acquire starts waiting for a change: a test seam.
	onWait func()
}

// NewServer builds the Sandbox API and registers its event handler on the claim informer. ctx's logger is the base of request logs.
func NewServer(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &Server{
		kubeClient:    cfg.KubeClient,
		airlockClient: cfg.AirlockClient,
		runtimes:      cfg.Runtimes,
		registries:    cfg.Registries,
		classes:       cfg.Classes,
		claims:        cfg.Claims,
		tokens:        cfg.Tokens,
		keptRecords:   cfg.KeptRecords,
		keptCache:     cfg.KeptRecordCache,
		legacySeen:    newLegacySeen(cfg.Clock),
		synced:        cfg.Synced,
		clock:         cfg.Clock,
		tracer:        newTracer(cfg.TracerProvider),
		authn:         newAuthenticator(cfg.KubeClient, cfg.Audiences, cfg.Clock),
		waiters:       newWaiters(),
	}
	if s.keptRecords == nil {
		s.keptRecords = NewKeptRecords(cfg.KubeClient)
	}
	if cfg.Tokens == nil {
		return nil, errors.New("the Sandbox API needs a token source")
	}
	if cfg.ClaimEvents == nil {
		return nil, errors.New("the Sandbox API needs the sandboxclaims informer")
	}
	if _, err := cfg.ClaimEvents.AddEventHandler(s.legacySeen.eventHandler()); err != nil {
		return nil, err
	}
	if _, err := cfg.ClaimEvents.AddEventHandler(s.waiters.eventHandler()); err != nil {
		return nil, fmt.Errorf("adding the Sandbox API's sandboxclaims event handler: %w", err)
	}
	registerMetrics()

	logger := klog.LoggerWithName(klog.FromContext(ctx), "sandboxapi")
	s.mux = http.NewServeMux()
	s.mux.Handle("POST /v1/sandboxes/acquire", s.endpoint(logger, "acquire", s.acquire))
	s.mux.Handle("POST /v1/sandboxes/renew", s.endpoint(logger, "renew", s.renew))
	s.mux.Handle("POST /v1/sessions/open", s.endpoint(logger, "openSession", s.openSession))
	s.mux.Handle("POST /v1/sessions/close", s.endpoint(logger, "closeSession", s.closeSession))
	s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, req *http.Request) {
		for _, p := range []string{"/v1/sandboxes/acquire", "/v1/sandboxes/renew", "/v1/sessions/open", "/v1/sessions/close"} {
			if req.URL.Path == p {
				w.Header().Set("Allow", http.MethodPost)
				writeError(w, errorf(http.StatusMethodNotAllowed, client.CodeMethodNotAllowed, "%s accepts only POST", p))
				return
			}
		}
		writeError(w, errorf(http.StatusNotFound, client.CodeNotFound, "no such endpoint: %s %s", req.Method, req.URL.Path))
	})
	return s, nil
}

// ServeHTTP serves the Sandbox API's /v1/ endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.mux.ServeHTTP(w, req)
}

// caller is an authenticated request: who sent it.
type caller struct {
	// namespace and serviceAccount are the reviewed token's ServiceAccount.
	namespace, serviceAccount string
}

// handlerFunc serves one endpoint for an authenticated caller: it decodes the body itself and
// returns the status and body to send, or an error (an *apiError, or anything else for a 500).
type handlerFunc func(ctx context.Context, who caller, body io.Reader) (status int, out any, err error)

// endpoint wraps a handlerFunc with what every endpoint does: the cache check, the body limit,
// authentication, logging, metrics and the JSON answer.
func (s *Server) endpoint(base klog.Logger, name string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := s.clock.Now()
		logger := klog.LoggerWithValues(base, "endpoint", name)
		audit := &auditRecord{}
		ctx := context.WithValue(klog.NewContext(withRemoteParent(req.Context(), req), logger), auditKey{}, audit)

		status, out, err := s.serve(ctx, w, req, h)
		if err != nil {
			var apiErr *apiError
			switch {
			case errors.As(err, &apiErr):
			case ctx.Err() != nil:
				// The request ended (the client went away, or this replica is shutting down) while
				// a call to the API server was in flight: nothing is known to have gone wrong, and
				// every endpoint is safe to call again, so the answer is the retryable 503.
				logger.V(2).Info("Sandbox API request ended before it was served", "err", err, "cause", context.Cause(ctx))
				apiErr = errorf(http.StatusServiceUnavailable, client.CodeUnavailable, "the request ended before it was served: %v; try again", context.Cause(ctx))
			default:
				logger.Error(err, "Sandbox API request failed")
				apiErr = errorf(http.StatusInternalServerError, client.CodeInternal, "internal error: %v", err)
			}
			status = apiErr.status
			writeError(w, apiErr)
		} else {
			writeJSON(w, status, out)
		}
		elapsed := s.clock.Since(start)
		audit.log(base, name, status)
		requests.WithLabelValues(name, fmt.Sprint(status)).Inc()
		if name == "acquire" {
			acquireDuration.WithLabelValues(acquireResult(status)).Observe(elapsed.Seconds())
		}
		logger.V(4).Info("Served Sandbox API request", "status", status, "elapsed", elapsed)
	})
}

func (s *Server) serve(ctx context.Context, w http.ResponseWriter, req *http.Request, h handlerFunc) (int, any, error) {
	for _, synced := range s.synced {
		if synced != nil && !synced() {
			return 0, nil, errorf(http.StatusServiceUnavailable, client.CodeUnavailable, "the operator's caches are not synced yet: try again")
		}
	}
	who, err := s.authenticate(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	if a, ok := ctx.Value(auditKey{}).(*auditRecord); ok {
		a.who = who
	}
	body := http.MaxBytesReader(w, req.Body, client.MaxBodyBytes)
	return h(ctx, who, body)
}

// acquireResult is the label of the acquire latency histogram for a status.
func acquireResult(status int) string {
	switch status {
	case http.StatusOK:
		return "bound"
	case http.StatusAccepted:
		return "pending"
	case http.StatusTooManyRequests:
		return "refused"
	case http.StatusBadGateway:
		return "failed"
	case http.StatusUnauthorized, http.StatusForbidden:
		return "denied"
	default:
		return "error"
	}
}

// apiError is an error answer: {"error": code, "message": text}, and "reason" when set.
type apiError struct {
	status  int
	code    string
	reason  string
	message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message)
}

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func invalidf(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, client.CodeInvalid, format, args...)
}

// retryAfterSeconds is the Retry-After of every 503: the API server is away, or the caches are
// not synced yet; pkg/client's Acquire calls again after it.
const retryAfterSeconds = "1"

func writeError(w http.ResponseWriter, e *apiError) {
	switch e.status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	writeJSON(w, e.status, client.ErrorResponse{Error: e.code, Message: e.message, Reason: e.reason})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if body == nil {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// decode reads one JSON object into out, strictly: unknown fields, trailing data and a body over
// client.MaxBodyBytes are errors. Every error is an *apiError (400 invalid, or 413).
func decode(body io.Reader, out any) *apiError {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(out)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data after the JSON object")
			var tooLarge *http.MaxBytesError
			if errors.As(terr, &tooLarge) {
				err = terr
			}
		}
	}
	if err == nil {
		return nil
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &apiError{status: http.StatusRequestEntityTooLarge, code: client.CodeInvalid,
			message: fmt.Sprintf("the request body is larger than %d bytes", client.MaxBodyBytes)}
	}
	if errors.Is(err, io.EOF) {
		return invalidf("the request body is empty: send a JSON object")
	}
	// Errors can quote the input (an unknown field's name): keep them short.
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return invalidf("the request body is not a valid request: %s", msg)
}

// validateTarget checks the fields that name a runtime and a session.
func validateTarget(namespace, runtime, session string) *apiError {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return invalidf("namespace %q is not a DNS label: %s", clip(namespace), strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(runtime); len(errs) > 0 {
		return invalidf("runtime %q is not a DNS label: %s", clip(runtime), strings.Join(errs, "; "))
	}
	return validateSession(session)
}

// validateSession checks a session id: 1 to 256 printable ASCII characters (0x21-0x7e), as the
// SandboxClaim CRD's spec.session pattern says.
func validateSession(session string) *apiError {
	if session == "" {
		return invalidf("session is required")
	}
	if len(session) > client.MaxSessionLength {
		return invalidf("session is %d bytes long, at most %d are allowed", len(session), client.MaxSessionLength)
	}
	for i := 0; i < len(session); i++ {
		if c := session[i]; c < 0x21 || c > 0x7e {
			return invalidf("session may hold only printable ASCII characters without spaces (0x21-0x7e); byte %d is 0x%02x", i, c)
		}
	}
	return nil
}

// splitHandle checks a handle, <sandbox>/<instance> with both parts DNS labels and at most 127
// characters in all, and returns the sandbox's name.
func splitHandle(handle string) (sandbox string, err *apiError) {
	if handle == "" {
		return "", invalidf("handle is required, e.g. \"codegen/default\"")
	}
	if len(handle) > client.MaxHandleLength {
		return "", invalidf("handle is %d bytes long, at most %d are allowed", len(handle), client.MaxHandleLength)
	}
	sandbox, instance, ok := strings.Cut(handle, "/")
	if !ok {
		return "", invalidf("handle %q is not <sandbox>/<instance>, e.g. \"codegen/default\"", clip(handle))
	}
	for _, part := range []string{sandbox, instance} {
		if errs := validation.IsDNS1123Label(part); len(errs) > 0 {
			return "", invalidf("handle %q: %q is not a DNS label: %s", clip(handle), clip(part), strings.Join(errs, "; "))
		}
	}
	return sandbox, nil
}

// clip keeps error messages short whatever the input: names are quoted in messages with %q.
func clip(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// decodeAcquire decodes and validates an acquire request; waitSeconds is defaulted.
func decodeAcquire(body io.Reader) (client.AcquireRequest, time.Duration, *apiError) {
	var req client.AcquireRequest
	if err := decode(body, &req); err != nil {
		return req, 0, err
	}
	if err := validateTarget(req.Namespace, req.Runtime, req.Session); err != nil {
		return req, 0, err
	}
	if _, err := splitHandle(req.Handle); err != nil {
		return req, 0, err
	}
	wait := client.DefaultWaitSeconds
	if req.WaitSeconds != nil {
		wait = *req.WaitSeconds
	}
	if wait < 0 || wait > client.MaxWaitSeconds {
		return req, 0, invalidf("waitSeconds is %d: it must be between 0 and %d", wait, client.MaxWaitSeconds)
	}
	return req, time.Duration(wait) * time.Second, nil
}

// decodeRenew decodes and validates a renew request.
func decodeRenew(body io.Reader) (client.RenewRequest, *apiError) {
	var req client.RenewRequest
	if err := decode(body, &req); err != nil {
		return req, err
	}
	if err := validateTarget(req.Namespace, req.Runtime, req.Session); err != nil {
		return req, err
	}
	_, err := splitHandle(req.Handle)
	return req, err
}

// decodeSession decodes and validates a sessions/open or sessions/close request.
func decodeSession(body io.Reader) (client.SessionRequest, *apiError) {
	var req client.SessionRequest
	if err := decode(body, &req); err != nil {
		return req, err
	}
	return req, validateTarget(req.Namespace, req.Runtime, req.Session)
}
