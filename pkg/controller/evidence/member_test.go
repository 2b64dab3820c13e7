package evidence

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/controller/evidence/evidencetest"
	"github.com/airlock-dev/airlock/pkg/isolation"
)

var (
	sealKey  = bytes.Repeat([]byte{3}, 32)
	readTime = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
)

func memberPod(name, uid, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: k8stypes.UID("uid-" + uid)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

func nodeOf(kernel string) *corev1.Node {
	n := &corev1.Node{}
	n.Status.NodeInfo.KernelVersion = kernel
	return n
}

// sealOnto seals m onto pod's annotation.
func sealOnto(t *testing.T, key []byte, m Member, pod *corev1.Pod) {
	t.Helper()
	value, err := Seal(key, m)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationMember] = value
}

// TestSealOpen: a record sealed onto its own pod opens with the evidence's exact bytes, the node
// and its kernel; none is ErrNotRead.
func TestSealOpen(t *testing.T) {
	ev := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, nil)
	pod := memberPod("tools-codegen-aaaaaaaaaaaa", "a", "node-1")
	if _, err := Open(sealKey, pod); !errors.Is(err, ErrNotRead) {
		t.Fatalf("Open of a pod without a record: %v, want ErrNotRead", err)
	}
	sealOnto(t, sealKey, MemberOf(pod, nodeOf("6.18.0"), ev, readTime), pod)
	m, err := Open(sealKey, pod)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Evidence, ev) || m.NodeKernel != "6.18.0" || m.Node != "node-1" || m.PodUID != pod.UID || m.ReadAt != "2026-12-06T10:00:00Z" {
		t.Errorf("opened %+v", m)
	}
}

// TestOpenRefuses: a record sealed with another key, changed in any field, sealed for another
// pod (another member's copied over, an earlier pod of the same name, another node), or not the
// record's JSON is refused; so are evidence and records over their bounds.
func TestOpenRefuses(t *testing.T) {
	ev := evidencetest.Of("6.18.0", isolation.RuntimeKernel, nil)
	pod := memberPod("tools-codegen-aaaaaaaaaaaa", "a", "node-1")
	own := MemberOf(pod, nodeOf("6.18.0"), ev, readTime)
	resealed := func(change func(map[string]any)) string {
		value, err := Seal(sealKey, own)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(value), &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		out, _ := json.Marshal(m)
		return string(out)
	}
	sealedFor := func(m Member, key []byte) string {
		value, err := Seal(key, m)
		if err != nil {
			t.Fatal(err)
		}
		return value
	}
	other := memberPod("tools-codegen-bbbbbbbbbbbb", "b", "node-1")
	earlier := memberPod("tools-codegen-aaaaaaaaaaaa", "earlier", "node-1")
	otherNode := memberPod("tools-codegen-aaaaaaaaaaaa", "a", "node-2")
	gvisor := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, nil)
	tests := map[string]struct {
		value string
		want  string
	}{
		"another key":                     {sealedFor(own, bytes.Repeat([]byte{4}, 32)), "not sealed by this operator"},
		"the evidence changed":            {resealed(func(m map[string]any) { m["evidence"] = gvisor }), "not sealed by this operator"},
		"the node's kernel changed":       {resealed(func(m map[string]any) { m["nodeKernel"] = "5.0" }), "not sealed by this operator"},
		"the time changed":                {resealed(func(m map[string]any) { m["readAt"] = "2027-01-01T00:00:00Z" }), "not sealed by this operator"},
		"no MAC":                          {resealed(func(m map[string]any) { delete(m, "mac") }), "MAC"},
		"another version":                 {resealed(func(m map[string]any) { m["version"] = "v0" }), "version"},
		"an unknown field":                {resealed(func(m map[string]any) { m["kernel"] = "Dedicated" }), "JSON"},
		"another member's record":         {sealedFor(MemberOf(other, nodeOf("6.18.0"), gvisor, readTime), sealKey), "not of this pod"},
		"an earlier pod of the same name": {sealedFor(MemberOf(earlier, nodeOf("6.18.0"), gvisor, readTime), sealKey), "not of this pod"},
		"another node":                    {sealedFor(MemberOf(otherNode, nodeOf("4.19.0"), gvisor, readTime), sealKey), "not of this pod"},
		"not JSON":                        {"{", "JSON"},
		"too long":                        {strings.Repeat(" ", maxSealedBytes+1), "more than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := pod.DeepCopy()
			p.Annotations = map[string]string{AnnotationMember: tc.value}
			m, err := Open(sealKey, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %+v, %v; want an error saying %q", m, err, tc.want)
			}
		})
	}
	if _, err := Seal(sealKey, Member{Evidence: make([]byte, isolation.MaxBytes+1)}); err == nil {
		t.Error("Seal took evidence over isolation.MaxBytes")
	}
	if _, err := Seal(sealKey[:31], own); err == nil {
		t.Error("Seal took a short key")
	}
}

// BenchmarkOpenJudge: what a claim's adoption pays per member it looks at (the record opened and
// judged against its need).
func BenchmarkOpenJudge(b *testing.B) {
	ev := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, nil)
	pod := memberPod("tools-codegen-aaaaaaaaaaaa", "a", "node-1")
	value, err := Seal(sealKey, MemberOf(pod, nodeOf("6.18.0"), ev, readTime))
	if err != nil {
		b.Fatal(err)
	}
	pod.Annotations = map[string]string{AnnotationMember: value}
	need := isolation.Need{Kernel: isolation.KernelDedicated}
	for b.Loop() {
		m, err := Open(sealKey, pod)
		if err != nil {
			b.Fatal(err)
		}
		if v := Judge(m.Evidence, m.NodeKernel, need); v.Failure != "" {
			b.Fatal(v.Failure)
		}
	}
}
