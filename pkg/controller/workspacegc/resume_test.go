package workspacegc

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// TestResumeMemberGoesBeforeCollection (docs/nothing-lost.md, "Resume members"): a record due for
// collection is not unsuspended while a resume member of it exists, read from the API server (one
// created a moment ago is in no cache yet): an idle one is deleted (on its UID) and the record
// looked at again; one being deleted, or adopted by a claim (that claim takes the record or lets
// the member go), is waited for. Only with none left is the record collected.
func TestResumeMemberGoesBeforeCollection(t *testing.T) {
	claim := newClaim("c1", airlockv1alpha1.ClaimBound, t0.Add(-time.Hour))
	record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-time.Minute))
	reg := sandboxpodtest.WarmRegistry(1)
	record4 := sandboxpod.Freeze(sandboxpodtest.Class("codegen"), &reg.Spec.Sandboxes[0])
	member := sandboxpod.ResumeMemberPod(reg, "codegen", sandboxpod.PoolKey(reg.UID, "codegen", record4), "tools-codegen-rrrrrrrrrrrr", record4, record)
	member.UID = "uid-member"
	for name, tc := range map[string]struct {
		mutate      func(*corev1.Pod)
		none        bool
		wantActions []string
	}{
		"an idle member":         {wantActions: []string{"delete pods " + member.Name}},
		"a member being deleted": {mutate: func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }},
		"a member a claim adopted": {mutate: func(p *corev1.Pod) {
			p.Labels[airlockv1alpha1.LabelClaim] = "c1"
			p.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(claim)}
		}},
		"a member of another record": {mutate: func(p *corev1.Pod) { p.Labels[airlockv1alpha1.LabelResumes] = "airlock-kept-other" },
			none: true, wantActions: []string{"update jobs " + record.Name}},
		"no member": {none: true, wantActions: []string{"update jobs " + record.Name}},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			f.runtimes = nil // gone: collected at once, but for the member
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			pod := member.DeepCopy()
			if tc.mutate != nil {
				tc.mutate(pod)
			}
			if name != "no member" {
				// In the API server only: created a moment ago, not in the cache.
				if err := f.kubeClient.Tracker().Add(pod); err != nil {
					t.Fatal(err)
				}
			}
			requeue, err := c.sync(ctx, cache.MetaObjectToName(record))
			if err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, tc.wantActions)
			if tc.none {
				return
			}
			if requeue == nil || *requeue != syncPodRecheck {
				t.Errorf("looked at again after %v, want %v", requeue, syncPodRecheck)
			}
			for _, a := range f.log {
				if d, ok := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }); ok && a.GetVerb() == "delete" {
					if pre := d.GetDeleteOptions().Preconditions; pre == nil || ptr.Deref(pre.UID, "") != member.UID {
						t.Errorf("the member deleted with preconditions %+v, want its UID", pre)
					}
				}
			}
		})
	}
}

// TestResumeMemberDeletionEnqueuesItsRecord: a resume member's deletion (the pod handler)
// brings back the record it waited on: it may have held its collection back.
func TestResumeMemberDeletionEnqueuesItsRecord(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.newController(ctx)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tools-codegen-rrrrrrrrrrrr", Namespace: testNamespace,
		Labels: map[string]string{airlockv1alpha1.LabelClaim: "", airlockv1alpha1.LabelResumes: "airlock-kept-0123"}}}
	c.enqueueRecordsOfPod(pod)
	if c.queue.Len() != 1 {
		t.Fatalf("queue length %d, want 1", c.queue.Len())
	}
	if key, _ := c.queue.Get(); key != (cache.ObjectName{Namespace: testNamespace, Name: "airlock-kept-0123"}) {
		t.Errorf("enqueued %v, want the record", key)
	}
}
