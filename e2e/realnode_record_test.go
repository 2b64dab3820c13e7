//go:build e2e && realnode

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// TestRealNodeSessionRecord: a session that Writes a file and runs Bash, then closes, leaves a
// record (docs/record.md §2) that the in-cluster leader read from sandboxd and stored: the claim's
// phases, each tool.call, the file.write of the Write, the process of the Bash, sandboxd's
// stopped entry (the operator's stop: no gap), and the seal. `airlock record` prints it and says
// "intact and sealed" with the key it reads from airlock-ca. An edit of a stored entry is refused
// by the API server; the same edit made by deleting the segment and creating it again (which the
// API server admits) is reported.
func TestRealNodeSessionRecord(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	e := newRealnodeEnv(t, "airlock-rn-record", realnodeOptions{maxConcurrent: 5, maxPerSession: 3, maxInstances: 5, idleTimeout: 5 * time.Minute})
	steps := []map[string]any{
		step("write", "Write", map[string]any{"file_path": "src/record.txt", "content": "recorded\n"}),
		step("bash", "Bash", map[string]any{"command": "cat src/record.txt && echo done"}),
	}
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "session-record", "handle": "codegen/default",
		"steps": steps, "close": true, "idleSeconds": 300}
	var res rnSession
	e.runClient(t, "runtime-record", "session", plan, 4*time.Minute, &res)
	if res.Error != "" || res.Claim == "" {
		t.Fatalf("runtime: %q (claim %q)", res.Error, res.Claim)
	}
	for _, name := range []string{"write", "bash"} {
		if c := res.call(t, name); c.IsError || c.Err != "" {
			t.Fatalf("%s: %s %s", name, c.Text, c.Err)
		}
	}

	// The claim is reaped (the session closed), its pod stopped through sandboxd, the record
	// sealed; then the claim goes and the record stays with the kept workspace.
	uid := sealedRecordUID(t, e.ns, res.Claim)
	ca, err := kubeClient.CoreV1().ConfigMaps(e.ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
	if err != nil || !strings.Contains(ca.Data[cabundle.RecordSigningKey], "PUBLIC KEY") {
		t.Fatalf("airlock-ca has no record-signing key: %v", err)
	}

	out, ok := airlockRecord(t, res.Claim, "-n", e.ns, "--uid", uid)
	t.Logf("airlock record:\n%s", out)
	if !ok || !strings.Contains(out, "Verified: intact and sealed") {
		t.Fatalf("airlock record: exit 0 %v, want intact and sealed", ok)
	}
	jsonl, ok := airlockRecord(t, res.Claim, "-n", e.ns, "--uid", uid, "-o", "jsonl")
	if !ok {
		t.Fatalf("airlock record -o jsonl:\n%s", jsonl)
	}
	for _, want := range []string{
		`"kind":"claim.phase"`, `"phase":"Bound"`, `"phase":"Reaping"`,
		`"kind":"tool.call"`, `"tool":"Write"`, `"tool":"Bash"`,
		`"kind":"file.write"`, `"path":"src/record.txt"`,
		`"kind":"process"`, `"kind":"sandbox.stopped"`, `"kind":"record.sealed"`,
	} {
		if !strings.Contains(jsonl, want) {
			t.Errorf("the record lacks %s", want)
		}
	}
	if strings.Contains(jsonl, `"kind":"record.gap"`) {
		t.Errorf("an ordinary end left a gap in the record:\n%s", jsonl)
	}

	// Tampered where it is stored: an edit in place is refused by the API server; the same edit
	// by a deletion and a creation is admitted, and reported, and the command fails.
	srs := airlockClient.AirlockV1alpha1().SessionRecords(e.ns)
	list, err := srs.List(ctx, metav1.ListOptions{LabelSelector: recordstore.LabelRecordOf + "=" + uid})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("the record's segments: %v", err)
	}
	var seg *airlockv1alpha1.SessionRecord
	for i := range list.Items {
		if strings.Contains(list.Items[i].Spec.Entries, `"tool":"Bash"`) {
			seg = list.Items[i].DeepCopy()
		}
	}
	if seg == nil {
		t.Fatal("no segment holds the Bash call")
	}
	seg.Spec.Entries = strings.Replace(seg.Spec.Entries, `"tool":"Bash"`, `"tool":"Read"`, 1)
	if _, err := srs.Update(ctx, seg, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("an edit of a stored entry: %v, want refused by the API server", err)
	}
	if err := srs.Delete(ctx, seg.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seg.ResourceVersion, seg.UID = "", ""
	if _, err := srs.Create(ctx, seg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, ok = airlockRecord(t, res.Claim, "-n", e.ns, "--uid", uid)
	if ok || !strings.Contains(out, "edited") || !strings.Contains(out, "tampered") {
		t.Errorf("an edited segment: exit 0 %v, want a failure that says edited and tampered:\n%s", ok, out)
	}
}

// sealedRecordUID waits for the claim's record (by the claim's name) to be stored sealed and
// returns the claim's UID it is of.
func sealedRecordUID(t *testing.T, ns, claim string) string {
	t.Helper()
	var uid string
	eventually(t, 3*time.Minute, "the record of claim "+claim+" to be stored sealed", func(ctx context.Context) (bool, error) {
		list, err := airlockClient.AirlockV1alpha1().SessionRecords(ns).List(ctx, metav1.ListOptions{LabelSelector: recordstore.LabelRecordClaim + "=" + claim})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			if a := list.Items[i].Spec.Anchor; a != nil && a.Sealed {
				uid = list.Items[i].Spec.ClaimUID
				return true, nil
			}
		}
		return false, nil
	})
	return uid
}

// checkWarmRecords: the record of each claim that adopted a warm member holds the member's
// sandboxd entries (read with the claim's adoption token): its tool calls and its stopped entry
// (the operator's stop, asked with that token), with no gap, and verifies intact and sealed.
func checkWarmRecords(t *testing.T, ns string, claims []string) {
	t.Helper()
	for _, claim := range claims {
		uid := sealedRecordUID(t, ns, claim)
		jsonl, ok := airlockRecord(t, claim, "-n", ns, "--uid", uid, "-o", "jsonl")
		if !ok {
			t.Errorf("airlock record of warm claim %s:\n%s", claim, jsonl)
			continue
		}
		for _, want := range []string{`"kind":"tool.call"`, `"kind":"sandbox.stopped"`, `"kind":"record.sealed"`} {
			if !strings.Contains(jsonl, want) {
				t.Errorf("the record of warm claim %s lacks %s:\n%s", claim, want, jsonl)
			}
		}
		if strings.Contains(jsonl, `"kind":"record.gap"`) {
			t.Errorf("the record of warm claim %s has a gap:\n%s", claim, jsonl)
		}
		if out, ok := airlockRecord(t, claim, "-n", ns, "--uid", uid); !ok || !strings.Contains(out, "Verified: intact and sealed") {
			t.Errorf("airlock record of warm claim %s: exit 0 %v, want intact and sealed:\n%s", claim, ok, out)
		}
	}
}
