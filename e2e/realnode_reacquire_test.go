//go:build e2e && realnode

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/claimname"
)

// TestRealNodeReacquire: one session and handle, closed and acquired again 50 times in a row from
// the runtime pod. Claim names are deterministic, so every round's claim has its predecessor's
// name, and the predecessor's children and pod are deleted in the background: every answer must
// still be a fresh, working sandbox, served by a pod no earlier round used (the marking call
// answers NEW), and holding only its own token (the previous round's token gets 401). And it
// resumes the workspace the previous round left (issue 24 item 4): the acquire says
// resumedWorkspace, and the workspace's journal holds every earlier round's line, byte for byte
// (its sha256), with no cleanup Job to wait for between rounds.
func TestRealNodeReacquire(t *testing.T) {
	requireRealNode(t)
	const rounds = 50
	e := newRealnodeEnv(t, "airlock-rn-reacq", realnodeOptions{maxConcurrent: 2, maxPerSession: 1, maxInstances: 2})
	var res struct {
		Rounds []struct {
			Claim           string  `json:"claim"`
			AcquireMillis   float64 `json:"acquireMillis"`
			Marker          string  `json:"marker"`
			PrevTokenStatus int     `json:"prevTokenStatus"`
			Resumed         bool    `json:"resumed"`
			JournalSHA256   string  `json:"journalSHA256"`
		} `json:"rounds"`
		Error string `json:"error"`
	}
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "again", "handle": "codegen/default", "sessions": rounds}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	timeline := watchReacquire(wctx, t, e.ns, claimname.For("agent", "again", "codegen/default"))
	e.runClient(t, "reacquire", "reacquire", plan, 20*time.Minute, &res)
	if res.Error != "" {
		t.Errorf("after %d rounds: %s", len(res.Rounds), res.Error)
	}
	if len(res.Rounds) != rounds {
		t.Fatalf("%d rounds, want %d", len(res.Rounds), rounds)
	}
	var acquire []float64
	for i, r := range res.Rounds {
		acquire = append(acquire, r.AcquireMillis)
		if r.Claim != res.Rounds[0].Claim {
			t.Errorf("round %d: claim %s, want the handle's one name %s", i, r.Claim, res.Rounds[0].Claim)
		}
		if r.Marker != "NEW" {
			t.Errorf("round %d: the marking call answered %q, want NEW (a pod no earlier round used)", i, r.Marker)
		}
		if i > 0 && r.PrevTokenStatus != http.StatusUnauthorized {
			t.Errorf("round %d: the previous round's token got %d, want 401", i, r.PrevTokenStatus)
		}
		if r.Resumed != (i > 0) {
			t.Errorf("round %d: resumed %v, want %v", i, r.Resumed, i > 0)
		}
		if want := journalSHA256(i); r.JournalSHA256 != want {
			t.Errorf("round %d: the workspace's journal has sha256 %q, want %q (the lines of rounds 0..%d)", i, r.JournalSHA256, want, i-1)
		}
	}
	t.Logf("close and re-acquire of one handle (the workspace resumed), n=%d rounds: acquire p50 %.0f ms, p90 %.0f ms, max %.0f ms",
		rounds, percentile(acquire, 0.5), percentile(acquire, 0.9), percentile(acquire, 1))
	checkSandboxesStopped(t, e.ns, res.Rounds[0].Claim, rounds-1)
	t.Logf("the split of a round, from the test's watches of the claim and its pods:%s", timeline.report())
}

// journalSHA256 is the sha256 (hex) of the journal the reacquire rounds 0..rounds-1 wrote.
func journalSHA256(rounds int) string {
	var b strings.Builder
	for i := range rounds {
		fmt.Fprintf(&b, "round-%d\n", i)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// checkSandboxesStopped waits until the claims named claim (one per round) have SandboxStopped
// events for each of the n reaped pods, each saying that the operator's stop killed at least one
// process (the one each round left behind, outside its Bash call's process group): those pods
// were stopped through their sandboxd and deleted at once (docs/nothing-lost.md). The stop is
// asked before the pod's deletion, so it no longer races the kubelet's SIGTERM (before it did,
// 43 to 49 of 49 won).
func checkSandboxesStopped(t *testing.T, ns, claim string, n int) {
	t.Helper()
	var last []string
	want := n
	eventually(t, time.Minute, fmt.Sprintf("%d of %d SandboxStopped events of claims %s", want, n, claim), func(ctx context.Context) (bool, error) {
		events, err := kubeClient.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim + ",reason=SandboxStopped"})
		if err != nil {
			return false, err
		}
		uids := map[types.UID]bool{}
		last = last[:0]
		for _, ev := range events.Items {
			var killed int
			if i := strings.Index(ev.Message, "("); i < 0 {
				return false, fmt.Errorf("event %q: no count of killed processes", ev.Message)
			} else if _, err := fmt.Sscanf(ev.Message[i:], "(%d killed)", &killed); err != nil {
				return false, fmt.Errorf("event %q: %v", ev.Message, err)
			}
			if killed < 1 {
				return false, fmt.Errorf("event %q: the stop killed nothing, but the round left a process behind", ev.Message)
			}
			uids[ev.InvolvedObject.UID] = true
			last = append(last, ev.Message)
		}
		return len(uids) >= want, nil
	})
	t.Logf("the operator's stop: %d of %d claims' pods stopped through sandboxd (%d wanted), e.g. %q", len(last), n, want, last[0])
}
