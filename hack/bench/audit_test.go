package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const operatorUser = "system:serviceaccount:airlock-system:airlock-operator"

// Lines as kube-apiserver writes them at Metadata level (trimmed to the fields read).
var auditLines = []string{
	`{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"create","user":{"username":"system:serviceaccount:airlock-system:airlock-operator"},"objectRef":{"resource":"deployments","namespace":"ns","name":"c","apiGroup":"apps","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-12-01T08:21:54.751018Z","stageTimestamp":"2026-12-01T08:21:54.858018Z"}`,
	`{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"create","user":{"username":"system:serviceaccount:airlock-system:airlock-operator"},"objectRef":{"resource":"deployments","namespace":"ns","name":"c","apiGroup":"apps","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Failure","message":"deployments.apps \"c\" already exists","reason":"AlreadyExists","details":{"name":"c","group":"apps","kind":"deployments"},"code":409},"requestReceivedTimestamp":"2026-12-01T08:21:55.000000Z","stageTimestamp":"2026-12-01T08:21:55.003000Z"}`,
	`{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"update","user":{"username":"system:serviceaccount:kube-system:deployment-controller"},"objectRef":{"resource":"deployments","namespace":"ns","name":"c","apiGroup":"apps","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"status":"Failure","reason":"Conflict","code":409}}`,
	`{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"create","user":{"username":"system:kube-scheduler"},"objectRef":{"resource":"pods","namespace":"ns","name":"p","apiVersion":"v1","subresource":"binding"},"responseStatus":{"metadata":{},"code":201}}`,
	`{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"patch","user":{"username":"kubernetes-admin"},"objectRef":{"resource":"pods","namespace":"ns","name":"p","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"code":200}}`,
	`{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"update","user":{"username":"system:serviceaccount:airlock-system:airlock-operator"},"objectRef":{"resource":"sandboxclaims","namespace":"ns","name":"c","apiGroup":"airlock.dev","apiVersion":"v1alpha1","subresource":"status"},"responseStatus":{"metadata":{},"status":"Failure","code":422}}`,
	// Not a completed write: a panic stage, a read that a broader policy logged, a non-resource URL.
	`{"kind":"Event","level":"Metadata","stage":"Panic","verb":"create","user":{"username":"kubernetes-admin"},"objectRef":{"resource":"pods","namespace":"ns","apiVersion":"v1"}}`,
	`{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"get","user":{"username":"kubernetes-admin"},"objectRef":{"resource":"pods","namespace":"ns","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}`,
	`{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"create","user":{"username":"kubernetes-admin"},"requestURI":"/metrics","responseStatus":{"metadata":{},"code":200}}`,
}

func TestCountAuditByClientAndOutcome(t *testing.T) {
	log := strings.Join(auditLines, "\n") + "\n"
	// A last line still being written (no newline yet) is left for the next read.
	partial := `{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"create","user":{"usern`
	got, n, err := countAudit(strings.NewReader(log+partial), operatorUser)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(log)) {
		t.Errorf("read %d bytes, want %d (whole lines only)", n, len(log))
	}
	want := clientWrites{
		{Client: "operator", Group: "apps", Resource: "deployments", Verb: "create", Outcome: "ok"}:                                             1,
		{Client: "operator", Group: "apps", Resource: "deployments", Verb: "create", Outcome: "AlreadyExists"}:                                  1,
		{Client: "kube-controller-manager", Group: "apps", Resource: "deployments", Subresource: "status", Verb: "update", Outcome: "Conflict"}: 1,
		{Client: "kube-scheduler", Resource: "pods", Subresource: "binding", Verb: "create", Outcome: "ok"}:                                     1,
		{Client: "admin (kwok)", Resource: "pods", Subresource: "status", Verb: "patch", Outcome: "ok"}:                                         1,
		{Client: "operator", Group: "airlock.dev", Resource: "sandboxclaims", Subresource: "status", Verb: "update", Outcome: "422"}:            1,
	}
	if diff := cmp.Diff(want, got.writes); diff != "" {
		t.Errorf("countAudit (-want +got):\n%s", diff)
	}
	// The API server's time for the operator's writes that carry both timestamps.
	wantTimes := serverTimes{{"apps/deployments", "CREATE"}: {107 * time.Millisecond, 3 * time.Millisecond}}
	if diff := cmp.Diff(wantTimes, got.times); diff != "" {
		t.Errorf("server times (-want +got):\n%s", diff)
	}

	summary := byClient(got.writes, 2)
	if op := summary["operator"]; op.Count != 3 || op.AlreadyExists != 1 || op.Conflicts != 0 || op.OtherFailures != 1 || op.PerClaim != 1.5 {
		t.Errorf("operator %+v, want 3 writes (1.5 per claim), 1 AlreadyExists, 1 other failure", op)
	}
	if kcm := summary["kube-controller-manager"]; kcm.Conflicts != 1 || kcm.AlreadyExists != 0 {
		t.Errorf("kube-controller-manager %+v, want 1 Conflict", kcm)
	}
}

func TestCountAuditRejectsGarbage(t *testing.T) {
	if _, _, err := countAudit(strings.NewReader("not json\n"), operatorUser); err == nil {
		t.Error("a line that is not JSON was accepted")
	}
}

func TestReadAuditFromOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	first := auditLines[0] + "\n"
	if err := os.WriteFile(path, []byte(first+auditLines[3]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, off, err := readAudit(path, int64(len(first)), operatorUser)
	if err != nil {
		t.Fatal(err)
	}
	want := clientWrites{{Client: "kube-scheduler", Resource: "pods", Subresource: "binding", Verb: "create", Outcome: "ok"}: 1}
	if diff := cmp.Diff(want, got.writes); diff != "" {
		t.Errorf("from the offset (-want +got):\n%s", diff)
	}
	if off != int64(len(first)+len(auditLines[3])+1) {
		t.Errorf("offset %d, want the end of the file", off)
	}
}

func TestClientOf(t *testing.T) {
	tests := map[string]string{
		operatorUser: "operator",
		"system:serviceaccount:airlock-system:intruder":    "other (system:serviceaccount:airlock-system:intruder)",
		"system:kube-controller-manager":                   "kube-controller-manager",
		"system:serviceaccount:kube-system:job-controller": "kube-controller-manager",
		"system:kube-scheduler":                            "kube-scheduler",
		"kubernetes-admin":                                 "admin (kwok)",
		"system:apiserver":                                 "kube-apiserver",
	}
	for user, want := range tests {
		if got := clientOf(user, operatorUser); got != want {
			t.Errorf("clientOf(%q) = %q, want %q", user, got, want)
		}
	}
}
