package egress

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// creates counts the event creations the fake client was asked for.
func creates(c *k8sfake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
			n++
		}
	}
	return n
}

func waitCreates(t *testing.T, c *k8sfake.Clientset, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 2*time.Millisecond, true, func(context.Context) (bool, error) { return creates(c) >= n, nil }); err != nil {
		t.Fatalf("waiting for %d event creations (have %d): %v", n, creates(c), err)
	}
}

// runShared runs s until the test ends.
func runShared(t *testing.T, s *SharedDenialEvents) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestSharedDenialEvents: two replicas refusing a claim's host write one event between them, under
// the name EventName gives; another host, or a claim of the same name made again (another UID),
// is an event of its own; repeats in one replica are not written again.
func TestSharedDenialEvents(t *testing.T) {
	client := k8sfake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC))
	a := NewSharedDenialEvents(client.CoreV1(), clk, "gateway-a")
	b := NewSharedDenialEvents(client.CoreV1(), clk, "gateway-b")
	runShared(t, a)
	runShared(t, b)
	denied := func(uid, host string) Record {
		return Record{Kind: "connect", Namespace: "team-a", Claim: "agent-1", ClaimUID: types.UID("uid-" + uid), Host: host, Port: 443, Reason: ReasonNotAllowed}
	}
	a.Observe(denied("1", "evil.example"))
	a.Observe(denied("1", "evil.example"))
	waitCreates(t, client, 1)
	b.Observe(denied("1", "evil.example"))
	waitCreates(t, client, 2)
	a.Observe(denied("1", "other.example"))
	a.Observe(denied("2", "evil.example")) // the claim made again
	waitCreates(t, client, 4)

	events, err := client.CoreV1().Events("team-a").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 3 || creates(client) != 4 {
		t.Fatalf("%d events from %d creations, want 3 (one per claim and host, however many replicas) from 4 (a repeat in one replica is not written again)", len(events.Items), creates(client))
	}
	byName := map[string]corev1.Event{}
	for _, e := range events.Items {
		byName[e.Name] = e
	}
	e, ok := byName[EventName("team-a", "agent-1", "uid-1", "evil.example")]
	if !ok {
		t.Fatalf("no event named %s: %v", EventName("team-a", "agent-1", "uid-1", "evil.example"), byName)
	}
	if e.Type != corev1.EventTypeWarning || e.Reason != EventReasonDenied || e.InvolvedObject.Kind != "SandboxClaim" || e.InvolvedObject.Name != "agent-1" ||
		e.InvolvedObject.UID != "uid-1" || e.ReportingInstance != "gateway-a" || e.Count != 1 || !e.FirstTimestamp.Time.Equal(clk.Now()) {
		t.Errorf("event %+v", e)
	}
	if e.Message != "The egress gateway refused evil.example:443 (connect): host_not_allowed. Only a host's first refusal makes an event; the gateway's audit log has every one." {
		t.Errorf("message %q", e.Message)
	}
	if _, ok := byName[EventName("team-a", "agent-1", "uid-2", "evil.example")]; !ok {
		t.Error("the claim made again has no event of its own")
	}
}

// TestSharedDenialEventsRetries: a creation that fails is tried again (rate-limited, on the
// injected clock) and then written; Run returns once its context ends.
func TestSharedDenialEventsRetries(t *testing.T) {
	client := k8sfake.NewClientset()
	var failures atomic.Int32
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		if failures.Add(1) <= 2 {
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC))
	s := NewSharedDenialEvents(client.CoreV1(), clk, "gateway-a")
	runShared(t, s)
	s.Observe(Record{Kind: "http", Namespace: "team-a", Claim: "agent-1", ClaimUID: "uid-1", Host: "evil.example", Port: 80, Reason: ReasonNotAllowed})
	for i := 1; i <= 3; i++ {
		waitCreates(t, client, i)
		if i < 3 {
			waitFor(t, func() bool { return clk.HasWaiters() })
			clk.Step(time.Second) // past the rate limiter's backoff
		}
	}
	events, err := client.CoreV1().Events("team-a").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(events.Items) != 1 {
		t.Fatalf("events %v, %v: want the one, written at the third try", events, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 2*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatal(err)
	}
}
