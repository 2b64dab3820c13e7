package evidence

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/isolation"
)

// What the operator read of a warm member is kept on the member's pod, in the annotation
// AnnotationIsolationEvidence, written by the warm pool controller once it read and judged the
// evidence and read by the claim controller when a claim would adopt the member. Nothing in the
// sandbox can write it (a member has no ServiceAccount token, and no agent code has run in it
// before adoption); anyone else who may patch pods in the namespace could, so it is sealed: an
// HMAC-SHA256, with a key derived one-way from the operator's (claimtoken.MemberEvidenceKey),
// over the record, which names the pod (namespace, name, UID) and its node. Open refuses a
// record sealed with another key, changed in any field, or sealed for another pod (copied from
// another member, or from an earlier pod of the same name).

// AnnotationMember is the annotation that holds a member's sealed record.
const AnnotationMember = airlockv1alpha1.AnnotationIsolationEvidence

const (
	// memberVersion is the version of a sealed record, and the domain of its MAC.
	memberVersion = "airlock.dev/member-evidence/v1"
	// maxSealedBytes bounds the annotation Open reads: the evidence (at most isolation.MaxBytes)
	// in base64 and the rest.
	maxSealedBytes = isolation.MaxBytes*4/3 + 4<<10
	// sealKeyBytes is the length of the seal key.
	sealKeyBytes = sha256.Size
)

// ErrNotRead says that the member carries no record: its evidence has not been read.
var ErrNotRead = errors.New("the warm member's isolation evidence has not been read")

// Member is what the operator read of a warm member's sandbox at its readiness.
type Member struct {
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	PodUID    types.UID `json:"podUID"`
	// Node is the pod's node and NodeKernel its status.nodeInfo.kernelVersion, read with the
	// evidence.
	Node       string `json:"node"`
	NodeKernel string `json:"nodeKernel"`
	// ReadAt is when the read ended: RFC 3339, UTC, seconds.
	ReadAt string `json:"readAt"`
	// Evidence is the evidence's exact bytes as sandboxd answered them (base64 in JSON).
	Evidence []byte `json:"evidence"`
}

// MemberOf is the record of a read of pod's evidence and Node that ended at at.
func MemberOf(pod *corev1.Pod, node *corev1.Node, evidence []byte, at time.Time) Member {
	return Member{
		Namespace: pod.Namespace, Pod: pod.Name, PodUID: pod.UID, Node: pod.Spec.NodeName,
		NodeKernel: node.Status.NodeInfo.KernelVersion, ReadAt: at.UTC().Format(time.RFC3339), Evidence: evidence,
	}
}

// sealed is the annotation's JSON: the version, the record, and the MAC over the JSON of the
// first two (the same struct without the MAC).
type sealed struct {
	Version string `json:"version"`
	Member
	MAC string `json:"mac,omitempty"`
}

// Seal returns the annotation value of m, sealed with key (claimtoken.MemberEvidenceKey).
func Seal(key []byte, m Member) (string, error) {
	if len(key) != sealKeyBytes {
		return "", fmt.Errorf("the seal key has %d bytes, want %d", len(key), sealKeyBytes)
	}
	if len(m.Evidence) > isolation.MaxBytes {
		return "", fmt.Errorf("the evidence is %d bytes, more than %d", len(m.Evidence), isolation.MaxBytes)
	}
	mac, err := macOf(key, sealed{Version: memberVersion, Member: m})
	if err != nil {
		return "", err
	}
	out, err := json.Marshal(sealed{Version: memberVersion, Member: m, MAC: base64.RawURLEncoding.EncodeToString(mac)})
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// Open returns the record sealed onto pod, checked: ErrNotRead when the pod carries none; an
// error when the record is not this operator's (its MAC), was changed, or names another pod or
// node than pod's.
func Open(key []byte, pod *corev1.Pod) (*Member, error) {
	value, ok := pod.Annotations[AnnotationMember]
	if !ok {
		return nil, ErrNotRead
	}
	if len(key) != sealKeyBytes {
		return nil, fmt.Errorf("the seal key has %d bytes, want %d", len(key), sealKeyBytes)
	}
	if len(value) > maxSealedBytes {
		return nil, fmt.Errorf("the evidence record is %d bytes, more than %d", len(value), maxSealedBytes)
	}
	var s sealed
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("the evidence record is not its JSON: %v", err)
	}
	if s.Version != memberVersion {
		return nil, fmt.Errorf("the evidence record has version %q, not %q", s.Version, memberVersion)
	}
	got, err := base64.RawURLEncoding.Strict().DecodeString(s.MAC)
	if err != nil || len(got) != sha256.Size {
		return nil, errors.New("the evidence record's MAC is not base64url of 32 bytes")
	}
	want, err := macOf(key, sealed{Version: s.Version, Member: s.Member})
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(got, want) {
		return nil, errors.New("the evidence record was not sealed by this operator, or was changed")
	}
	m := s.Member
	if m.Namespace != pod.Namespace || m.Pod != pod.Name || m.PodUID != pod.UID || m.Node != pod.Spec.NodeName {
		return nil, fmt.Errorf("the evidence record is of pod %s/%s (UID %s) on node %q, not of this pod (UID %s) on node %q",
			m.Namespace, m.Pod, m.PodUID, m.Node, pod.UID, pod.Spec.NodeName)
	}
	return &m, nil
}

// macOf is the MAC of a record (without its MAC): HMAC-SHA256(key, version NUL JSON).
func macOf(key []byte, s sealed) ([]byte, error) {
	s.MAC = ""
	data, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(memberVersion))
	mac.Write([]byte{0})
	mac.Write(data)
	return mac.Sum(nil), nil
}
