package claimname

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// TestKeptRecordLookup: the list options select the record by its label and its name, and of a
// list only the Job of that name and namespace is the record (a list answered by a server that
// ignored the field selector, or a fake, may hold others).
func TestKeptRecordLookup(t *testing.T) {
	name := KeptRecordName("team-a/sandboxes/c1-0123abcd")
	if !strings.HasPrefix(name, "airlock-kept-") || len(name) != len("airlock-kept-")+20 {
		t.Errorf("KeptRecordName = %q, want airlock-kept- and 20 hex digits", name)
	}
	opts := KeptRecordListOptions(name)
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil || !sel.Matches(labels.Set{"airlock.dev/kept-workspace": "true"}) || sel.Matches(labels.Set{}) {
		t.Errorf("label selector %q (%v) does not select exactly the records' label", opts.LabelSelector, err)
	}
	fsel, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil || !fsel.Matches(fields.Set{"metadata.name": name}) || fsel.Matches(fields.Set{"metadata.name": name + "x"}) {
		t.Errorf("field selector %q (%v) does not select exactly the name", opts.FieldSelector, err)
	}
	job := func(ns, n string) batchv1.Job {
		return batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
	}
	jobs := []batchv1.Job{job("team-b", name), job("team-a", name+"x"), job("team-a", name)}
	if got := KeptRecordIn(jobs, "team-a", name); got != &jobs[2] {
		t.Errorf("KeptRecordIn = %v, want the third Job", got)
	}
	if got := KeptRecordIn(jobs[:2], "team-a", name); got != nil {
		t.Errorf("KeptRecordIn = %v of Jobs of other names and namespaces, want nil", got.ObjectMeta)
	}
}
