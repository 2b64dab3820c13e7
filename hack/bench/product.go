package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlock-dev/airlock/pkg/client"
)

// Products the bench measures (--product): airlock through its Sandbox API, or the peer,
// kubernetes-sigs/agent-sandbox, through its SandboxClaim API (peer.go), each on a plane of its own
// that hack/bench.sh brings up (issue 40: side by side in the same run).
const (
	productAirlock = "airlock"
	productPeer    = "agent-sandbox"
)

// product is what a run measures: how a scenario's namespace is set up, how one acquire is made
// and waited for, and how its warm pool is filled and used.
type product interface {
	// process is the pid-file name of the product's controller in the plane's state dir.
	process() string
	// readyAs says what an acquire waits for, for the tables.
	readyAs() string
	// prepare creates what every namespace shares (cluster-scoped objects), once.
	prepare(ctx context.Context) error
	// setupNamespace creates namespace ns with what the scenario's acquires need, its warm pool
	// included, and returns where its acquires go.
	setupNamespace(ctx context.Context, ns string, s scenario) (target, error)
	// waitWarmReady returns once want warm members of ns are ready.
	waitWarmReady(ctx context.Context, ns string, want int32) error
	// warmBound counts the claims of namespaces that adopted a warm member.
	warmBound(ctx context.Context, namespaces []string) (int, error)
	// forget drops what the product keeps for ns (its namespace is being deleted).
	forget(ns string)
}

// newProduct returns the product named by --product.
func newProduct(o options, k kube, api *http.Client) (product, error) {
	switch o.product {
	case productAirlock:
		return &airlockProduct{kube: k, apiURL: o.apiURL, api: api}, nil
	case productPeer:
		return newPeer(k), nil
	}
	return nil, fmt.Errorf("unknown --product %q (known: %s, %s)", o.product, productAirlock, productPeer)
}

// airlockProduct acquires through airlock's Sandbox API, as a runtime does.
type airlockProduct struct {
	kube   kube
	apiURL string
	api    *http.Client // the Sandbox API (its TLS, when the URL is https://)
}

func (*airlockProduct) process() string { return "airlock" }
func (*airlockProduct) readyAs() string { return "Bound" }
func (*airlockProduct) forget(string)   {}

func (a *airlockProduct) prepare(ctx context.Context) error {
	if err := a.kube.ensureClass(ctx); err != nil {
		return fmt.Errorf("creating the SandboxClass: %w", err)
	}
	return nil
}

func (a *airlockProduct) setupNamespace(ctx context.Context, ns string, s scenario) (target, error) {
	token, err := a.kube.setupNamespace(ctx, ns, s.Warm, s.WarmPolicy)
	if err != nil {
		return target{}, err
	}
	var opts []client.Option
	if strings.HasPrefix(a.apiURL, "http://") { // an operator run with --tls-mode=none
		opts = append(opts, client.PlainHTTP())
	}
	c := client.New(a.apiURL, func() (string, error) { return token, nil }, a.api, opts...)
	return target{namespace: ns, acquire: func(ctx context.Context, session string, waitSeconds int) error {
		_, err := c.Acquire(ctx, client.AcquireRequest{
			Namespace: ns, Runtime: runtimeName, Session: session, Handle: sandboxName + "/default",
			WaitSeconds: ptrInt(waitSeconds),
		})
		return err
	}}, nil
}

func (a *airlockProduct) waitWarmReady(ctx context.Context, ns string, want int32) error {
	return a.kube.waitWarmReady(ctx, ns, want)
}

func (a *airlockProduct) warmBound(ctx context.Context, namespaces []string) (int, error) {
	return a.kube.warmBound(ctx, namespaces)
}
