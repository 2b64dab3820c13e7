//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/client"
)

// clusterProcess returns the PID of a process of the cluster hack/e2e.sh started for this run
// (AIRLOCK_E2E_CLUSTER_DIR is its state dir, <comm>.pid its pid file), checking that it is a
// running <comm>. ok is false when the suite runs against a cluster it did not start (kind,
// AIRLOCK_E2E_USE_KUBECONFIG=1).
func clusterProcess(t *testing.T, comm string) (pid int, ok bool) {
	t.Helper()
	dir := os.Getenv("AIRLOCK_E2E_CLUSTER_DIR")
	if dir == "" {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(dir, comm+".pid"))
	if err != nil {
		t.Fatalf("the e2e cluster's %s pid file: %v", comm, err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the e2e cluster's %s pid file: %v", comm, err)
	}
	got, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(got)) != comm {
		t.Fatalf("pid %d of %s is not a running %s (%q, %v)", pid, dir, comm, got, err)
	}
	return pid, true
}

// apiServerProcess returns the PID of the run's kube-apiserver (see clusterProcess).
func apiServerProcess(t *testing.T) (pid int, ok bool) {
	t.Helper()
	return clusterProcess(t, "kube-apiserver")
}

// watchAdmitted watches the namespace's claims until ctx ends (watching again from the last
// resourceVersion whenever a watch ends, as one may across an API server outage) and reports
// every moment a session had more admitted claims than maxPerSession, or the namespace more
// Binding and Bound claims than maxConcurrent.
func watchAdmitted(ctx context.Context, ns string, maxPerSession, maxConcurrent int) (violations func() []string) {
	var (
		mu  sync.Mutex
		out []string
	)
	go func() {
		state := map[string]*airlockv1alpha1.SandboxClaim{}
		rv := ""
		for ctx.Err() == nil {
			w, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				// Too old a resourceVersion (410), or the API server not answering yet: start over
				// from a fresh list after a moment.
				rv = ""
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			for ev := range w.ResultChan() {
				c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
				if !ok {
					continue
				}
				rv = c.ResourceVersion
				if ev.Type == watch.Deleted {
					delete(state, c.Name)
				} else {
					state[c.Name] = c
				}
				perSession, running := map[string]int{}, 0
				for _, c := range state {
					if c.DeletionTimestamp != nil {
						continue
					}
					switch c.Status.Phase {
					case airlockv1alpha1.ClaimQueued:
						perSession[c.Spec.Session]++
					case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
						perSession[c.Spec.Session]++
						running++
					}
				}
				mu.Lock()
				for s, n := range perSession {
					if n > maxPerSession {
						out = append(out, fmt.Sprintf("session %s: %d admitted claims", s, n))
					}
				}
				if running > maxConcurrent {
					out = append(out, fmt.Sprintf("%d Binding or Bound claims", running))
				}
				mu.Unlock()
			}
			w.Stop()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), out...)
	}
}

// TestOperatorRidesOutAPIServerOutage: the kube-apiserver is stopped (SIGSTOP) in the middle of a
// burst of acquires made through pkg/client, for longer than the lease duration, then resumed.
// Every acquire ends 200 (the client calls again on 503), no limit is exceeded, the operator never
// exits (it lost its lease and campaigned again), and it leads again within a lease duration of
// the API server's return.
func TestOperatorRidesOutAPIServerOutage(t *testing.T) {
	apiserver, ok := apiServerProcess(t)
	if !ok {
		t.Skip("the suite runs against a cluster it did not start (AIRLOCK_E2E_CLUSTER_DIR is unset, as with AIRLOCK_E2E_USE_KUBECONFIG=1): it cannot stop that cluster's kube-apiserver")
	}
	const (
		sessions, handles = 6, 3
		maxPerSession     = handles
		maxConcurrent     = sessions * handles
		leaseDuration     = 6 * time.Second
		outage            = 2*leaseDuration - time.Second
	)
	e := newClaimEnv(t, "airlock-outage", claimEnvOptions{maxConcurrent: maxConcurrent, maxPerSession: maxPerSession, maxInstances: maxConcurrent})
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	op := startClaimOperatorWithArgs(t, e.ns, "--api-bind-address="+addr,
		"--leader-elect-lease-duration="+leaseDuration.String(),
		"--leader-elect-renew-deadline=4s",
		"--leader-elect-retry-period=500ms")
	const lease = "airlock-operator-e2e"
	var leader string
	eventually(t, 30*time.Second, "the operator to lead", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, e.ns, lease)
		leader = h
		return h != "", err
	})
	token := serviceAccountToken(t, e.ns, "agent")
	hc := apiHTTPClient(t, e.ns) // the API's CA bundle, as the operator published it, before the outage
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	violations := watchAdmitted(ctx, e.ns, maxPerSession, maxConcurrent)

	// The burst: every handle of every session at once.
	results := make(chan error, sessions*handles)
	var wg sync.WaitGroup
	for s := range sessions {
		for h := range handles {
			wg.Go(func() {
				c := client.New("https://"+addr, staticToken(token), hc)
				resp, err := c.Acquire(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: "agent",
					Session: fmt.Sprintf("s%d", s), Handle: fmt.Sprintf("codegen/h%d", h), WaitSeconds: waitSeconds(60)})
				if err == nil && resp.Phase != "Bound" {
					err = fmt.Errorf("answered %s", resp.Phase)
				}
				results <- err
			})
		}
	}
	// Mid-burst: some claims are there, not all are Bound.
	eventually(t, time.Minute, "the burst's first claims", func(ctx context.Context) (bool, error) {
		list, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) >= sessions, err
	})

	if err := syscall.Kill(apiserver, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping kube-apiserver: %v", err)
	}
	resume := sync.OnceFunc(func() {
		if err := syscall.Kill(apiserver, syscall.SIGCONT); err != nil {
			t.Errorf("resuming kube-apiserver: %v", err)
		}
	})
	t.Cleanup(resume) // whatever fails below, the cluster is not left stopped
	t.Logf("kube-apiserver (pid %d) stopped for %s", apiserver, outage)
	time.Sleep(outage) // the outage itself: longer than the lease duration
	resume()

	// Leadership returns within a lease duration of the API server's return: the Lease is
	// renewed by the same replica again (it never exited), after it lost the lease.
	eventually(t, leaseDuration, "the operator to lead again", func(ctx context.Context) (bool, error) {
		l, err := kubeClient.CoordinationV1().Leases(e.ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, nil // the API server is still catching up
		}
		log, _ := os.ReadFile(op.log)
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == leader &&
			strings.Count(string(log), "Started leading") >= 2, nil
	})
	log, _ := os.ReadFile(op.log)
	if !strings.Contains(string(log), "Lost the lease") {
		t.Errorf("the operator never lost its lease: the outage did not test a failover")
	}

	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Errorf("acquire: %v", err)
		}
	}
	select {
	case <-op.done:
		t.Fatalf("the operator exited: %v", op.exitErr)
	default:
	}
	if v := violations(); len(v) > 0 {
		t.Errorf("limits exceeded: %v", v)
	}
	list, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound := 0
	for _, c := range list.Items {
		if c.Status.Phase == airlockv1alpha1.ClaimBound {
			bound++
		}
	}
	if bound != sessions*handles || len(list.Items) != sessions*handles {
		t.Errorf("%d claims, %d Bound; want %d, all Bound", len(list.Items), bound, sessions*handles)
	}
}
