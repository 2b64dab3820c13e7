package claim

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
)

// TestWorkspaceJobsRunTheRecordsSyncImage: a claim's sync-back Job and its kept workspace's
// record run the sync image its record froze at admission, not the operator's --sync-image of
// the moment (an upgrade under a running claim changes neither), and carry the claim's UID and
// shard, which the admission policy ties them to its record by. A record frozen before the image
// was (none in it) runs the operator's.
func TestWorkspaceJobsRunTheRecordsSyncImage(t *testing.T) {
	const frozenImage = "example.com/airlock-sync:frozen"
	tests := map[string]struct {
		targetPath string
		frozen     string
		wantJob    string
		wantImage  string
	}{
		"sync-back, frozen image":         {targetPath: "projects/demo", frozen: frozenImage, wantJob: "c1-sync", wantImage: frozenImage},
		"sync-back, record without image": {targetPath: "projects/demo", wantJob: "c1-sync", wantImage: testSyncImage},
		"kept record, frozen image":       {frozen: frozenImage, wantImage: frozenImage},
		"kept record, without image":      {wantImage: testSyncImage},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := bound("c1", t0.Add(-31*time.Minute))
			claim.Spec.TargetPath = tc.targetPath
			claim.Status.Frozen.SyncImage = tc.frozen
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			c := f.newController(ctx)
			if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			job, ok := f.written("jobs", "").(*batchv1.Job)
			if !ok {
				t.Fatalf("no Job written; actions %v", f.actions())
			}
			if tc.wantJob != "" && job.Name != tc.wantJob {
				t.Errorf("Job %s, want %s", job.Name, tc.wantJob)
			}
			if got := job.Spec.Template.Spec.Containers[0].Image; got != tc.wantImage {
				t.Errorf("Job %s runs %q, want %q", job.Name, got, tc.wantImage)
			}
			if job.Labels[airlockv1alpha1.LabelClaimUID] != string(claim.UID) || job.Labels[airlockv1alpha1.LabelClaimShard] != claimname.Shard(claim.Name) {
				t.Errorf("Job %s labels %v, want the claim's UID %s and shard %s", job.Name, job.Labels, claim.UID, claimname.Shard(claim.Name))
			}
		})
	}
}
