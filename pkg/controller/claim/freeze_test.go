package claim

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestSyncAdmitRecordsWhatItRuns: admission writes the record in the same status write as
// Binding, and the pod is built from it.
func TestSyncAdmitRecordsWhatItRuns(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	f.classes[0].Generation = 3
	f.registries[0].Spec.Sandboxes[0].AllowedTools = nil // every tool
	claim := newClaim("c1", "s1", "", t0.Add(-time.Second))
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaim()
	if got.Status.Phase != airlockv1alpha1.ClaimBinding || got.Status.Frozen == nil {
		t.Fatalf("phase %s record %v, want Binding with a record", got.Status.Phase, got.Status.Frozen)
	}
	want := sandboxpod.Freeze(f.classes[0], &f.registries[0].Spec.Sandboxes[0])
	want.SyncImage = testSyncImage // the operator's --sync-image, frozen with the rest
	if diff := cmp.Diff(want, got.Status.Frozen); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if got.Status.Frozen.ClassGeneration != 3 {
		t.Errorf("class generation %d, want 3", got.Status.Frozen.ClassGeneration)
	}
	args := f.written("pods", "").(*corev1.Pod).Spec.Containers[0].Args
	if !slicesContain(args, "--allowed-tools="+strings.Join(toolnames.All(), ",")) {
		t.Errorf("sandbox args %q: want the explicit list of every tool", args)
	}
}

// TestSyncRunningSandboxIsFrozen: once a claim is Binding or Bound, edits of its registry entry
// or class (or their removal) never reach its children; drift is repaired to the record, never
// to the live registry (a removed entry never drops --allowed-tools).
func TestSyncRunningSandboxIsFrozen(t *testing.T) {
	allowedProxy := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: "infra"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "proxy"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	tests := map[string]struct {
		phase  airlockv1alpha1.ClaimPhase
		mutate func(f *fixture)
		// wantActions are the writes; a pod created again must be the recorded one.
		wantActions []string
	}{
		"entry's allowedTools widened after Bound": {
			mutate: func(f *fixture) {
				f.registries[0].Spec.Sandboxes[0].AllowedTools = []airlockv1alpha1.ToolName{"Read", "Bash", "Write", "Edit"}
			},
		},
		"entry's allowedTools emptied (every tool) after Bound": {
			mutate: func(f *fixture) { f.registries[0].Spec.Sandboxes[0].AllowedTools = nil },
		},
		"entry removed after Bound": {
			mutate: func(f *fixture) { f.registries[0].Spec.Sandboxes = nil },
		},
		"registry deleted after Bound": {
			mutate: func(f *fixture) { f.registries = nil },
		},
		"entry removed after Bound, and the pod drifted: deleted, and created again from the record": {
			mutate: func(f *fixture) {
				f.registries[0].Spec.Sandboxes = nil
				f.pods[0].Spec.Containers[0].Args = []string{"sandboxd"}
			},
			wantActions: []string{"delete pods c1"},
		},
		"class edited after Bound: image, ports, env, allowed Services, startupTimeout": {
			mutate: func(f *fixture) {
				cl := f.classes[0]
				cl.Generation = 2
				cl.Spec.Image = "example.com/new:v2"
				cl.Spec.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 9090}}
				cl.Spec.Env = nil
				cl.Spec.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
				cl.Spec.StartupTimeout = &metav1.Duration{Duration: time.Second}
				f.allowedServices = append(f.allowedServices, allowedProxy)
			},
		},
		"class deleted after Bound": {
			mutate: func(f *fixture) { f.classes = nil },
		},
		"entry widened while Binding": {
			phase: airlockv1alpha1.ClaimBinding,
			mutate: func(f *fixture) {
				f.registries[0].Spec.Sandboxes[0].AllowedTools = nil
			},
		},
		"class edited while Binding": {
			phase: airlockv1alpha1.ClaimBinding,
			mutate: func(f *fixture) {
				f.classes[0].Generation = 2
				f.classes[0].Spec.Image = "example.com/new:v2"
				f.classes[0].Spec.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 9090}}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := bound("c1", t0.Add(-time.Minute))
			if tc.phase == airlockv1alpha1.ClaimBinding {
				claim = binding("c1", t0.Add(-time.Minute))
			}
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			if claim.Status.Phase == airlockv1alpha1.ClaimBound {
				f.pods = append(f.pods, newPod(claim, markReady)) // the running sandbox
			} else {
				f.pods = append(f.pods, newPod(claim, nil)) // starting
			}
			tc.mutate(f)
			c := f.newController(ctx)
			if _, err := c.sync(ctx, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, tc.wantActions)
			if !slices.Contains(f.actions(), "delete pods c1") {
				return
			}
			// The deletion is seen: the pod is created again, from the record.
			f.pods = nil
			c = f.newController(ctx)
			if _, err := c.sync(ctx, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			want := sandboxpod.ClaimPod(claim, testRecord())
			sandboxpod.UseTokenSecret(want, tokenSecretName(claim))
			got, ok := f.written("pods", "").(*corev1.Pod)
			if !ok {
				t.Fatalf("no pod created again; actions %q", f.actions())
			}
			if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
				t.Errorf("the pod created again is not the recorded one (-record +written):\n%s", diff)
			}
			if args := got.Spec.Containers[0].Args; !slicesContain(args, "--allowed-tools=Read,Bash") {
				t.Errorf("args %q lack the recorded --allowed-tools", args)
			}
		})
	}
}

// TestSyncReplacementGetsCurrentEntryAndClass: a replacement is admitted and frozen on its own,
// from the entry and class as they are now, not from its predecessor's record.
func TestSyncReplacementGetsCurrentEntryAndClass(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	original := binding("c1", t0.Add(-10*time.Minute))
	original.Status.Phase = airlockv1alpha1.ClaimFailed
	original.Status.Reason = "ImagePullBackOff"
	original.Status.ReplacedBy = "c1-r1"
	// Since the original was admitted: the image was fixed and the tools narrowed.
	f.classes[0].Generation = 2
	f.classes[0].Spec.Image = "example.com/fixed:v2"
	f.registries[0].Spec.Sandboxes[0].AllowedTools = []airlockv1alpha1.ToolName{"Read", "Grep"}
	replacement := newClaim("c1-r1", original.Spec.Session, "", t0.Add(-time.Second))
	replacement.Spec.Replaces = "c1"
	f.claims = append(f.claims, original, replacement)
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaimNamed("c1-r1")
	if got.Status.Phase != airlockv1alpha1.ClaimBinding || got.Status.Frozen == nil {
		t.Fatalf("replacement phase %s record %v, want Binding with a record", got.Status.Phase, got.Status.Frozen)
	}
	r := got.Status.Frozen
	if r.Image != "example.com/fixed:v2" || r.ClassGeneration != 2 || !cmp.Equal(r.AllowedTools, []airlockv1alpha1.ToolName{"Read", "Grep"}) {
		t.Errorf("replacement's record: image %s generation %d tools %v; want the current class and entry", r.Image, r.ClassGeneration, r.AllowedTools)
	}
	p := f.written("pods", "").(*corev1.Pod)
	ctr := p.Spec.Containers[0]
	if p.Name != "c1-r1" || ctr.Image != "example.com/fixed:v2" || !slicesContain(ctr.Args, "--allowed-tools=Read,Grep") {
		t.Errorf("replacement's pod %s: image %s args %q", p.Name, ctr.Image, ctr.Args)
	}
}

// TestSyncClaimsWithoutRecord: claims admitted by an operator before records existed. A Binding
// one is recorded from the class and entry as they are now (its pod is not ready, nothing runs
// yet); a Bound one is left exactly as it is, never rebuilt from the live class or registry.
func TestSyncClaimsWithoutRecord(t *testing.T) {
	t.Run("binding: recorded now", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		claim := binding("c1", t0.Add(-time.Minute))
		claim.Status.Frozen = nil
		f.claims = append(f.claims, claim)
		c := f.newController(ctx)
		if _, err := c.sync(ctx, keyOf(claim)); err != nil {
			t.Fatal(err)
		}
		got := f.writtenClaim()
		want := testRecord()
		want.SyncImage = testSyncImage
		if diff := cmp.Diff(want, got.Status.Frozen); diff != "" || got.Status.Phase != airlockv1alpha1.ClaimBinding {
			t.Errorf("phase %s; record (-want +got):\n%s", got.Status.Phase, diff)
		}
	})
	t.Run("binding, entry gone: Failed, nothing built", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		f.registries[0].Spec.Sandboxes = nil
		claim := binding("c1", t0.Add(-time.Minute))
		claim.Status.Frozen = nil
		f.claims = append(f.claims, claim)
		c := f.newController(ctx)
		if _, err := c.sync(ctx, keyOf(claim)); err != nil {
			t.Fatal(err)
		}
		checkActions(t, f, []string{"update sandboxclaims/status c1"})
		if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != "UnknownSandbox" {
			t.Errorf("status %s/%s, want Failed/UnknownSandbox", got.Status.Phase, got.Status.Reason)
		}
	})
	t.Run("bound: left as it is", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		claim := bound("c1", t0.Add(-time.Minute))
		f.withChildren(claim)
		claim.Status.Frozen = nil
		f.claims = append(f.claims, claim)
		f.registries[0].Spec.Sandboxes = nil
		f.pods = append(f.pods, newPod(claim, func(p *corev1.Pod) {
			markReady(p)
			p.Spec.Containers[0].Image = "example.com/edited:v1"
		}))
		c := f.newController(ctx)
		if _, err := c.sync(ctx, keyOf(claim)); err != nil {
			t.Fatal(err)
		}
		checkActions(t, f, nil)
	})
}

// TestSyncBindingChildrenFailUntilStartupTimeout: a child that cannot be written (an object of
// another owner holds its name; the API server refuses it) is retried, and the claim is looked at
// again at its startupTimeout whatever the backoff, when it fails with the write's reason: it is
// never Binding forever, holding its maxConcurrent slot.
func TestSyncBindingChildrenFailUntilStartupTimeout(t *testing.T) {
	began := t0.Add(-time.Minute)
	tests := map[string]struct {
		setup       func(f *fixture)
		afterStart  func(c *Controller)
		wantReason  string
		wantMessage string
	}{
		"a foreign NetworkPolicy holds the claim's name": {
			setup: func(f *fixture) {
				f.netpols = append(f.netpols, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: testNamespace}})
			},
			wantReason:  ReasonErrResourceExists,
			wantMessage: `NetworkPolicy "c1" already exists and is not controlled by the claim`,
		},
		"the API server refuses the pod": {
			afterStart: func(c *Controller) {
				c.children.pods = &fakeObjectControl[*corev1.Pod]{
					next: c.children.pods,
					createErr: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "c1",
						field.ErrorList{field.Duplicate(field.NewPath("spec", "volumes").Index(2).Child("name"), sandboxpod.TokenVolumeName)}),
				}
			},
			wantReason:  "Invalid",
			wantMessage: "Duplicate value",
		},
		"the namespace's Pod Security level forbids the pod": {
			afterStart: func(c *Controller) {
				c.children.pods = &fakeObjectControl[*corev1.Pod]{
					next: c.children.pods,
					createErr: apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "c1",
						errors.New(`violates PodSecurity "restricted:latest": seLinuxOptions`)),
				}
			},
			wantReason:  "Forbidden",
			wantMessage: "violates PodSecurity",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", began)
			f.claims = append(f.claims, claim)
			if tc.setup != nil {
				tc.setup(f)
			}
			c := f.newController(ctx)
			if tc.afterStart != nil {
				tc.afterStart(c)
			}

			// Before the startupTimeout: an error (retried with backoff) and the time left.
			requeue, err := c.sync(ctx, keyOf(claim))
			if err == nil {
				t.Fatal("sync succeeded with a child that cannot be written")
			}
			checkRequeue(t, requeue, ptr.To(4*time.Minute))
			for _, a := range f.actions() {
				if strings.Contains(a, "sandboxclaims/status") {
					t.Errorf("status written before the startupTimeout: %v", f.actions())
				}
			}

			// At the startupTimeout: Failed with the write's reason.
			f.clock.Step(4 * time.Minute)
			f.log = nil
			requeue, err = c.sync(ctx, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, ptr.To(30*time.Minute))
			got := f.writtenClaim()
			if got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != tc.wantReason || !strings.Contains(got.Status.Message, tc.wantMessage) {
				t.Errorf("status %s/%s/%q, want Failed/%s with %q", got.Status.Phase, got.Status.Reason, got.Status.Message, tc.wantReason, tc.wantMessage)
			}
			if cond := findCondition(got, ConditionReady); cond == nil || cond.Reason != tc.wantReason {
				t.Errorf("Ready condition %+v, want reason %s", cond, tc.wantReason)
			}
		})
	}
}

func slicesContain(s []string, v string) bool { return slices.Contains(s, v) }

// TestSyncAdmitInvalidClass: a class whose volume takes the token volume's name or mount path, or
// a warm member key's mount path (one check for claims and members: sandboxpod.ClassConflict),
// cannot be built (the API server would refuse the pod): the claim is Failed when it is
// admitted, with a reason that says so, rather than after its startupTimeout.
func TestSyncAdmitInvalidClass(t *testing.T) {
	tests := map[string]airlockv1alpha1.SandboxVolume{
		"volume named like the token volume":  {Name: sandboxpod.TokenVolumeName, MountPath: "/extra", Scratch: &airlockv1alpha1.ScratchVolumeSource{}},
		"volume mounted at the token's path":  {Name: "extra", MountPath: sandboxpod.TokenMountPath, Scratch: &airlockv1alpha1.ScratchVolumeSource{}},
		"volume mounted at a warm key's path": {Name: "extra", MountPath: sandboxpod.MemberKeyMountPath, Scratch: &airlockv1alpha1.ScratchVolumeSource{}},
	}
	for name, volume := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			f.classes[0].Spec.Volumes = append(f.classes[0].Spec.Volumes, volume)
			claim := newClaim("c1", "s1", "", t0.Add(-time.Second))
			f.claims = append(f.claims, claim)
			c := f.newController(ctx)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, []string{"update sandboxclaims/status c1"})
			if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != ReasonInvalidClass {
				t.Errorf("status %s/%s %q, want Failed/%s", got.Status.Phase, got.Status.Reason, got.Status.Message, ReasonInvalidClass)
			}
		})
	}
}

// TestSyncAdmitClassShapes: a class whose args would set, repeat or swallow one of the
// operator's flags, or whose volumes would put the token or a member's key in the file tools'
// reach (sandboxpodtest.ClassShapes; the API server's rules refuse them too, but a class may
// have been stored before those rules), fails its claims at admission: InvalidClass, with a
// message naming the arg or the volume. The shapes the operator builds are admitted.
func TestSyncAdmitClassShapes(t *testing.T) {
	for _, shape := range sandboxpodtest.ClassShapes() {
		t.Run(shape.Name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			shape.ApplyTo(&f.classes[0].Spec)
			f.claims = append(f.claims, newClaim("c1", "s1", "", t0.Add(-time.Second)))
			c := f.newController(ctx)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			got := f.writtenClaim()
			switch {
			case shape.Refused == "" && got.Status.Phase == airlockv1alpha1.ClaimFailed:
				t.Errorf("refused: %s %q", got.Status.Reason, got.Status.Message)
			case shape.Refused != "" && (got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != ReasonInvalidClass || !strings.Contains(got.Status.Message, shape.Refused)):
				t.Errorf("status %s/%s %q, want Failed/%s naming %s", got.Status.Phase, got.Status.Reason, got.Status.Message, ReasonInvalidClass, shape.Refused)
			}
		})
	}
}
