package warmpool

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// Resume members (resume.go; docs/nothing-lost.md, "Resume members").

// keptRecordOf is the record of the workspace the claim named name of the runtime "agent" kept at
// keptAt, as the claim controller writes it.
func keptRecordOf(name string, keptAt time.Time) *batchv1.Job {
	claim := sandboxpodtest.Claim(name, "s-"+name, airlockv1alpha1.ClaimReaping, keptAt.Add(-time.Hour))
	job := workspace.Record(claim, "workspace-content", sandboxpod.JobConfig("ghcr.io/airlock-dev/airlock:v0.1.0"), keptAt)
	job.UID = types.UID("uid-record-" + name)
	job.ResourceVersion = "5"
	job.CreationTimestamp = metav1.NewTime(keptAt)
	return job
}

// resumeMemberOf is the resume member the pool started on the record's workspace, cached (Ready at
// ip when ip is set).
func resumeMemberOf(record *batchv1.Job, name string, created time.Time, ip string) *corev1.Pod {
	reg := warmRegistry(1)
	key := sandboxpod.PoolKey(reg.UID, "codegen", testRecord())
	return sandboxpodtest.AsCached(sandboxpod.ResumeMemberPod(reg, "codegen", key, name, testRecord(), record), created, ip)
}

// named makes the record name the member, as ensureResumeKey writes it.
func named(record *batchv1.Job, member *corev1.Pod) *batchv1.Job {
	record = record.DeepCopy()
	record.Annotations[airlockv1alpha1.AnnotationResumeMember] = member.Name
	record.Annotations[airlockv1alpha1.AnnotationResumeMemberUID] = string(member.UID)
	return record
}

// resumeFixture is a pool of warm (full: one Ready member whose key this process made, which the
// controller is told), its policy, its runtime, the records and the pods.
func resumeFixture(t *testing.T, warm int32, records []*batchv1.Job, pods ...*corev1.Pod) (*fixture, *corev1.Pod) {
	reg := warmRegistry(warm)
	var full []*corev1.Pod
	for i := range warm {
		full = append(full, warmMember(reg, "tools-codegen-fullfull000"+string(rune('a'+i)), testRecord(), t0.Add(-time.Hour), "10.244.0.40"))
	}
	f := poolFixture(t, warm, append(full, pods...), currentPolicy())
	f.runtimes = append(f.runtimes, testRuntime())
	f.jobs = append(f.jobs, records...)
	var first *corev1.Pod
	if len(full) > 0 {
		first = full[0]
	}
	return f, first
}

// newResumeController builds the fixture's controller, knowing the keys of the pool's full
// members (and of more, by UID).
func (f *fixture) newResumeController(t *testing.T, keys ...*corev1.Pod) *Controller {
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx, 100)
	for _, p := range f.pods {
		if !sandboxpod.IsResumeMember(p) {
			c.keysWritten.Store(p.UID, struct{}{})
		}
	}
	for _, p := range keys {
		c.keysWritten.Store(p.UID, struct{}{})
	}
	return c
}

// createdResumeMembers are the resume members the clients created.
func (f *fixture) createdResumeMembers() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range f.createdOf("pods") {
		if pod := o.(*corev1.Pod); sandboxpod.IsResumeMember(pod) {
			out = append(out, pod)
		}
	}
	return out
}

// TestResumeMemberStartedOnAKeptWorkspace: for a workspace of the entry kept within its
// resumeWindow, the pool starts one member on it: the pool's member exactly (its record, pool
// key and so its policy, its key file, no tools, no token), whose workspace is the kept directory
// and whose labels say which record (name and UID) and runtime it waits for, apart from the
// pool's own members (the pool was full, and stays so). It looks again when the window passes.
func TestResumeMemberStartedOnAKeptWorkspace(t *testing.T) {
	keptAt := t0.Add(-time.Minute)
	record := keptRecordOf("c1", keptAt)
	f, _ := resumeFixture(t, 1, []*batchv1.Job{record})
	c := f.newResumeController(t)
	_, ctx := ktesting.NewTestContext(t)
	requeue, err := c.sync(ctx, registryKey())
	if err != nil {
		t.Fatal(err)
	}
	created := f.createdResumeMembers()
	if len(created) != 1 || len(f.createdOf("pods")) != 1 {
		t.Fatalf("created %d pods, %d resume members, want one resume member only", len(f.createdOf("pods")), len(created))
	}
	pod := created[0]
	dir := record.Annotations[airlockv1alpha1.AnnotationKeptDir]
	want := map[string]string{
		airlockv1alpha1.LabelClaim:             "",
		airlockv1alpha1.LabelResumes:           record.Name,
		airlockv1alpha1.LabelResumesUID:        string(record.UID),
		airlockv1alpha1.LabelResumesRuntimeUID: "uid-rt-agent",
		airlockv1alpha1.LabelWarmPool:          currentPolicy().Labels[airlockv1alpha1.LabelWarmPool],
		airlockv1alpha1.LabelWarmMember:        pod.Name,
		airlockv1alpha1.LabelWarmRegistry:      "tools",
	}
	for k, v := range want {
		if got, ok := pod.Labels[k]; !ok || got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	if pod.Annotations[airlockv1alpha1.AnnotationResumesDir] != dir || sandboxpod.MemberWorkspaceDir(pod) != dir {
		t.Errorf("annotations %v, want the kept directory %s", pod.Annotations, dir)
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.SubPath != "" && m.SubPath != dir {
			t.Errorf("mount %s subPath %q, want the kept directory %q", m.Name, m.SubPath, dir)
		}
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.Kind != "ToolRegistry" {
		t.Errorf("controller %+v, want the registry", ref)
	}
	if !slices.Contains(pod.Spec.Containers[0].Args, "--warm-key-file="+sandboxpod.MemberKeyFile) {
		t.Errorf("args %v, want the member key file", pod.Spec.Containers[0].Args)
	}
	if requeue == nil || *requeue != 9*time.Minute {
		t.Errorf("requeue %v, want 9m (kept a minute ago, the window 10m)", requeue)
	}
	status := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry).Status.Warm
	if len(status) != 1 || status[0].Resuming != 1 || status[0].Ready != 1 || status[0].Wanted != 1 {
		t.Errorf("status %+v, want ready 1 of 1 wanted, 1 resuming", status)
	}
	if len(f.createdOf("secrets")) != 0 {
		t.Error("a key Secret before the member is named on its record")
	}
}

// TestResumeMemberStartedOnAHeldWorkspace: a held workspace (its sync-back gave up), which its
// claim's next claim resumes as any kept one, gets a resume member too, while no person has asked
// for its retry (TestNoResumeMember); before, it always resumed cold.
func TestResumeMemberStartedOnAHeldWorkspace(t *testing.T) {
	record := keptRecordOf("c1", t0.Add(-time.Minute))
	record.Annotations[airlockv1alpha1.AnnotationHeld] = "sync-back Job c1-sync failed 5 times"
	record.Annotations[airlockv1alpha1.AnnotationHeldTarget] = "projects/demo"
	f, _ := resumeFixture(t, 1, []*batchv1.Job{record})
	c := f.newResumeController(t)
	_, ctx := ktesting.NewTestContext(t)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	created := f.createdResumeMembers()
	if len(created) != 1 || created[0].Labels[airlockv1alpha1.LabelResumes] != record.Name {
		t.Fatalf("created resume members %d, want one on the held record %s", len(created), record.Name)
	}
}

// TestResumeMemberNamedBeforeItsKey: a resume member gets its key Secret (without which its
// container never starts) only after its record names it, by an update of the record as the
// cache shows it (conditional on its resourceVersion). A refused update (the record changed) makes
// no Secret and is tried again; a record gone deletes the member, which never starts; a record
// that names it already (a previous term) is not written again, and a Secret this process did not
// make deletes the member, as for any member.
func TestResumeMemberNamedBeforeItsKey(t *testing.T) {
	record := keptRecordOf("c1", t0.Add(-time.Minute))
	member := resumeMemberOf(record, "tools-codegen-rrrrrrrrrrrr", t0.Add(-50*time.Second), "")
	tests := map[string]struct {
		record      *batchv1.Job
		reactor     func(f *fixture) core.ReactionFunc
		secretThere bool
		wantActions []string
		wantErr     bool
	}{
		"named, then its key": {record: record,
			wantActions: []string{"update jobs " + record.Name, "create secrets " + member.Name + "-key"}},
		"the record changed": {record: record,
			reactor: func(*fixture) core.ReactionFunc {
				return func(core.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewConflict(batchv1.Resource("jobs"), record.Name, nil)
				}
			},
			wantErr: true},
		"the record gone": {record: record,
			reactor: func(*fixture) core.ReactionFunc {
				return func(core.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewNotFound(batchv1.Resource("jobs"), record.Name)
				}
			},
			wantActions: []string{"delete pods " + member.Name}},
		"named by a previous term": {record: named(record, member),
			wantActions: []string{"create secrets " + member.Name + "-key"}},
		"named by a previous term, its Secret there": {record: named(record, member), secretThere: true,
			wantActions: []string{"create secrets " + member.Name + "-key", "delete pods " + member.Name}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, _ := resumeFixture(t, 1, []*batchv1.Job{tc.record}, member)
			if tc.secretThere {
				f.secrets = append(f.secrets, sandboxpod.MemberSecret(member, "old", ""))
			}
			c := f.newResumeController(t)
			if tc.reactor != nil {
				f.kubeClient.PrependReactor("update", "jobs", tc.reactor(f))
			}
			_, ctx := ktesting.NewTestContext(t)
			_, err := c.sync(ctx, registryKey())
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync: %v, want an error %v", err, tc.wantErr)
			}
			var got []string
			for _, a := range f.actions() {
				if !strings.Contains(a, "toolregistries") {
					got = append(got, a)
				}
			}
			if !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			if tc.wantActions != nil && tc.wantActions[0] == "update jobs "+record.Name {
				updated := f.written("jobs", "").(*batchv1.Job)
				if updated.ResourceVersion != record.ResourceVersion || !workspace.NamesResumeMember(updated, member) {
					t.Errorf("record written at resourceVersion %q naming %v, want %q naming the member", updated.ResourceVersion, updated.Annotations, record.ResourceVersion)
				}
			}
		})
	}
}

// TestResumeMemberWindow: a resume member waits the resumeWindow after its workspace was kept (and
// never past the runtime's workspaceRetention), looked at again then on the fake clock; then it
// is deleted, none is started again, and the workspace stays kept (the record is not touched).
func TestResumeMemberWindow(t *testing.T) {
	for name, tc := range map[string]struct {
		retention *time.Duration
		window    *time.Duration
		wantLeft  time.Duration
	}{
		"the default window":         {wantLeft: 9 * time.Minute},
		"a window of 3m":             {window: ptr.To(3 * time.Minute), wantLeft: 2 * time.Minute},
		"a retention shorter (5m)":   {retention: ptr.To(5 * time.Minute), wantLeft: 4 * time.Minute},
		"a retention longer than it": {retention: ptr.To(48 * time.Hour), wantLeft: 9 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			record := keptRecordOf("c1", t0.Add(-time.Minute))
			member := resumeMemberOf(record, "tools-codegen-rrrrrrrrrrrr", t0.Add(-50*time.Second), "10.244.0.50")
			f, _ := resumeFixture(t, 1, []*batchv1.Job{named(record, member)}, member)
			if tc.retention != nil {
				f.runtimes[0].Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: *tc.retention}
			}
			if tc.window != nil {
				f.registries[0].Spec.Sandboxes[0].ResumeWindow = &metav1.Duration{Duration: *tc.window}
			}
			c := f.newResumeController(t, member)
			_, ctx := ktesting.NewTestContext(t)
			requeue, err := c.sync(ctx, registryKey())
			if err != nil {
				t.Fatal(err)
			}
			if requeue == nil || *requeue != tc.wantLeft {
				t.Fatalf("requeue %v, want %v", requeue, tc.wantLeft)
			}
			if d := f.deletedPods(); len(d) != 0 {
				t.Fatalf("deleted %v within the window", d)
			}
			f.clock.Step(tc.wantLeft - time.Nanosecond)
			if _, err := c.sync(ctx, registryKey()); err != nil {
				t.Fatal(err)
			}
			if d := f.deletedPods(); len(d) != 0 {
				t.Fatalf("deleted %v a nanosecond before the window's end", d)
			}
			f.clock.Step(time.Nanosecond)
			if _, err := c.sync(ctx, registryKey()); err != nil {
				t.Fatal(err)
			}
			if d := f.deletedPods(); !slices.Equal(d, []string{member.Name}) {
				t.Errorf("deleted %v at the window's end, want the member", d)
			}
			if len(f.createdResumeMembers()) != 0 {
				t.Error("a resume member started past the window")
			}
			for _, a := range f.actions() {
				if strings.Contains(a, " jobs ") {
					t.Errorf("%s: the record is the collector's, not the pool's", a)
				}
			}
		})
	}
}

// TestNoResumeMember: no member is started on a kept workspace that no claim could resume with it
// now, or beyond the pool's bound.
func TestNoResumeMember(t *testing.T) {
	keptAt := t0.Add(-time.Minute)
	tests := map[string]func(f *fixture){
		"a resumeWindow of 0": func(f *fixture) { f.registries[0].Spec.Sandboxes[0].ResumeWindow = &metav1.Duration{} },
		"no warm pool": func(f *fixture) {
			f.registries[0].Spec.Sandboxes[0].Warm = 0
		},
		"a claim of the name exists": func(f *fixture) {
			f.claims = append(f.claims, sandboxpodtest.Claim("c1", "s-c1", airlockv1alpha1.ClaimPending, t0))
		},
		"a held record whose retry was asked": func(f *fixture) {
			f.jobs[0].Annotations[airlockv1alpha1.AnnotationHeld] = "gave up"
			f.jobs[0].Annotations[airlockv1alpha1.AnnotationHeldAction] = airlockv1alpha1.HeldActionRetry
		},
		"a record being collected": func(f *fixture) { f.jobs[0].Spec.Suspend = ptr.To(false) },
		"a record being deleted": func(f *fixture) {
			f.jobs[0].DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		},
		"a record not resumable": func(f *fixture) {
			f.jobs[0].Annotations[airlockv1alpha1.AnnotationKeptResumable] = airlockv1alpha1.AnnotationValueNotResumable
		},
		"a record not the operator's": func(f *fixture) {
			f.jobs[0].Spec.Template.Spec.Containers[0].Args = []string{"sync", "--from=/"}
		},
		"a record written before records named their sandbox": func(f *fixture) {
			delete(f.jobs[0].Labels, airlockv1alpha1.LabelSandbox)
		},
		"a record of another sandbox": func(f *fixture) { f.jobs[0].Labels[airlockv1alpha1.LabelSandbox] = "other" },
		"a record of a session's workspace": func(f *fixture) {
			dir := testNamespace + "/sandboxes/sessions/0123456789abcdef0123456789abcdef"
			f.jobs[0].Name = workspace.RecordName(dir)
			f.jobs[0].Annotations[airlockv1alpha1.AnnotationKeptDir] = dir
			f.jobs[0].Spec.Template.Spec.Containers[0].Args = workspace.RecordArgs(testNamespace, dir)
		},
		"a runtime created again (another UID)": func(f *fixture) { f.runtimes[0].UID = "uid-rt-agent-again" },
		"a runtime being deleted": func(f *fixture) {
			f.runtimes[0].DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		},
		"a runtime of another registry": func(f *fixture) { f.runtimes[0].Spec.ToolRegistryRef.Name = "other" },
		"no runtime":                    func(f *fixture) { f.runtimes = nil },
		"past the window": func(f *fixture) {
			f.jobs[0].Annotations[workspace.AnnotationKeptAt] = t0.Add(-10 * time.Minute).UTC().Format(time.RFC3339)
		},
		"past the retention": func(f *fixture) {
			f.runtimes[0].Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: 30 * time.Second}
		},
		"the class gone": func(f *fixture) { f.classes = nil },
		"the bound reached": func(f *fixture) {
			other := keptRecordOf("c0", keptAt.Add(-time.Second))
			f.jobs = append(f.jobs, named(other, resumeMemberOf(other, "tools-codegen-bbbbbbbbbbbb", keptAt, "10.244.0.51")))
			f.pods = append(f.pods, resumeMemberOf(other, "tools-codegen-bbbbbbbbbbbb", keptAt, "10.244.0.51"))
		},
		"no pool policy yet": func(f *fixture) { f.netpols = nil },
		// One pod on a workspace: a member an undecided claim adopted, let go and still
		// terminating, keeps another from starting there.
		"an adopted member still on it": func(f *fixture) {
			adopted := resumeMemberOf(f.jobs[0], "tools-codegen-adoptedadopt", keptAt, "10.244.0.52")
			adopted.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			adoptBy("c9", adopted)
			f.pods = append(f.pods, adopted)
		},
	}
	for name, modify := range tests {
		t.Run(name, func(t *testing.T) {
			f, _ := resumeFixture(t, 1, []*batchv1.Job{keptRecordOf("c1", keptAt)})
			modify(f)
			c := f.newResumeController(t)
			if name == "no pool policy yet" {
				f.kubeClient.PrependReactor("create", "networkpolicies", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(corev1.Resource("networkpolicies"), "x", nil)
				})
			}
			_, ctx := ktesting.NewTestContext(t)
			_, _ = c.sync(ctx, registryKey())
			for _, pod := range f.createdResumeMembers() {
				if pod.Labels[airlockv1alpha1.LabelResumes] == keptRecordOf("c1", keptAt).Name || name == "a record of a session's workspace" {
					t.Errorf("a resume member %s started on %s", pod.Name, pod.Annotations[airlockv1alpha1.AnnotationResumesDir])
				}
			}
		})
	}
}

// TestResumeMemberGoesWithItsWorkspace: an idle resume member is deleted once its workspace is
// not one to wait on: its record taken (gone), written again (another UID), collected, or naming
// another member that exists; it stays while a claim of the name exists (that claim adopts it, or
// deletes it before resuming cold).
func TestResumeMemberGoesWithItsWorkspace(t *testing.T) {
	record := keptRecordOf("c1", t0.Add(-time.Minute))
	member := resumeMemberOf(record, "tools-codegen-rrrrrrrrrrrr", t0.Add(-50*time.Second), "10.244.0.50")
	other := resumeMemberOf(record, "tools-codegen-ssssssssssss", t0.Add(-40*time.Second), "10.244.0.51")
	tests := map[string]struct {
		records  []*batchv1.Job
		pods     []*corev1.Pod
		claims   []*airlockv1alpha1.SandboxClaim
		deleted  []string
		noCreate bool
	}{
		"its record taken": {deleted: []string{member.Name}},
		"its record written again": {records: []*batchv1.Job{with(named(record, member), func(j *batchv1.Job) { j.UID = "uid-again" })},
			deleted: []string{member.Name}},
		"its record collected": {records: []*batchv1.Job{with(named(record, member), func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(false) })},
			deleted: []string{member.Name}},
		"its record naming another member": {records: []*batchv1.Job{named(record, other)}, pods: []*corev1.Pod{other},
			deleted: []string{member.Name}},
		"a claim of the name": {records: []*batchv1.Job{named(record, member)},
			claims: []*airlockv1alpha1.SandboxClaim{sandboxpodtest.Claim("c1", "s-c1", airlockv1alpha1.ClaimPending, t0)}},
		"adopted": {records: []*batchv1.Job{named(record, member)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := member.DeepCopy()
			if name == "adopted" {
				adoptBy("c1", pod)
			}
			f, _ := resumeFixture(t, 2, tc.records, append([]*corev1.Pod{pod}, tc.pods...)...)
			f.claims = append(f.claims, tc.claims...)
			c := f.newResumeController(t, append([]*corev1.Pod{pod}, tc.pods...)...)
			_, ctx := ktesting.NewTestContext(t)
			if _, err := c.sync(ctx, registryKey()); err != nil {
				t.Fatal(err)
			}
			if got := f.deletedPods(); !slices.Equal(got, tc.deleted) {
				t.Errorf("deleted %v, want %v", got, tc.deleted)
			}
		})
	}
}

// with returns a copy of obj changed by mutate.
func with[T runtime.Object](obj T, mutate func(T)) T {
	obj = obj.DeepCopyObject().(T)
	mutate(obj)
	return obj
}

// TestResumeMembersNewestFirst: beyond the bound (the pool's size bound, apart from the pool's
// members) the newest kept workspaces get a member: the likeliest to be resumed soon.
func TestResumeMembersNewestFirst(t *testing.T) {
	oldest, middle, newest := keptRecordOf("c1", t0.Add(-3*time.Minute)), keptRecordOf("c2", t0.Add(-2*time.Minute)), keptRecordOf("c3", t0.Add(-time.Minute))
	f, _ := resumeFixture(t, 2, []*batchv1.Job{oldest, middle, newest})
	c := f.newResumeController(t)
	_, ctx := ktesting.NewTestContext(t)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range f.createdResumeMembers() {
		got = append(got, p.Labels[airlockv1alpha1.LabelResumes])
	}
	if want := []string{newest.Name, middle.Name}; !slices.Equal(got, want) {
		t.Errorf("members for %v, want %v (the newest two)", got, want)
	}
	// Their creations are expected until the cache shows them: the next sync makes no more.
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if n := len(f.createdResumeMembers()); n != 2 {
		t.Errorf("%d members after a second sync over a cache without them, want 2", n)
	}
}

// TestMembersIdleLeavesResumeMembersOut: the claim controller's lookups: Idle never returns a
// resume member; Resuming returns those of the record by name and UID only.
func TestMembersIdleLeavesResumeMembersOut(t *testing.T) {
	reg := warmRegistry(1)
	record := keptRecordOf("c1", t0.Add(-time.Minute))
	resume := resumeMemberOf(record, "tools-codegen-rrrrrrrrrrrr", t0, "10.244.0.50")
	ordinary := warmMember(reg, "tools-codegen-oooooooooooo", testRecord(), t0, "10.244.0.40")
	client := k8sfake.NewClientset()
	pods := informers.NewSharedInformerFactory(client, 0).Core().V1().Pods()
	for _, p := range []*corev1.Pod{resume, ordinary} {
		if err := pods.Informer().GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	m := Members{Pods: pods.Lister()}
	idle, err := m.Idle(reg, "codegen", testRecord())
	if err != nil || len(idle) != 1 || idle[0].Name != ordinary.Name {
		t.Errorf("Idle %v (%v), want only the ordinary member", names(idle), err)
	}
	got, err := m.Resuming(reg, "codegen", testRecord(), record)
	if err != nil || len(got) != 1 || got[0].Name != resume.Name {
		t.Errorf("Resuming %v (%v), want the resume member", names(got), err)
	}
	again := with(record, func(j *batchv1.Job) { j.UID = "uid-again" })
	if got, _ := m.Resuming(reg, "codegen", testRecord(), again); len(got) != 0 {
		t.Errorf("Resuming a record of the same name written again: %v, want none", names(got))
	}
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}
