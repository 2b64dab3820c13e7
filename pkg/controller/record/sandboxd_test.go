package record

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd"
	"github.com/airlock-dev/airlock/pkg/sandboxrecord"
	"github.com/airlock-dev/airlock/pkg/sandboxstop"
)

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// startSandboxd runs a real sandboxd on a loopback port with the claim's token, and returns its
// port; it is stopped at the test's end.
func startSandboxd(t *testing.T) int {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sandboxd.Run(ctx, sandboxd.Config{Listen: "127.0.0.1:" + strconv.Itoa(port), Workspace: filepath.Join(dir, "ws"),
			AuthTokenFile: tokenFile, StateDir: filepath.Join(dir, "state"), ShutdownGrace: 5 * time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	}); err != nil {
		t.Fatalf("sandboxd did not listen: %v", err)
	}
	return port
}

// TestARealSandboxdsSessionIsRecorded: the controller follows a real sandboxd's GET /record with
// the claim's token at the pod's address and sandboxd's port; a Write's entries and, after the
// operator's stop, sandboxd's stopped entry reach the record (WaitStopped returns), and the
// stored record is sealed and verifies, with no gap.
func TestARealSandboxdsSessionIsRecorded(t *testing.T) {
	port := startSandboxd(t)
	records := airlockfake.NewSimpleClientset() //nolint:staticcheck // as newFixture
	apiServerRules(records)
	priv, _ := record.SigningKey([]byte("0123456789abcdef0123456789abcdef"))
	signer, _ := record.NewSigner(priv)
	air := airlockinformers.NewSharedInformerFactory(airlockfake.NewClientset(), 0)
	kinf := kubeinformers.NewSharedInformerFactory(k8sfake.NewClientset(), 0)
	clk := clocktesting.NewFakeClock(t0)
	c, err := newControllerWithClock(realRecords{client: records}, air.Airlock().V1alpha1().SandboxClaims(), kinf.Core().V1().Pods(),
		fixedTokens{}, fixedSigner{signer}, sandboxrecord.NewClient(), true, clk)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() { cancel(); c.wg.Wait() })
	c.ctx = ctx
	f := &fixture{t: t, records: records, clock: clk, signer: signer, c: c,
		claims: air.Airlock().V1alpha1().SandboxClaims().Informer().GetIndexer(),
		pods:   kinf.Core().V1().Pods().Informer().GetIndexer()}

	claim := newClaim(airlockv1alpha1.ClaimBound)
	claim.Status.Frozen.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: int32(port)}}
	pod := runningPod(claim)
	pod.Status.PodIP = "127.0.0.1"
	_ = f.claims.Add(claim)
	_ = f.pods.Add(pod)

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "record-test", Version: "v0"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp", HTTPClient: &http.Client{Transport: bearer{testToken}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "Write", Arguments: map[string]any{"file_path": "a.txt", "content": "a"}}); err != nil {
		t.Fatal(err)
	}

	if _, err := c.sync(ctx, keyOf(claim)); err != nil { // the phase stored, the read started
		t.Fatal(err)
	}
	// The operator's stop: sandboxd appends its stopped entry before it answers (here 409:
	// sandboxd is not its container's first process, which the log does not depend on).
	_, _ = sandboxstop.NewClient().Stop(ctx, "http://127.0.0.1:"+strconv.Itoa(port), testToken)
	wctx, wcancel := context.WithTimeout(ctx, wait.ForeverTestTimeout)
	defer wcancel()
	if !c.WaitStopped(wctx, claim.UID) {
		t.Fatal("the stopped entry was not read")
	}

	reaping := claim.DeepCopy()
	reaping.Status.Phase, reaping.ResourceVersion = airlockv1alpha1.ClaimReaping, "2"
	_ = f.claims.Update(reaping)
	_ = f.pods.Delete(pod)
	c.wg.Wait() // the read has ended (its stopped entry taken)
	if _, err := c.sync(ctx, keyOf(reaping)); err != nil {
		t.Fatal(err)
	}
	rep, entries := f.export()
	if !rep.Intact() || !rep.Sealed {
		t.Fatalf("verdict %q: %v", rep.Verdict(), rep.Findings)
	}
	want := "claim.phase:Bound sandbox.boot file.write tool.call sandbox.stopped claim.phase:Reaping record.sealed"
	if got := kinds(entries); got != want {
		t.Errorf("entries = %q, want %q", got, want)
	}
}
