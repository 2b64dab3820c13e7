//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// apiOperator is an operator process and the address of its Sandbox API.
type apiOperator struct {
	*operatorProcess
	apiURL string
	// httpClient verifies the API with the CA bundle published in the test's namespace.
	httpClient *http.Client
}

// startAPIOperator runs an operator (leader-elected on a lease in ns) whose Sandbox API listens on
// a port the test knows, over TLS with its own CA (the default --tls-mode=self-signed), with the
// extra flags.
func startAPIOperator(t *testing.T, ns string, extra ...string) *apiOperator {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// The last --api-bind-address wins.
	p := startClaimOperatorWithArgs(t, ns, append(extra, "--api-bind-address="+addr)...)
	return &apiOperator{operatorProcess: p, apiURL: "https://" + addr, httpClient: apiHTTPClient(t, ns)}
}

// client returns a client of the operator's Sandbox API with token, that verifies the API as a
// runtime in the test's namespace does: with the CA bundle the operator publishes there. It is
// safe to call from any goroutine.
func (op *apiOperator) client(token string) *client.Client {
	return client.New(op.apiURL, staticToken(token), op.httpClient)
}

// airlockAudience is the audience the operator requires by default (--token-audiences): a
// runtime mounts a projected ServiceAccount token with it.
const airlockAudience = "airlock"

// serviceAccountToken creates a ServiceAccount (if needed) and a real token for it with airlock's
// audience through the TokenRequest API, as the kubelet does for a projected token volume.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	return requestToken(t, ns, name, []string{airlockAudience})
}

// requestToken creates a ServiceAccount (if needed) and a token for it with audiences; none
// means the API server's own, as in a pod's default token.
func requestToken(t *testing.T, ns, name string, audiences []string) string {
	t.Helper()
	ctx := context.Background()
	_, err := kubeClient.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("creating ServiceAccount %s/%s: %v", ns, name, err)
	}
	tr, err := kubeClient.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrInt64(3600), Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a token for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

func ptrInt64(v int64) *int64 { return &v }

func staticToken(token string) func() (string, error) {
	return func() (string, error) { return token, nil }
}

func waitSeconds(seconds int) *int { return &seconds }

// wantAPIError checks that err is an *client.APIError with status and code.
func wantAPIError(t *testing.T, what string, err error, status int, code string) *client.APIError {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("%s: error %v, want an API error %d %s", what, err, status, code)
	}
	if apiErr.Status != status || apiErr.Code != code || apiErr.Message == "" {
		t.Fatalf("%s: %+v, want %d %s with a message", what, apiErr, status, code)
	}
	return apiErr
}

// TestSandboxAPIAcquireRenewClose: a runtime, with its own ServiceAccount's token, acquires a
// sandbox (Bound, with its address and the per-claim Authorization header), acquires it again
// (the same claim), renews it and closes its session.
func TestSandboxAPIAcquireRenewClose(t *testing.T) {
	e := newClaimEnv(t, "airlock-api", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	op := startAPIOperator(t, e.ns)
	c := op.client(serviceAccountToken(t, e.ns, "agent"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	req := client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1", Handle: "codegen/default", WaitSeconds: waitSeconds(90)}
	got, err := c.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	name := claimname.For("agent", "session-1", "codegen/default")
	pod, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim's pod: %v", err)
	}
	wantURL := fmt.Sprintf("http://%s:8080", pod.Status.PodIP) // its pod's IP: docs/decisions.md
	if got.Claim != name || got.Phase != "Bound" || len(got.Addresses) != 1 || got.Addresses[0].URL != wantURL {
		t.Errorf("acquire answer %+v, want claim %s Bound at %s", got, name, wantURL)
	}
	secret := claimSecret(t, ctx, e.ns, name)
	if want := "Bearer " + string(secret.Data[sandboxpod.TokenKey]); got.Headers["Authorization"] != want || len(want) < 20 {
		t.Errorf("Authorization header is not the claim's token")
	}

	again, status, err := c.AcquireOnce(ctx, req)
	if err != nil || status != http.StatusOK || again.Claim != name {
		t.Errorf("second acquire: %d %+v %v", status, again, err)
	}
	if claims, _ := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{}); len(claims.Items) != 1 {
		t.Errorf("%d claims after two acquires, want 1", len(claims.Items))
	}

	if err := c.Renew(ctx, client.RenewRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1", Handle: "codegen/default"}); err != nil {
		t.Fatalf("renew: %v", err)
	}
	// Just Bound: the idle timer counts from boundAt, and a renewal within half the idle timeout
	// of it costs no write (the renewal writes before it answers, so a GET now would see one).
	if cl, err := e.getClaim(ctx, name); err != nil {
		t.Error(err)
	} else if cl.Status.LastUsedAt != nil {
		t.Errorf("lastUsedAt %v after a renewal just after Bound, want unset", cl.Status.LastUsedAt)
	}

	// An eager sandbox: sessions/open creates its claim without waiting; acquire finds it.
	registry, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eager := registry.Spec.Sandboxes[0]
	eager.Name, eager.Allocation = "lint", airlockv1alpha1.AllocationEager
	registry.Spec.Sandboxes = append(registry.Spec.Sandboxes, eager)
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Update(ctx, registry, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lint := claimname.For("agent", "session-1", "lint/default")
	eventually(t, 10*time.Second, "sessions/open to see the eager sandbox", func(ctx context.Context) (bool, error) {
		opened, err := c.OpenSession(ctx, client.SessionRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1"})
		if err != nil {
			return false, err
		}
		return len(opened.Claims) == 1 && opened.Claims[0].Claim == lint && opened.Claims[0].Handle == "lint/default", nil
	})
	if _, err := e.getClaim(ctx, lint); err != nil {
		t.Fatalf("the eager claim: %v", err)
	}
	if got, err := c.Acquire(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1", Handle: "lint/default", WaitSeconds: waitSeconds(90)}); err != nil || got.Claim != lint {
		t.Fatalf("acquire of the eager sandbox: %+v %v", got, err)
	}

	closed, err := c.CloseSession(ctx, client.SessionRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1"})
	if err != nil {
		t.Fatalf("close: %v", err)
	}
	if len(closed.Claims) != 2 {
		t.Errorf("close answer %+v, want both claims", closed)
	}
	for _, n := range []string{name, lint} {
		cl, err := e.getClaim(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cl.Annotations[airlockv1alpha1.AnnotationReapRequested]; !ok {
			t.Errorf("the closed session's claim %s has no %s annotation", n, airlockv1alpha1.AnnotationReapRequested)
		}
	}
	// The leader reaps them now (no targetPath here, so no sync-back: a cleanup Job removes the
	// workspaces), and renew says so.
	for _, n := range []string{name, lint} {
		e.waitGone(t, n, 90*time.Second)
	}
	err = c.Renew(ctx, client.RenewRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1", Handle: "codegen/default"})
	wantAPIError(t, "renew after close", err, http.StatusNotFound, client.CodeNotFound)
}

// TestSandboxAPIRefusals: 401, 403, 404, 409 and 429 against a real API server and real tokens.
func TestSandboxAPIRefusals(t *testing.T) {
	e := newClaimEnv(t, "airlock-api-deny", claimEnvOptions{maxConcurrent: 5, maxPerSession: 1})
	other := newNamespace(t, "airlock-api-other")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A disabled runtime with the same ServiceAccount.
	off := e.runtime.DeepCopy()
	off.ObjectMeta = metav1.ObjectMeta{Name: "off", Namespace: e.ns}
	off.Spec.Sandbox.Enabled = false
	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Create(ctx, off, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A token bound to a Secret that is then deleted: the API server no longer accepts it.
	revokedSecret, err := kubeClient.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "binding"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	serviceAccountToken(t, e.ns, "agent")
	tr, err := kubeClient.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptrInt64(3600),
		Audiences:         []string{airlockAudience},
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: revokedSecret.Name, UID: revokedSecret.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kubeClient.CoreV1().Secrets(e.ns).Delete(ctx, revokedSecret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	op := startAPIOperator(t, e.ns)
	agent := serviceAccountToken(t, e.ns, "agent")
	acquire := func(token, ns, runtime, handle string) error {
		c := op.client(token)
		_, _, err := c.AcquireOnce(ctx, client.AcquireRequest{Namespace: ns, Runtime: runtime, Session: "s", Handle: handle, WaitSeconds: waitSeconds(0)})
		return err
	}

	wantAPIError(t, "no token", acquire("", e.ns, "agent", "codegen/default"), http.StatusUnauthorized, client.CodeUnauthorized)
	wantAPIError(t, "forged token", acquire("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", e.ns, "agent", "codegen/default"), http.StatusUnauthorized, client.CodeUnauthorized)
	wantAPIError(t, "revoked token", acquire(tr.Status.Token, e.ns, "agent", "codegen/default"), http.StatusUnauthorized, client.CodeUnauthorized)
	// The runtime's own ServiceAccount, but a token for the API server's audience (what a pod's
	// default token is, and what a sniffer could replay against the API server): 401, and the
	// message says how to mount a projected token for airlock.
	sniffed := wantAPIError(t, "API server audience", acquire(requestToken(t, e.ns, "agent", nil), e.ns, "agent", "codegen/default"), http.StatusUnauthorized, client.CodeUnauthorized)
	for _, want := range []string{"projected", "serviceAccountToken", "audience: airlock"} {
		if !strings.Contains(sniffed.Message, want) {
			t.Errorf("401 message %q does not say %q", sniffed.Message, want)
		}
	}
	wantAPIError(t, "another ServiceAccount", acquire(serviceAccountToken(t, e.ns, "intruder"), e.ns, "agent", "codegen/default"), http.StatusForbidden, client.CodeForbidden)
	strangerToken := serviceAccountToken(t, other, "agent")
	wantAPIError(t, "another namespace's ServiceAccount", acquire(strangerToken, e.ns, "agent", "codegen/default"), http.StatusForbidden, client.CodeForbidden)
	wantAPIError(t, "another namespace's ServiceAccount, missing runtime", acquire(strangerToken, e.ns, "nobody", "codegen/default"), http.StatusForbidden, client.CodeForbidden)
	wantAPIError(t, "missing runtime", acquire(agent, e.ns, "nobody", "codegen/default"), http.StatusNotFound, client.CodeNotFound)
	wantAPIError(t, "missing sandbox", acquire(agent, e.ns, "agent", "nothing/default"), http.StatusNotFound, client.CodeNotFound)
	wantAPIError(t, "disabled runtime", acquire(agent, e.ns, "off", "codegen/default"), http.StatusConflict, client.CodeDisabled)
	wantAPIError(t, "bad handle", acquire(agent, e.ns, "agent", "Codegen"), http.StatusBadRequest, client.CodeInvalid)

	// maxPerSession is 1: once the first claim is Bound, a second handle of the session is 429.
	c := op.client(agent)
	if _, err := c.Acquire(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "s", Handle: "codegen/one", WaitSeconds: waitSeconds(90)}); err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	refused := wantAPIError(t, "over maxPerSession", acquire(agent, e.ns, "agent", "codegen/two"), http.StatusTooManyRequests, client.CodeRefused)
	if refused.Reason != client.ReasonMaxPerSession {
		t.Errorf("reason %q", refused.Reason)
	}
	if _, err := e.getClaim(ctx, claimname.For("agent", "s", "codegen/two")); err == nil {
		t.Error("the refused acquire created a claim")
	}
	// renew of a handle without a claim
	err = c.Renew(ctx, client.RenewRequest{Namespace: e.ns, Runtime: "agent", Session: "s", Handle: "codegen/two"})
	wantAPIError(t, "renew without a claim", err, http.StatusNotFound, client.CodeNotFound)
}

// TestSandboxAPITwoReplicas: two operator replicas receive concurrent acquires. For one handle
// they make exactly one claim; for more handles than maxPerSession, never more claims are
// admitted (Queued, Binding or Bound) than the limit, at any moment, and no more than the limit
// are live once the leader has decided.
func TestSandboxAPITwoReplicas(t *testing.T) {
	const maxPerSession = 2
	e := newClaimEnv(t, "airlock-api-ha", claimEnvOptions{maxConcurrent: 10, maxPerSession: maxPerSession})
	ops := []*apiOperator{startAPIOperator(t, e.ns), startAPIOperator(t, e.ns)}
	token := serviceAccountToken(t, e.ns, "agent")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Watch every claim of the namespace from the start: the invariant must hold at every event.
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var (
		mu         sync.Mutex
		violations []string
	)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		state := map[string]*airlockv1alpha1.SandboxClaim{}
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(state, c.Name)
			} else {
				state[c.Name] = c
			}
			admitted := map[string]int{}
			for _, c := range state {
				switch c.Status.Phase {
				case airlockv1alpha1.ClaimQueued, airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
					if c.DeletionTimestamp == nil {
						admitted[c.Spec.Session]++
					}
				}
			}
			for session, n := range admitted {
				if n > maxPerSession {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("session %s: %d admitted claims", session, n))
					mu.Unlock()
				}
			}
		}
	}()

	// One handle, 10 concurrent acquires spread over both replicas: one claim.
	var wg sync.WaitGroup
	names := make(chan string, 10)
	for i := range 10 {
		op := ops[i%2]
		wg.Go(func() {
			c := op.client(token)
			resp, err := c.Acquire(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "same", Handle: "codegen/default", WaitSeconds: waitSeconds(90)})
			if err != nil {
				t.Errorf("acquire: %v", err)
				return
			}
			names <- resp.Claim
		})
	}
	wg.Wait()
	close(names)
	want := claimname.For("agent", "same", "codegen/default")
	for n := range names {
		if n != want {
			t.Errorf("an acquire answered claim %s, want %s", n, want)
		}
	}
	list, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d claims for one handle, want 1", len(list.Items))
	}

	// Six handles of one session at once over both replicas, maxPerSession 2.
	results := make(chan error, 6)
	for i := range 6 {
		op := ops[i%2]
		wg.Go(func() {
			c := op.client(token)
			_, err := c.Acquire(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "many", Handle: fmt.Sprintf("codegen/h%d", i), WaitSeconds: waitSeconds(90)})
			results <- err
		})
	}
	wg.Wait()
	close(results)
	var bound, refused int
	for err := range results {
		switch {
		case err == nil:
			bound++
		case client.IsRefused(err):
			refused++
		default:
			t.Errorf("acquire: %v", err)
		}
	}
	t.Logf("six handles over two replicas: %d Bound, %d refused", bound, refused)
	if bound > maxPerSession || bound+refused != 6 {
		t.Errorf("%d Bound and %d refused of 6 acquires, want at most %d Bound and the rest refused", bound, refused, maxPerSession)
	}
	eventually(t, 30*time.Second, "the leader's decisions", func(ctx context.Context) (bool, error) {
		list, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		live := 0
		for _, c := range list.Items {
			if c.Spec.Session != "many" {
				continue
			}
			switch c.Status.Phase {
			case "", airlockv1alpha1.ClaimPending:
				return false, nil // not decided yet
			case airlockv1alpha1.ClaimRefused:
			default:
				if c.DeletionTimestamp == nil {
					live++
				}
			}
		}
		if live > maxPerSession {
			return false, fmt.Errorf("%d live claims in the session, limit %d", live, maxPerSession)
		}
		return true, nil
	})
	w.Stop()
	<-watchDone
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Errorf("the limit was exceeded: %v", violations)
	}
}
