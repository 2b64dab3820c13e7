package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

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
	return airlockTarget(a.apiURL, a.api, ns, token), nil
}

// airlockTarget calls the Sandbox API at apiURL as the runtime of namespace ns, with token.
func airlockTarget(apiURL string, api *http.Client, ns, token string) target {
	var opts []client.Option
	if strings.HasPrefix(apiURL, "http://") { // an operator run with --tls-mode=none
		opts = append(opts, client.PlainHTTP())
	}
	c := client.New(apiURL, func() (string, error) { return token, nil }, api, opts...)
	acquire := func(ctx context.Context, session, handle string, waitSeconds int) (acquired, error) {
		resp, err := c.Acquire(ctx, client.AcquireRequest{
			Namespace: ns, Runtime: runtimeName, Session: session, Handle: handle, WaitSeconds: ptrInt(waitSeconds),
		})
		if err != nil {
			return acquired{}, err
		}
		return acquired{warm: resp.Warm, idleTimeout: time.Duration(resp.IdleTimeoutSeconds) * time.Second}, nil
	}
	return target{
		namespace: ns,
		acquire: func(ctx context.Context, session string, waitSeconds int) error {
			_, err := acquire(ctx, session, sandboxName+"/default", waitSeconds)
			return err
		},
		sessions: &sessionCalls{
			acquire: acquire,
			renew: func(ctx context.Context, session, handle string) error {
				return c.Renew(ctx, client.RenewRequest{Namespace: ns, Runtime: runtimeName, Session: session, Handle: handle})
			},
			close: func(ctx context.Context, session string) error {
				_, err := c.CloseSession(ctx, client.SessionRequest{Namespace: ns, Runtime: runtimeName, Session: session})
				return err
			},
		},
	}
}

func (a *airlockProduct) waitWarmReady(ctx context.Context, ns string, want int32) error {
	return a.kube.waitWarmReady(ctx, ns, want)
}

func (a *airlockProduct) warmBound(ctx context.Context, namespaces []string) (int, error) {
	return a.kube.warmBound(ctx, namespaces)
}
