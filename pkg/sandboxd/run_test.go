package sandboxd

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

func TestRunRefusesBadConfig(t *testing.T) {
	ws := t.TempDir()
	file := filepath.Join(ws, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		cfg  Config
		want string
	}{
		"no listen address":   {cfg: Config{Workspace: ws}, want: "listen address"},
		"bad listen address":  {cfg: Config{Listen: "127.0.0.1:http-nope", Workspace: ws}, want: "listen on"},
		"missing workspace":   {cfg: Config{Listen: "127.0.0.1:0", Workspace: filepath.Join(ws, "nope")}, want: "workspace"},
		"workspace is a file": {cfg: Config{Listen: "127.0.0.1:0", Workspace: file}, want: "not a directory"},
		"unknown tool":        {cfg: Config{Listen: "127.0.0.1:0", Workspace: ws, AllowedTools: []string{"Read", "Exec"}}, want: `"Exec"`},
		"missing token file":  {cfg: Config{Listen: "127.0.0.1:0", Workspace: ws, AuthTokenFile: filepath.Join(ws, "nope")}, want: "auth token file"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			err := Run(ctx, tt.cfg)
			sandboxdtest.WantErrContaining(t, err, tt.want)
		})
	}
}

// TestRunReturnsNilWhenCancelled: the exported Run shuts down cleanly when its context ends.
func TestRunReturnsNilWhenCancelled(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Listen: "127.0.0.1:0", Workspace: t.TempDir(), ShutdownGrace: time.Second})
	}()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Run did not return")
	}
}

// TestRunRefusedConfigReleasesItsPort: Run listens before it builds the server (so that the
// kubelet's first readiness probe, a few milliseconds after the container starts, is not
// refused); a config the server then refuses closes that listener: the port is free again.
func TestRunRefusedConfigReleasesItsPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ws := t.TempDir()
	for name, cfg := range map[string]Config{
		"missing workspace":  {Listen: addr, Workspace: filepath.Join(ws, "nope")},
		"unknown tool":       {Listen: addr, Workspace: ws, AllowedTools: []string{"Exec"}},
		"missing token file": {Listen: addr, Workspace: ws, AuthTokenFile: filepath.Join(ws, "nope")},
	} {
		if err := Run(ctx, cfg); err == nil {
			t.Fatalf("%s: Run = nil, want an error", name)
		}
		again, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s: the port %s after Run refused the config: %v, want it free", name, addr, err)
		}
		if err := again.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
