package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestGetDefaults(t *testing.T) {
	info := Get()
	if info.Version != "dev" {
		t.Errorf("Version = %q, want %q when not set with -ldflags", info.Version, "dev")
	}
	if info.GoVersion != runtime.Version() {
		t.Errorf("GoVersion = %q, want %q", info.GoVersion, runtime.Version())
	}
	if info.Commit == "" {
		t.Error("Commit is empty, want a revision or \"unknown\"")
	}
}

func TestResolveCommit(t *testing.T) {
	withRevision := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}, true
	}
	noBuildInfo := func() (*debug.BuildInfo, bool) { return nil, false }
	noRevision := func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{}, true }

	tests := map[string]struct {
		ldflags   string
		buildInfo func() (*debug.BuildInfo, bool)
		want      string
	}{
		"ldflags wins over build info": {ldflags: "deadbeef", buildInfo: withRevision, want: "deadbeef"},
		"build info revision":          {ldflags: "unknown", buildInfo: withRevision, want: "abc123"},
		"no build info":                {ldflags: "unknown", buildInfo: noBuildInfo, want: "unknown"},
		"build info without revision":  {ldflags: "unknown", buildInfo: noRevision, want: "unknown"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := resolveCommit(tc.ldflags, tc.buildInfo); got != tc.want {
				t.Errorf("resolveCommit(%q) = %q, want %q", tc.ldflags, got, tc.want)
			}
		})
	}
}
