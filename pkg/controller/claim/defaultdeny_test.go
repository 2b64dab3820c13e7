package claim

import (
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// TestPodOnlyWithDefaultDeny: the claim's pod is created only once the namespace's standing
// default-deny NetworkPolicy is in place (asked of the DefaultDenyEnsurer before the create);
// when it cannot be put in place, no pod is created (fail closed) and the sync fails, to be
// retried; without an ensurer, none either.
func TestPodOnlyWithDefaultDeny(t *testing.T) {
	for name, tc := range map[string]struct {
		err     error
		none    bool
		wantPod bool
	}{
		"in place":            {wantPod: true},
		"cannot be put there": {err: errors.New("forbidden")},
		"no ensurer":          {none: true},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			f.defaultDenyErr = tc.err
			f.claims = append(f.claims, newClaim("c1", "s1", "", t0.Add(-time.Second)))
			c := f.newController(ctx)
			if tc.none {
				c.defaultDeny = nil
			}
			err := admitAndBuild(ctx, c)
			created := slices.Contains(f.actions(), "create pods c1")
			if created != tc.wantPod {
				t.Errorf("pod created: %v, want %v (actions %v, err %v)", created, tc.wantPod, f.actions(), err)
			}
			if !tc.none && !slices.Equal(f.defaultDeny.Asked(), []string{testNamespace}) {
				t.Errorf("default-deny asked for %v, want [%s]", f.defaultDeny.Asked(), testNamespace)
			}
		})
	}
}
