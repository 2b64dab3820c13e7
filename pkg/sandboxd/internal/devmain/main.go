// Command devmain runs sandboxd.Run with the flags of `airlock sandboxd`.
//
// It is test scaffolding for e2e/mcpclients while the root airlock command
// (pkg/cmd) cannot run sandboxd yet; the e2e helper builds the real binary
// whenever the repository has a main.go, and this one only otherwise.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/sandboxd"
)

func main() {
	var cfg sandboxd.Config
	var allowed string
	fs := flag.NewFlagSet("sandboxd", flag.ExitOnError)
	klog.InitFlags(fs)
	fs.StringVar(&cfg.Listen, "listen", ":8080", "address to listen on")
	fs.StringVar(&cfg.Workspace, "workspace", "/workspace", "workspace directory")
	fs.BoolVar(&cfg.ReadOnly, "readonly", false, "serve only the non-mutating tools")
	fs.StringVar(&allowed, "allowed-tools", "", "comma-separated tools to serve (default all)")
	fs.StringVar(&cfg.AuthTokenFile, "auth-token-file", "", "file holding the bearer token MCP requests need")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 10*time.Second, "shutdown grace period")
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "sandboxd" {
		args = args[1:]
	}
	_ = fs.Parse(args)
	if allowed != "" {
		cfg.AllowedTools = strings.Split(allowed, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := sandboxd.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd:", err)
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
