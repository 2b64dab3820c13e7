package sandboxapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apimachinery/pkg/util/wait"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
)

const (
	runtimeTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	runtimeParent = "00-" + runtimeTrace + "-00f067aa0ba902b7-01"
)

// acquireWithHeader starts an acquire with traceparent (none when empty) in the background.
func (f *fixture) acquireWithHeader(traceparent string) <-chan *httptest.ResponseRecorder {
	b, err := json.Marshal(acquireBody(testSession, testHandle, 30))
	if err != nil {
		f.t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(f.ctx, http.MethodPost, "/v1/sandboxes/acquire", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tokenAgent)
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		f.server.ServeHTTP(rec, req)
		done <- rec
	}()
	return done
}

// TestAcquireSpans: an acquire with a traceparent is a span of the runtime's trace with the
// children the claim's phases show (admission.wait until Binding, binding until Bound, the
// isolation evidence at Bound), on the injected clock; the claim it created keeps the acquire's
// context in airlock.dev/traceparent.
func TestAcquireSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	f := newFixtureWithOptions(t, fixtureOptions{tracerProvider: tp}, baseObjects()...)
	done := f.acquireWithHeader(runtimeParent)

	f.awaitWaiting()
	created := f.apiClaim(claimname.For(testRuntime, testSession, testHandle))
	created.ResourceVersion = "1"
	created.CreationTimestamp.Time = f.clock.Now()
	f.setClaim(created)
	f.awaitWaiting()
	f.clock.Step(2 * time.Second)
	binding := bumped(created, func(c *airlockv1alpha1.SandboxClaim) { c.Status.Phase = airlockv1alpha1.ClaimBinding })
	f.setClaim(binding)
	f.awaitWaiting()
	f.clock.Step(3 * time.Second)
	f.setClaim(bumped(binding, func(c *airlockv1alpha1.SandboxClaim) {
		c.Status.Phase = airlockv1alpha1.ClaimBound
		c.Status.Addresses = []airlockv1alpha1.ClaimAddress{{Name: "mcp", URL: "http://x:8080"}}
		c.Status.Isolation = &airlockv1alpha1.ClaimIsolation{Kernel: "Dedicated", Runtime: "gVisor", EvidenceDigest: "ab"}
	}))
	select {
	case rec := <-done:
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the acquire did not answer")
	}

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	acquire, admission, bind, evidence := spans["acquire"], spans["admission.wait"], spans["binding"], spans["isolation.evidence"]
	if acquire.SpanContext.TraceID().String() != runtimeTrace || acquire.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("acquire span %+v: want a child of the request's traceparent", acquire.SpanContext)
	}
	for name, s := range map[string]tracetest.SpanStub{"admission.wait": admission, "binding": bind, "isolation.evidence": evidence} {
		if s.Parent.SpanID() != acquire.SpanContext.SpanID() {
			t.Errorf("%s: parent %s, want the acquire span", name, s.Parent.SpanID())
		}
	}
	if got := admission.EndTime.Sub(admission.StartTime); got != 2*time.Second {
		t.Errorf("admission.wait lasted %v, want 2s (created to Binding on the clock)", got)
	}
	if got := bind.EndTime.Sub(bind.StartTime); got != 3*time.Second {
		t.Errorf("binding lasted %v, want 3s", got)
	}
	want := "00-" + runtimeTrace + "-" + acquire.SpanContext.SpanID().String() + "-01"
	if got := f.apiClaim(created.Name).Annotations[airlockv1alpha1.AnnotationTraceparent]; got != want {
		t.Errorf("the claim's %s = %q, want the acquire's %q", airlockv1alpha1.AnnotationTraceparent, got, want)
	}
}

// TestAcquireMalformedTraceparentIsANewRoot: a malformed traceparent is ignored: the acquire is
// answered as without one, its span a new root.
func TestAcquireMalformedTraceparentIsANewRoot(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	f := newFixtureWithOptions(t, fixtureOptions{tracerProvider: tp}, baseObjects()...)
	bound := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	f.setClaim(bound)
	for _, header := range []string{"00-zz-00f067aa0ba902b7-01", "00-" + runtimeTrace + "-0000000000000000-01", string(make([]byte, 4096))} {
		rec := <-f.acquireWithHeader(header)
		if rec.Code != http.StatusOK {
			t.Fatalf("traceparent %.40q: status %d: %s", header, rec.Code, rec.Body.String())
		}
	}
	for _, s := range exp.GetSpans() {
		if s.Parent.IsValid() {
			t.Errorf("span %s has parent %s: a malformed traceparent was taken", s.Name, s.Parent.SpanID())
		}
	}
	if len(exp.GetSpans()) == 0 {
		t.Error("no acquire span")
	}
}
