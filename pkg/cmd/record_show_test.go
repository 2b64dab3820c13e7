//go:build !sandboxd_only

package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// storedRecord is a sealed record of claim name/uid in one segment, created at created, and the
// signer's public key file.
func storedRecord(t *testing.T, name, uid string, created time.Time) (*airlockv1alpha1.SessionRecord, string) {
	t.Helper()
	priv, _ := record.SigningKey(bytes.Repeat([]byte{3}, 32))
	s, _ := record.NewSigner(priv)
	chain, _ := record.NewChain(uid, s)
	var seg recordstore.Segment
	for _, e := range []record.Entry{
		{Source: record.SourceOperator, Kind: record.KindClaimPhase, Phase: "Bound"},
		{Source: record.SourceSandboxd, Boot: "b1", SourceSeq: 2, Kind: record.KindToolCall, Call: 1, Tool: "Write", Status: record.StatusOK},
	} {
		e.Time = record.FormatTime(created)
		got, err := chain.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		line, _ := got.Line()
		seg.Lines = append(seg.Lines, line)
	}
	sealed, a, _ := chain.Seal(created, nil)
	line, _ := sealed.Line()
	seg.Lines, seg.Anchor = append(seg.Lines, line), &a
	claim := &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(uid)}}
	cm, err := recordstore.SessionRecord(claim, seg)
	if err != nil {
		t.Fatal(err)
	}
	cm.CreationTimestamp = metav1.NewTime(created)
	pem, _ := record.MarshalPublicKey(s.Public())
	keyFile := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return cm, keyFile
}

func showRecord(t *testing.T, o RecordShowOptions, objs ...runtime.Object) (string, error) {
	t.Helper()
	var kube, air []runtime.Object
	for _, obj := range objs {
		if _, ok := obj.(*airlockv1alpha1.SessionRecord); ok {
			air = append(air, obj)
		} else {
			kube = append(kube, obj)
		}
	}
	o.client, o.airlock, o.Namespace = fake.NewClientset(kube...), airlockfake.NewSimpleClientset(air...), "team-a" //nolint:staticcheck // NewClientset's tracker needs an OpenAPI schema of SessionRecord
	if o.Output == "" {
		o.Output = "text"
	}
	var out bytes.Buffer
	err := o.showRecords(t.Context(), "rt-abc", &out)
	return out.String(), err
}

func TestRecordShowPrintsAndVerifies(t *testing.T) {
	cm, key := storedRecord(t, "rt-abc", "uid-1", time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	out, err := showRecord(t, RecordShowOptions{PublicKeyFile: key}, cm)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"Record of claim team-a/rt-abc (UID uid-1): 3 entries", "claim.phase      Bound", "#1 Write ok", "Verified: intact and sealed: 3 entries"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	cm.Spec.Entries = strings.Replace(cm.Spec.Entries, `"tool":"Write"`, `"tool":"Read"`, 1)
	out, err = showRecord(t, RecordShowOptions{PublicKeyFile: key}, cm)
	if err == nil || !strings.Contains(err.Error(), "not intact") || !strings.Contains(out, "seq 2: edited") {
		t.Fatalf("an edited stored record: %v\n%s", err, out)
	}
}

func TestRecordShowOfSeveralClaimsOfOneName(t *testing.T) {
	older, key := storedRecord(t, "rt-abc", "uid-old", time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	newer, _ := storedRecord(t, "rt-abc", "uid-new", time.Date(2025, 6, 2, 12, 0, 0, 0, time.UTC))
	out, err := showRecord(t, RecordShowOptions{PublicKeyFile: key}, older, newer)
	if err != nil || strings.Index(out, "uid-new") > strings.Index(out, "uid-old") {
		t.Fatalf("want both, newest first: %v\n%s", err, out)
	}
	if _, err := showRecord(t, RecordShowOptions{Output: "jsonl"}, older, newer); err == nil || !strings.Contains(err.Error(), "--uid") {
		t.Errorf("jsonl of two records: %v, want a request for --uid", err)
	}
	out, err = showRecord(t, RecordShowOptions{Output: "jsonl", UID: "uid-old"}, older, newer)
	if err != nil || strings.Count(out, "\n") != 4 || !strings.Contains(out, `{"anchor"`) {
		t.Errorf("jsonl of one record: %v\n%s", err, out)
	}
	if _, err := showRecord(t, RecordShowOptions{UID: "nope"}, older); err == nil || !strings.Contains(err.Error(), "no record of claim team-a/rt-abc with UID nope") {
		t.Errorf("an unknown UID: %v", err)
	}
}

// TestRecordShowReadsTheKeyFromAirlockCA: without --public-key, the key published in the
// namespace's airlock-ca ConfigMap (record-signing.pub) verifies the record; without one there,
// the record is printed, not verified.
func TestRecordShowReadsTheKeyFromAirlockCA(t *testing.T) {
	cm, keyFile := storedRecord(t, "rt-abc", "uid-1", time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ca := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: cabundle.ConfigMapName},
		Data: map[string]string{cabundle.Key: "---", cabundle.RecordSigningKey: string(pem)}}
	out, err := showRecord(t, RecordShowOptions{}, cm, ca)
	if err != nil || !strings.Contains(out, "Verified: intact and sealed: 3 entries") {
		t.Fatalf("with the key in airlock-ca: %v\n%s", err, out)
	}
	out, err = showRecord(t, RecordShowOptions{}, cm)
	if err != nil || !strings.Contains(out, "Not verified: no record-signing key in ConfigMap airlock-ca") {
		t.Fatalf("without airlock-ca: %v\n%s", err, out)
	}
}
