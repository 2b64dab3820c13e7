package sandboxd

import (
	"os"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/fakelsp"
)

// TestMain runs the test binary as a helper process when asked: the other
// MCP server of the side-by-side benchmarks, the floor server, or the fake
// language server (internal/fakelsp).
func TestMain(m *testing.M) {
	if mode := os.Getenv(fakelsp.ModeEnv); mode != "" {
		os.Exit(fakelsp.Run(mode))
	}
	if ws := os.Getenv(mcpgoServerEnv); ws != "" {
		os.Exit(runMCPGoServer(ws))
	}
	if mode := os.Getenv(floorServerEnv); mode != "" {
		os.Exit(runFloorServer(mode))
	}
	hostEvidence = fakeEvidence(nil) // no test asks this host's network
	os.Exit(m.Run())
}
