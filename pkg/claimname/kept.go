package claimname

import (
	"crypto/sha256"
	"encoding/hex"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// keptRecordPrefix and keptRecordHashLen make the name of a kept workspace's record.
const (
	keptRecordPrefix  = "airlock-kept-"
	keptRecordHashLen = 20
)

// KeptRecordName is the name of the record (a Job) of the kept workspace directory dir: one per
// directory, "airlock-kept-" and the first 20 hex digits of sha256(dir).
func KeptRecordName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return keptRecordPrefix + hex.EncodeToString(sum[:])[:keptRecordHashLen]
}

// KeptRecordListOptions select the one record named name, by the records' label and the name:
// the operator may list Jobs, not get them, so the claim controller and the Sandbox API read a
// record fresh from the API server with a list of these options (and KeptRecordIn).
func KeptRecordListOptions(name string) metav1.ListOptions {
	return metav1.ListOptions{
		LabelSelector: airlockv1alpha1.LabelKeptWorkspace + "=" + airlockv1alpha1.LabelValueKeptWorkspace,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	}
}

// KeptRecordIn returns the Job named name in namespace among jobs (a list of
// KeptRecordListOptions), or nil when there is none.
func KeptRecordIn(jobs []batchv1.Job, namespace, name string) *batchv1.Job {
	for i := range jobs {
		if jobs[i].Name == name && jobs[i].Namespace == namespace {
			return &jobs[i]
		}
	}
	return nil
}
