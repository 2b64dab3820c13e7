// Package version holds the build's version and commit.
//
// Both are set at link time:
//
//	go build -ldflags "\
//	  -X github.com/airlock-dev/airlock/pkg/version.version=v0.1.0 \
//	  -X github.com/airlock-dev/airlock/pkg/version.commit=$(git rev-parse HEAD)"
//
// Without them the version is "dev" and the commit is the VCS revision that the Go toolchain
// stamped into the binary, or "unknown".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; see the package comment.
var (
	version = "dev"
	commit  = "unknown"
)

// Info describes a build of airlock.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build's Info.
func Get() Info {
	return Info{
		Version:   version,
		Commit:    resolveCommit(commit, debug.ReadBuildInfo),
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// String formats the Info on one line, for logs and user agents.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}

// resolveCommit returns the commit set with -ldflags, else the VCS revision in the build info.
func resolveCommit(ldflagsCommit string, readBuildInfo func() (*debug.BuildInfo, bool)) string {
	if ldflagsCommit != "unknown" && ldflagsCommit != "" {
		return ldflagsCommit
	}
	if bi, ok := readBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}
