//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// airlockRecord runs `airlock record` against the suite's cluster; it returns the output and
// whether the command succeeded (exit 0: every record shown is intact).
func airlockRecord(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(airlockBinary(t), append([]string{"record", "--kubeconfig=" + os.Getenv("KUBECONFIG")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// recordSegments are the stored segments of the claim with uid.
func recordSegments(ctx context.Context, ns, uid string) ([]airlockv1alpha1.SessionRecord, error) {
	list, err := airlockClient.AirlockV1alpha1().SessionRecords(ns).List(ctx, metav1.ListOptions{LabelSelector: recordstore.LabelRecordOf + "=" + uid})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitRecordSealed waits until the claim's stored record is sealed, and returns its segments.
func waitRecordSealed(t *testing.T, ns, uid string, timeout time.Duration) []airlockv1alpha1.SessionRecord {
	t.Helper()
	var segs []airlockv1alpha1.SessionRecord
	eventually(t, timeout, "the claim's record to be stored sealed", func(ctx context.Context) (bool, error) {
		var err error
		if segs, err = recordSegments(ctx, ns, uid); err != nil {
			return false, err
		}
		for i := range segs {
			if a := segs[i].Spec.Anchor; a != nil && a.Sealed {
				return true, nil
			}
		}
		return false, nil
	})
	return segs
}

// TestRecordOfAClaim (API-only): a claim that binds, is reaped and is deleted leaves a record of
// its phases, sealed, kept with its workspace (owned by the kept workspace's Job), in
// SessionRecords; `airlock record` prints it and verifies it with the key published in
// airlock-ca. Tampered where it is stored: an administrator's edit of a stored entry is refused by
// the API server (the CRD's rules); a segment deleted and created again with an altered entry, and
// a deleted middle segment, which the API server admits, are reported, and the command fails.
func TestRecordOfAClaim(t *testing.T) {
	e := newClaimEnv(t, "airlock-record", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, idleTimeout: 5 * time.Second})
	startClaimOperator(t, e.ns)
	c := e.createClaim(t, "session-1", "codegen/default", "")
	e.waitPhase(t, c.Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	e.waitGone(t, c.Name, 90*time.Second)
	kept := waitKeptRecord(t, e.ns, c.Spec.WorkspaceDir, 30*time.Second)
	segs := waitRecordSealed(t, e.ns, string(c.UID), 60*time.Second)
	for _, s := range segs {
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != kept.UID {
			t.Errorf("segment %s owned by %v, want the kept workspace's Job %s only", s.Name, s.OwnerReferences, kept.Name)
		}
	}
	ctx := context.Background()
	ca, err := kubeClient.CoreV1().ConfigMaps(e.ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
	if err != nil || !strings.Contains(ca.Data[cabundle.RecordSigningKey], "PUBLIC KEY") {
		t.Fatalf("airlock-ca has no record-signing key: %v %v", err, ca.Data)
	}
	if cms, err := kubeClient.CoreV1().ConfigMaps(e.ns).List(ctx, metav1.ListOptions{LabelSelector: recordstore.LabelRecordOf}); err != nil || len(cms.Items) != 0 {
		t.Errorf("record ConfigMaps: %v %d, want none (records are SessionRecords)", err, len(cms.Items))
	}

	out, ok := airlockRecord(t, c.Name, "-n", e.ns)
	if !ok {
		t.Fatalf("airlock record failed:\n%s", out)
	}
	for _, want := range []string{"Bound", "Reaping", "record.sealed", "Verified: intact and sealed"} {
		if !strings.Contains(out, want) {
			t.Errorf("airlock record's output lacks %q:\n%s", want, out)
		}
	}
	srs := airlockClient.AirlockV1alpha1().SessionRecords(e.ns)

	// An edited entry, in place: refused by the API server.
	seg := segs[0].DeepCopy()
	orig := seg.Spec.Entries
	seg.Spec.Entries = strings.Replace(orig, `"phase":"Bound"`, `"phase":"Bond"`, 1)
	if seg.Spec.Entries == orig {
		t.Fatalf("no Bound phase in the stored segment:\n%s", orig)
	}
	if _, err := srs.Update(ctx, seg, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("an administrator's edit of a stored entry: %v, want refused by the API server", err)
	}

	// The same edit by deleting the segment and creating it again: admitted, and reported.
	if err := srs.Delete(ctx, seg.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seg.ResourceVersion, seg.UID = "", ""
	if _, err := srs.Create(ctx, seg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, ok = airlockRecord(t, c.Name, "-n", e.ns)
	if ok || !strings.Contains(out, "edited") || !strings.Contains(out, "tampered") {
		t.Errorf("a segment created again, edited: exit 0 %v, want a failure that says edited and tampered:\n%s", ok, out)
	}

	// A deleted middle segment: the record, split into three segments as a longer one is stored
	// (the anchor in the last), then the middle one deleted.
	if err := srs.Delete(ctx, seg.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	parsed, err := recordstore.Parse(&segs[0])
	if err != nil || len(parsed.Lines) < 3 {
		t.Fatalf("the stored record: %v, %d lines; want at least 3", err, len(parsed.Lines))
	}
	n := len(parsed.Lines)
	parts := [][][]byte{parsed.Lines[:1], parsed.Lines[1:2], parsed.Lines[2:n]}
	for i, lines := range parts {
		s := recordstore.Segment{N: i, Lines: lines, Cursor: parsed.Cursor}
		if i == len(parts)-1 {
			s.Anchor = parsed.Anchor
		}
		sr, err := recordstore.SessionRecord(c, s)
		if err != nil {
			t.Fatal(err)
		}
		sr.OwnerReferences = segs[0].OwnerReferences
		if _, err := srs.Create(ctx, sr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if out, ok = airlockRecord(t, c.Name, "-n", e.ns); !ok {
		t.Fatalf("the record split into three segments does not verify:\n%s", out)
	}
	if err := srs.Delete(ctx, recordstore.Name(c.Name, c.UID, 1), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out, ok = airlockRecord(t, c.Name, "-n", e.ns)
	if ok || !strings.Contains(out, "dropped") {
		t.Errorf("a deleted middle segment: exit 0 %v, want a failure that says dropped:\n%s", ok, out)
	}
	if !strings.Contains(out, "seq 2") {
		t.Errorf("a deleted middle segment (entry 2): the output does not say where:\n%s", out)
	}

	// The record stored again as one segment with its lines reordered, or with a line appended:
	// each admitted by the API server as a new segment, each reported.
	replace := func(lines [][]byte) (string, bool) {
		t.Helper()
		stored, err := recordSegments(ctx, e.ns, string(c.UID))
		if err != nil {
			t.Fatal(err)
		}
		for i := range stored {
			if err := srs.Delete(ctx, stored[i].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		sr, err := recordstore.SessionRecord(c, recordstore.Segment{N: 0, Lines: lines, Cursor: parsed.Cursor, Anchor: parsed.Anchor})
		if err != nil {
			t.Fatal(err)
		}
		sr.OwnerReferences = segs[0].OwnerReferences
		if _, err := srs.Create(ctx, sr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return airlockRecord(t, c.Name, "-n", e.ns)
	}
	reordered := slices.Clone(parsed.Lines)
	reordered[0], reordered[1] = reordered[1], reordered[0]
	if out, ok := replace(reordered); ok || !strings.Contains(out, "reordered") {
		t.Errorf("two entries swapped: exit 0 %v, want a failure that says reordered:\n%s", ok, out)
	}
	last := parsed.Lines[n-1]
	forged := bytes.Replace(last, []byte(fmt.Sprintf(`"seq":%d,`, n)), []byte(fmt.Sprintf(`"seq":%d,`, n+1)), 1)
	if bytes.Equal(forged, last) {
		t.Fatalf("the last line has no seq %d: %s", n, last)
	}
	appended := append(slices.Clone(parsed.Lines), forged)
	if out, ok := replace(appended); ok || !strings.Contains(out, "appended") {
		t.Errorf("an entry appended: exit 0 %v, want a failure that says appended:\n%s", ok, out)
	}
	// Appended in place to the sealed segment: refused by the API server.
	stored, err := recordSegments(ctx, e.ns, string(c.UID))
	if err != nil || len(stored) != 1 {
		t.Fatalf("the stored record: %v, %d segments", err, len(stored))
	}
	grown := stored[0].DeepCopy()
	grown.Spec.Entries += string(forged) + "\n"
	if _, err := srs.Update(ctx, grown, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("an entry appended in place to a sealed segment: %v, want refused by the API server", err)
	}
}
