package sandboxd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/snapshot"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/tools"
)

// newTestToolbox returns a toolbox over a fresh workspace, and the
// workspace's path.
func newTestToolbox(t *testing.T) (*tools.Toolbox, string) {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	tb, err := tools.NewToolbox(ws)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.NewStore(filepath.Join(filepath.Dir(ws), "state"), tb.Workspace())
	if err != nil {
		t.Fatal(err)
	}
	tb.SetSnapshots(snaps)
	t.Cleanup(func() { tb.Close() })
	return tb, ws
}
