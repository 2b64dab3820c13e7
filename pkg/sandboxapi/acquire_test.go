package sandboxapi

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/attestation"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// TestAcquireCreatesClaim: the claim the API creates, for each kind of workspace.
func TestAcquireCreatesClaim(t *testing.T) {
	name := claimname.For(testRuntime, testSession, testHandle)
	tests := map[string]struct {
		entry            airlockv1alpha1.RegistrySandbox
		wantWorkspaceDir string
		wantMountRole    string
	}{
		"claim workspace": {
			entry:            airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen", TargetPath: "out/codegen"},
			wantWorkspaceDir: testNS + "/sandboxes/" + name + "-" + uidHash("rt-uid"),
		},
		"session workspace": {
			entry:            airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen", TargetPath: "out/codegen", Workspace: airlockv1alpha1.WorkspaceSession},
			wantWorkspaceDir: testNS + "/sandboxes/sessions/" + workspace.SessionDirName(testRuntime, "rt-uid", testSession, testHandle),
		},
		"mount role": {
			entry:            airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen", TargetPath: "out/codegen", MountRole: "repo"},
			wantWorkspaceDir: "content/repo",
			wantMountRole:    "repo",
		},
	}
	for tname, tc := range tests {
		t.Run(tname, func(t *testing.T) {
			f := newFixture(t, newRuntime(), newRegistry(tc.entry), newClass("codegen"))
			rec := f.acquire(0)
			if rec.Code != http.StatusAccepted {
				t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
			}
			if got := decodeBody[client.AcquireResponse](t, rec); got.Claim != name || got.Phase != "Pending" {
				t.Errorf("answer %+v", got)
			}
			c := f.apiClaim(name)
			wantLabels := map[string]string{
				airlockv1alpha1.LabelRuntime:     testRuntime,
				airlockv1alpha1.LabelSandbox:     "codegen",
				airlockv1alpha1.LabelSessionHash: claimname.SessionHash(testSession),
				airlockv1alpha1.LabelClaimShard:  name[len(name)-1:],
			}
			if diff := cmp.Diff(wantLabels, c.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			wantSpec := airlockv1alpha1.SandboxClaimSpec{
				RuntimeName: testRuntime, RuntimeUID: "rt-uid", Session: testSession, Handle: testHandle, Sandbox: "codegen",
				ClassName: "codegen", TargetPath: "out/codegen", WorkspaceDir: tc.wantWorkspaceDir, MountRole: tc.wantMountRole,
			}
			if diff := cmp.Diff(wantSpec, c.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			owner := metav1.GetControllerOf(c)
			if owner == nil || owner.Kind != "AgentRuntime" || owner.Name != testRuntime || owner.UID != "rt-uid" ||
				owner.BlockOwnerDeletion == nil || !*owner.BlockOwnerDeletion {
				t.Errorf("controller reference %+v", owner)
			}
		})
	}
}

// TestAcquireSessionWorkspace: with `workspace: session`, two handles of one session get two
// directories (two live pods never write one tree), and the replacement of a Failed claim gets
// its predecessor's directory (and so the session's files of that handle).
func TestAcquireSessionWorkspace(t *testing.T) {
	entry := airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen", MaxInstances: 10, TargetPath: "out/codegen", Workspace: airlockv1alpha1.WorkspaceSession}

	t.Run("two handles of one session", func(t *testing.T) {
		f := newFixture(t, newRuntime(), newRegistry(entry), newClass("codegen"))
		dirs := map[string]string{}
		for _, handle := range []string{"codegen/default", "codegen/second"} {
			rec := f.do("/v1/sandboxes/acquire", tokenAgent, acquireBody(testSession, handle, 0))
			if rec.Code != http.StatusAccepted {
				t.Fatalf("acquire %s: status %d: %s", handle, rec.Code, rec.Body.String())
			}
			dirs[handle] = f.apiClaim(claimname.For(testRuntime, testSession, handle)).Spec.WorkspaceDir
		}
		if dirs["codegen/default"] == dirs["codegen/second"] {
			t.Errorf("two handles of one session share the directory %q", dirs["codegen/default"])
		}
		for handle, dir := range dirs {
			if want := testNS + "/sandboxes/sessions/" + workspace.SessionDirName(testRuntime, "rt-uid", testSession, handle); dir != want {
				t.Errorf("handle %s: directory %q, want %q", handle, dir, want)
			}
		}
	})

	t.Run("a replacement gets its predecessor's directory", func(t *testing.T) {
		old := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimFailed)
		// Named as an older operator named it (sha256 of session and handle only): the
		// replacement keeps it, whatever the name of today's would be.
		old.Spec.WorkspaceDir = testNS + "/sandboxes/sessions/0123456789abcdef0123456789abcdef"
		old.Status.Reason = "ImagePullBackOff"
		f := newFixture(t, newRuntime(), newRegistry(entry), newClass("codegen"), old)
		rec := f.acquire(0)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		repl := f.apiClaim(claimname.Replacement(old.Name))
		if repl.Spec.Replaces != old.Name || repl.Spec.WorkspaceDir != old.Spec.WorkspaceDir {
			t.Errorf("replacement of %s: replaces %q directory %q, want its predecessor's %q", old.Name, repl.Spec.Replaces, repl.Spec.WorkspaceDir, old.Spec.WorkspaceDir)
		}
	})
}

// TestAcquireBound: a Bound claim answers 200 at once, with one address per class port and the
// per-claim Authorization header derived from the key; nothing is written or read but the cache.
func TestAcquireBound(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	f := newFixture(t, append(baseObjects(), c)...)
	rec := f.acquire(30)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	want := client.AcquireResponse{
		Claim: c.Name, Phase: "Bound",
		Addresses: []client.Address{{Name: "mcp", URL: c.Status.Addresses[0].URL}, {Name: "debug", URL: c.Status.Addresses[1].URL}},
		Headers:   map[string]string{"Authorization": "Bearer " + claimToken(t, c)},
		// The runtime's idle timeout, so that a client renews in time.
		IdleTimeoutSeconds: 600, // the fixture runtime's 10m
	}
	if diff := cmp.Diff(want, decodeBody[client.AcquireResponse](t, rec)); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	if writes := writeActions(f.airlock.Actions()); len(writes) != 0 {
		t.Errorf("writes: %v", writes)
	}
}

// TestAcquireBoundCarriesTheAttestation: the claim's signed isolation statement, as the
// operator wrote it into its status before Bound, is the 200's attestation, unchanged.
func TestAcquireBoundCarriesTheAttestation(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	c.Status.Isolation = &airlockv1alpha1.ClaimIsolation{Kernel: "Dedicated",
		Attestation: &airlockv1alpha1.IsolationAttestation{Statement: "c3RhdGVtZW50", Signature: "c2lnbmF0dXJl", KeyID: "0123456789abcdef"}}
	f := newFixture(t, append(baseObjects(), c)...)
	rec := f.acquire(30)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	got := decodeBody[client.AcquireResponse](t, rec).Attestation
	if got == nil || *got != (attestation.Attestation{Statement: "c3RhdGVtZW50", Signature: "c2lnbmF0dXJl", KeyID: "0123456789abcdef"}) {
		t.Errorf("attestation %+v", got)
	}
}

// TestAcquireBoundWarm: a claim that adopted a warm member is answered warm, with the member's
// adoption token, which carries the claim's UID and its recorded tool list and verifies only with
// that member's key; a warm claim without a recorded tool list gets 503, never a token.
func TestAcquireBoundWarm(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	c.Status.Frozen = &airlockv1alpha1.FrozenSandbox{AllowedTools: []airlockv1alpha1.ToolName{"Read", "Bash"}}
	c.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: "tools-codegen-abcdefghijkl", WorkspaceDir: c.Namespace + "/sandboxes/warm/tools-codegen-abcdefghijkl"}
	f := newFixture(t, append(baseObjects(), c)...)
	rec := f.acquire(30)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	got := decodeBody[client.AcquireResponse](t, rec)
	if !got.Warm {
		t.Error("the answer of a claim that adopted a warm member does not say warm")
	}
	token, ok := strings.CutPrefix(got.Headers["Authorization"], "Bearer ")
	if !ok {
		t.Fatalf("Authorization %q", got.Headers["Authorization"])
	}
	if token == claimToken(t, c) {
		t.Fatal("a warm claim got its cold token: the member would refuse it")
	}
	key, err := claimtoken.MemberKey(testKey, c.Namespace, c.Status.Warm.Member)
	if err != nil {
		t.Fatal(err)
	}
	adoption, err := claimtoken.VerifyAdoption(key, token)
	if err != nil {
		t.Fatalf("the token does not verify with the member's key: %v", err)
	}
	if adoption.ClaimUID != c.UID || !slices.Equal(adoption.Tools, []string{"Bash", "Read"}) {
		t.Errorf("adoption = %+v, want the claim's UID %s and tools [Bash Read]", adoption, c.UID)
	}
	other, err := claimtoken.MemberKey(testKey, c.Namespace, "tools-codegen-mnopqrstuvwx")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claimtoken.VerifyAdoption(other, token); err == nil {
		t.Error("the token verifies with another member's key")
	}

	noRecord := c.DeepCopy()
	noRecord.Status.Frozen = nil
	f = newFixture(t, append(baseObjects(), noRecord)...)
	if rec := f.acquire(30); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("warm claim without a record: status %d, want 503: %s", rec.Code, rec.Body.String())
	}
}

// TestAcquireCreatedClaimAnsweredFromCache: a claim the acquire created itself is answered from
// the Bound the informer shows, without reading it again from the API server (no close of it can
// precede the request); a claim that existed before the acquire is read again (TestAcquireBound's
// fixture has it, and a close on another replica may not be in this cache yet).
func TestAcquireCreatedClaimAnsweredFromCache(t *testing.T) {
	for _, created := range []bool{true, false} {
		t.Run(map[bool]string{true: "created", false: "existing"}[created], func(t *testing.T) {
			objs := baseObjects()
			var existing *airlockv1alpha1.SandboxClaim
			if !created {
				existing = existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBinding)
				objs = append(objs, existing)
			}
			f := newFixture(t, objs...)
			// The API server gives a created claim its UID.
			f.airlock.PrependReactor("create", "sandboxclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
				a.(k8stesting.CreateAction).GetObject().(*airlockv1alpha1.SandboxClaim).UID = "uid-made-by-the-acquire"
				return false, nil, nil
			})
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- f.acquire(30) }()
			f.awaitWaiting()
			c := existing
			if created {
				c = f.apiClaim(claimname.For(testRuntime, testSession, testHandle))
				if c.UID != "uid-made-by-the-acquire" {
					t.Fatalf("created claim UID %q", c.UID)
				}
				c.ResourceVersion = "1"
				f.setClaim(c)
				f.awaitWaiting()
			}
			bound := bumped(c, func(c *airlockv1alpha1.SandboxClaim) {
				c.Status.Phase = airlockv1alpha1.ClaimBound
				c.Status.Addresses = []airlockv1alpha1.ClaimAddress{{Name: "mcp", URL: "http://x:8080"}}
			})
			before := len(f.airlock.Actions()) // the test's own reads above are not the acquire's
			f.setClaim(bound)
			// The API server's copy is Bound too (the existing claim's GET reads it).
			if _, err := f.airlock.Tracker().Get(airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims"), bound.Namespace, bound.Name); err == nil {
				if err := f.airlock.Tracker().Update(airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims"), bound, bound.Namespace); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case rec := <-done:
				if rec.Code != http.StatusOK {
					t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the acquire did not answer")
			}
			gets := 0
			for _, a := range f.airlock.Actions()[before:] {
				if a.GetVerb() == "get" && a.GetResource().Resource == "sandboxclaims" {
					gets++
				}
			}
			if created && gets != 0 {
				t.Errorf("the claim this acquire created was read again (%d GETs)", gets)
			}
			if !created && gets != 1 {
				t.Errorf("an existing claim was read %d times from the API server, want 1", gets)
			}
		})
	}
}

// TestAcquireWaitsForBind: the acquire waits, woken by informer events only, through Pending and
// Binding, until the claim is Bound and it can answer 200.
func TestAcquireWaitsForBind(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.acquire(30) }()

	f.awaitWaiting()
	created := f.apiClaim(claimname.For(testRuntime, testSession, testHandle))
	created.ResourceVersion = "1"
	f.setClaim(created) // the informer sees the new claim
	f.awaitWaiting()
	binding := bumped(created, func(c *airlockv1alpha1.SandboxClaim) { c.Status.Phase = airlockv1alpha1.ClaimBinding })
	f.setClaim(binding)
	f.awaitWaiting()
	bound := bumped(binding, func(c *airlockv1alpha1.SandboxClaim) {
		c.Status.Phase = airlockv1alpha1.ClaimBound
		c.Status.Addresses = []airlockv1alpha1.ClaimAddress{{Name: "mcp", URL: "http://x:8080"}}
	})
	f.setClaim(bound)

	select {
	case rec := <-done:
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		got := decodeBody[client.AcquireResponse](t, rec)
		if got.Headers["Authorization"] != "Bearer "+claimToken(t, bound) || len(got.Addresses) != 1 {
			t.Errorf("answer %+v", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the acquire did not answer")
	}
	if n := f.server.waiters.count(testNS + "/" + created.Name); n != 0 {
		t.Errorf("%d waiters left registered", n)
	}
}

// TestAcquireWaitTimesOut: when waitSeconds passes on the injected clock, 202 with the phase.
func TestAcquireWaitTimesOut(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimQueued)
	f := newFixture(t, append(baseObjects(), c)...)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.acquire(5) }()
	f.awaitWaiting()
	f.clock.Step(4 * time.Second)
	select {
	case rec := <-done:
		t.Fatalf("answered before waitSeconds: %d", rec.Code)
	default:
	}
	f.clock.Step(time.Second)
	rec := f.result(done)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	if got := decodeBody[client.AcquireResponse](t, rec); got.Claim != c.Name || got.Phase != "Queued" {
		t.Errorf("answer %+v", got)
	}
}

// TestAcquireRefusedByLeader: a waiting acquire whose claim the leader refuses answers 429 with
// the claim's reason.
func TestAcquireRefusedByLeader(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimPending)
	f := newFixture(t, append(baseObjects(), c)...)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.acquire(30) }()
	f.awaitWaiting()
	f.setClaim(bumped(c, func(c *airlockv1alpha1.SandboxClaim) {
		c.Status.Phase, c.Status.Reason = airlockv1alpha1.ClaimRefused, "MaxInstances"
	}))
	wantError(t, f.result(done), http.StatusTooManyRequests, client.CodeRefused, "MaxInstances")
}

// TestAcquireFastRefusal: the limits are checked against this replica's cache with the shared
// admission function, before anything is created.
func TestAcquireFastRefusal(t *testing.T) {
	tests := map[string]struct {
		objects    []runtime.Object
		wantStatus int
		wantCode   string
		wantReason string
	}{
		"maxPerSession": {
			objects: []runtime.Object{
				newRuntime(func(rt *airlockv1alpha1.AgentRuntime) { rt.Spec.Sandbox.MaxPerSession = 2 }), newRegistry(), newClass("codegen"),
				existingClaim(testSession, "codegen/one", airlockv1alpha1.ClaimBound),
				existingClaim(testSession, "codegen/two", airlockv1alpha1.ClaimPending),
				existingClaim("another-session", "codegen/three", airlockv1alpha1.ClaimBound),
			},
			wantStatus: http.StatusTooManyRequests, wantCode: client.CodeRefused, wantReason: "MaxPerSession",
		},
		"maxInstances": {
			objects: []runtime.Object{
				newRuntime(), newRegistry(airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen", MaxInstances: 1}), newClass("codegen"),
				existingClaim("another-session", testHandle, airlockv1alpha1.ClaimQueued),
			},
			wantStatus: http.StatusTooManyRequests, wantCode: client.CodeRefused, wantReason: "MaxInstances",
		},
		"refused and replaced claims do not count": {
			objects: []runtime.Object{
				newRuntime(func(rt *airlockv1alpha1.AgentRuntime) { rt.Spec.Sandbox.MaxPerSession = 1 }), newRegistry(), newClass("codegen"),
				existingClaim(testSession, "codegen/one", airlockv1alpha1.ClaimRefused),
				func() *airlockv1alpha1.SandboxClaim {
					c := existingClaim(testSession, "codegen/two", airlockv1alpha1.ClaimFailed)
					c.Status.ReplacedBy = "x"
					return c
				}(),
			},
			wantStatus: http.StatusAccepted,
		},
		"disabled": {
			objects:    []runtime.Object{newRuntime(func(rt *airlockv1alpha1.AgentRuntime) { rt.Spec.Sandbox.Enabled = false }), newRegistry(), newClass("codegen")},
			wantStatus: http.StatusConflict, wantCode: client.CodeDisabled,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.objects...)
			rec := f.acquire(0)
			if tc.wantCode == "" {
				if rec.Code != tc.wantStatus {
					t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
				}
				return
			}
			wantError(t, rec, tc.wantStatus, tc.wantCode, tc.wantReason)
			if creates := actionsOf(f.airlock.Actions(), "create"); len(creates) != 0 {
				t.Errorf("a refused acquire created: %v", creates)
			}
		})
	}
}

// TestAcquireNotFound: 404 for each missing piece, before anything is created.
func TestAcquireNotFound(t *testing.T) {
	tests := map[string]struct {
		objects []runtime.Object
		handle  string
	}{
		"registry missing": {objects: []runtime.Object{newRuntime(), newClass("codegen")}},
		"sandbox missing":  {objects: baseObjects(), handle: "other/default"},
		"class missing":    {objects: []runtime.Object{newRuntime(), newRegistry()}},
		"no connection for the mount role": {objects: []runtime.Object{
			newRuntime(), newRegistry(airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen", MountRole: "docs"}), newClass("codegen"),
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.objects...)
			handle := testHandle
			if tc.handle != "" {
				handle = tc.handle
			}
			wantError(t, f.do("/v1/sandboxes/acquire", tokenAgent, acquireBody(testSession, handle, 0)), http.StatusNotFound, client.CodeNotFound, "")
			if creates := actionsOf(f.airlock.Actions(), "create"); len(creates) != 0 {
				t.Errorf("created: %v", creates)
			}
		})
	}
}

// TestAcquireReplacesFailedClaim: a Failed claim gets one replacement, whose spec.replaces makes
// the Failed claim replaced (the leader writes its replacedBy): the API writes nothing on the
// Failed claim, and its fast check does not count both under maxPerSession (here 1). A
// replacement that fails too is 502 with its reason.
func TestAcquireReplacesFailedClaim(t *testing.T) {
	entry := airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen-v2", TargetPath: "out/v2", MountRole: "repo"}
	old := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimFailed)
	old.Spec.MountRole, old.Spec.WorkspaceDir = "repo", "content/old-repo"
	old.Status.Reason = "ImagePullBackOff"
	onePerSession := func(rt *airlockv1alpha1.AgentRuntime) { rt.Spec.Sandbox.MaxPerSession = 1 }
	f := newFixture(t, newRuntime(onePerSession), newRegistry(entry), newClass("codegen-v2"), old)

	rec := f.acquire(0)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	replName := claimname.Replacement(old.Name)
	if got := decodeBody[client.AcquireResponse](t, rec); got.Claim != replName {
		t.Errorf("answer names %q, want the replacement %q", got.Claim, replName)
	}
	repl := f.apiClaim(replName)
	wantSpec := airlockv1alpha1.SandboxClaimSpec{
		RuntimeName: testRuntime, RuntimeUID: "rt-uid", Session: testSession, Handle: testHandle, Sandbox: "codegen",
		ClassName: "codegen-v2", TargetPath: "out/v2", WorkspaceDir: "content/old-repo", MountRole: "repo", Replaces: old.Name,
	}
	if diff := cmp.Diff(wantSpec, repl.Spec); diff != "" {
		t.Errorf("replacement spec (-want +got):\n%s", diff)
	}
	// One write: the replacement. Nothing on the Failed claim.
	var order []string
	for _, a := range writeActions(f.airlock.Actions()) {
		order = append(order, a.GetVerb()+"/"+a.GetSubresource())
	}
	if diff := cmp.Diff([]string{"create/"}, order); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}

	// An acquire before the cache has the replacement creates nothing more.
	if rec := f.acquire(0); rec.Code != http.StatusAccepted {
		t.Fatalf("second acquire: status %d: %s", rec.Code, rec.Body.String())
	}
	if n := len(f.createdClaims()); n != 2 {
		t.Errorf("%d claims after a second acquire, want 2", n)
	}

	// The cache catches up (the leader linked the two); the replacement fails too: 502 with the
	// operator's reason.
	linked := f.apiClaim(old.Name)
	linked.Status.ReplacedBy = replName
	f.setClaim(linked)
	repl.ResourceVersion = "1"
	repl.Status.Phase, repl.Status.Reason, repl.Status.Message = airlockv1alpha1.ClaimFailed, "CrashLoopBackOff", "back-off restarting"
	f.setClaim(repl)
	e := wantError(t, f.acquire(0), http.StatusBadGateway, client.CodeFailed, "CrashLoopBackOff")
	t.Logf("502 message: %s", e.Message)
	if n := len(f.createdClaims()); n != 2 {
		t.Errorf("%d claims, want 2: no second replacement", n)
	}
}

// TestAcquireFailedWhileWaiting: a claim that fails while an acquire waits is replaced by that
// acquire, which goes on waiting for the replacement.
func TestAcquireFailedWhileWaiting(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBinding)
	f := newFixture(t, append(baseObjects(), c)...)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.acquire(30) }()
	f.awaitWaiting()
	f.setClaim(bumped(c, func(c *airlockv1alpha1.SandboxClaim) {
		c.Status.Phase, c.Status.Reason = airlockv1alpha1.ClaimFailed, "StartupTimeout"
	}))
	f.awaitWaiting()
	repl := f.apiClaim(claimname.Replacement(c.Name))
	repl.ResourceVersion = "1"
	repl.Status.Phase = airlockv1alpha1.ClaimBound
	f.setClaim(repl)
	rec := f.result(done)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	if got := decodeBody[client.AcquireResponse](t, rec); got.Claim != repl.Name || got.Headers["Authorization"] != "Bearer "+claimToken(t, repl) {
		t.Errorf("answer %+v", got)
	}
}

// TestAcquireTokenIsPerClaim: a claim created again under the same name (another UID) gets
// another token, and the replacement's differs from the base claim's.
func TestAcquireTokenIsPerClaim(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	f := newFixture(t, append(baseObjects(), c)...)
	first := decodeBody[client.AcquireResponse](t, f.acquire(0)).Headers["Authorization"]
	again := bumped(c, func(c *airlockv1alpha1.SandboxClaim) { c.UID = "another-uid" })
	f.setClaim(again)
	second := decodeBody[client.AcquireResponse](t, f.acquire(0)).Headers["Authorization"]
	if first == "" || second == "" || first == second {
		t.Errorf("tokens %q and %q: want two distinct tokens", first, second)
	}
	if second != "Bearer "+claimToken(t, again) {
		t.Errorf("token %q is not the new claim's", second)
	}
}

// TestAcquireWithoutKeyFailsClosed: when the key cannot be read, a Bound claim's acquire is 503,
// with no Authorization header: never an empty or made-up token.
func TestAcquireWithoutKeyFailsClosed(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	f := newFixture(t, append(baseObjects(), c)...)
	f.tokens.err = claimtoken.ErrNoKey
	rec := f.acquire(30)
	wantError(t, rec, http.StatusServiceUnavailable, client.CodeUnavailable, "")
	if strings.Contains(rec.Body.String(), "Bearer") || strings.Contains(rec.Body.String(), "headers") {
		t.Errorf("answer %s carries a token", rec.Body.String())
	}
}

// TestAcquireDeletingClaim: a claim being deleted is waited out, then created afresh.
func TestAcquireDeletingClaim(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	c.DeletionTimestamp = &metav1.Time{Time: t0}
	c.Finalizers = []string{"x"}
	f := newFixture(t, append(baseObjects(), c)...)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.acquire(30) }()
	f.awaitWaiting()
	if err := f.airlock.Tracker().Delete(airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims"), testNS, c.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.claims.Delete(c); err != nil {
		t.Fatal(err)
	}
	f.claimEvents.fire(c, nil)
	f.awaitWaiting() // created again, waiting for it to bind
	if got := f.apiClaim(c.Name); got.DeletionTimestamp != nil {
		t.Error("not created afresh")
	}
	f.clock.Step(30 * time.Second)
	if rec := f.result(done); rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
}

// TestAcquireConcurrent: many concurrent identical acquires on one replica make one claim; the
// API server's AlreadyExists collapses the rest into it.
func TestAcquireConcurrent(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	const n = 50
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for range n {
		wg.Go(func() { codes <- f.acquire(0).Code })
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusAccepted {
			t.Errorf("status %d", code)
		}
	}
	if claims := f.createdClaims(); len(claims) != 1 {
		t.Fatalf("%d claims, want 1", len(claims))
	}
}

func actionsOf(actions []k8stesting.Action, verb string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range actions {
		if a.GetVerb() == verb {
			out = append(out, a)
		}
	}
	return out
}

func writeActions(actions []k8stesting.Action) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range actions {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			out = append(out, a)
		}
	}
	return out
}

// TestAcquireConcurrentInformer: concurrent identical acquires, driven by a real informer over the
// fake clientset, make one claim, wait for it, and all answer 200 when it binds.
func TestAcquireConcurrentInformer(t *testing.T) {
	f := newFixtureWithOptions(t, fixtureOptions{informer: true}, baseObjects()...)
	const n = 20
	done := make(chan *httptest.ResponseRecorder, n)
	for range n {
		go func() { done <- f.acquire(60) }()
	}
	name := claimname.For(testRuntime, testSession, testHandle)
	// Wait until the claim is in the informer's cache and every acquire has looked at it.
	for range n {
		f.awaitWaiting()
	}
	claims := f.createdClaims()
	if len(claims) != 1 || claims[0].Name != name {
		t.Fatalf("claims %v, want one named %s", claims, name)
	}
	c := claims[0].DeepCopy()
	c.ResourceVersion = "2" // the fake tracker does not bump it; the handlers skip unchanged ones
	c.Status.Phase = airlockv1alpha1.ClaimBound
	c.Status.Addresses = []airlockv1alpha1.ClaimAddress{{Name: "mcp", URL: "http://x:8080"}}
	if _, err := f.airlock.AirlockV1alpha1().SandboxClaims(testNS).UpdateStatus(f.ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range n {
		rec := f.result(done)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		if got := decodeBody[client.AcquireResponse](t, rec); got.Claim != name {
			t.Errorf("answer names %s", got.Claim)
		}
	}
	if creates := actionsOf(f.airlock.Actions(), "create"); len(creates) < 1 {
		t.Errorf("no create")
	}
}

// TestAcquireRuntimeDeleted: when the runtime goes while an acquire waits (its claims go with it
// by garbage collection), the acquire answers 404 and creates nothing more.
func TestAcquireRuntimeDeleted(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBinding)
	f := newFixture(t, append(baseObjects(), c)...)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.acquire(30) }()
	f.awaitWaiting()
	if err := f.runtimes.Delete(newRuntime()); err != nil {
		t.Fatal(err)
	}
	if err := f.airlock.Tracker().Delete(airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims"), testNS, c.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.claims.Delete(c); err != nil {
		t.Fatal(err)
	}
	f.claimEvents.fire(c, nil)
	wantError(t, f.result(done), http.StatusNotFound, client.CodeNotFound, "")
	if creates := actionsOf(f.airlock.Actions(), "create"); len(creates) != 0 {
		t.Errorf("created %v", creates)
	}
}

// TestAcquireRuntimeBeingDeleted: a runtime being deleted gets no new claim (its deletion waits
// for its claims, and one created then would keep it waiting: TestFaultSuiteAPIOnly): 404, and
// nothing created.
func TestAcquireRuntimeBeingDeleted(t *testing.T) {
	rt := newRuntime()
	rt.DeletionTimestamp = &metav1.Time{Time: t0}
	rt.Finalizers = []string{airlockv1alpha1.FinalizerWorkspaces}
	f := newFixture(t, rt, newRegistry(), newClass("codegen"))
	rec := f.do("/v1/sandboxes/acquire", tokenAgent, acquireBody(testSession, testHandle, 0))
	wantError(t, rec, http.StatusNotFound, client.CodeNotFound, "")
	if !strings.Contains(rec.Body.String(), "is being deleted") {
		t.Errorf("body %s, want it to say the runtime is being deleted", rec.Body)
	}
	if creates := actionsOf(f.airlock.Actions(), "create"); len(creates) != 0 {
		t.Errorf("created %v", creates)
	}
}

// TestAcquireBoundClaimClosedOnTheAPIServer: the cache still shows the claim Bound, but a close
// (answered by another replica a moment ago) has marked it on the API server: the acquire does
// not hand out that sandbox, which is being reaped; it waits (here: 202 at once, waitSeconds 0).
func TestAcquireBoundClaimClosedOnTheAPIServer(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	f := newFixture(t, append(baseObjects(), c)...)
	closed := c.DeepCopy()
	closed.Annotations = map[string]string{airlockv1alpha1.AnnotationReapRequested: "2026-12-01T07:00:00Z"}
	f.airlock.PrependReactor("get", "sandboxclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, closed, nil
	})
	rec := f.acquire(0)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s; want 202: a sandbox its close has ended is never answered", rec.Code, rec.Body.String())
	}
}
