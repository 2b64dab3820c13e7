package record

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/egress"
	"github.com/airlock-dev/airlock/pkg/egress/policy"
	"github.com/airlock-dev/airlock/pkg/gatewayrecord"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/usage"
)

var integrationProxyKey = bytes.Repeat([]byte{5}, claimtoken.KeyBytes)

type readerTokenFromKey struct{}

func (readerTokenFromKey) DecisionsReaderToken(context.Context) (string, error) {
	return claimtoken.DecisionsReaderToken(integrationProxyKey)
}

// publicResolver answers every name with a public-looking address; mappedDialer sends that
// address to the test's upstream on loopback, and dials nothing else.
type publicResolver struct{}

func (publicResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("1.2.3.4")}, nil
}

type mappedDialer struct{ upstream string }

func (d mappedDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var nd net.Dialer
	return nd.DialContext(ctx, network, d.upstream)
}

// TestARealGatewaysDecisionsAreRecorded (in process): a real gateway, a real tunnel through it
// with the claim's proxy credential, a refused host, and the leader's record controller reading
// the gateway's real feed over HTTP with the reader's token (pkg/gatewayrecord): the claim's
// sealed record holds both decisions as egress entries of source gateway, verifies, and the
// usage Ledger (the operator's observer) counts the tunnel's bytes for the claim's runtime.
func TestARealGatewaysDecisionsAreRecorded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// The upstream: an echo server on loopback.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upLn.Close()
	go func() {
		for {
			c, err := upLn.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	const port = 2222
	claims, err := egress.NewStaticClaims(egress.StaticClaim{Namespace: "ns", Claim: "c1", UID: "uid-1", Runtime: "agent",
		Password: "claim-password-0123456789", Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		Policy: policy.Policy{Rules: []policy.Rule{{Host: "echo.example", Ports: []uint16{port}, AllowNonTLS: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	claims.SetSynced()
	log := egress.NewDecisionLog(0, 0)
	g, err := egress.New(egress.Config{Claims: claims, Resolver: publicResolver{}, Dialer: mappedDialer{upLn.Addr().String()}, Decisions: log})
	if err != nil {
		t.Fatal(err)
	}
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, stopGateway := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- g.Serve(gctx, proxyLn) }()
	defer func() { stopGateway(); <-served }()
	feed := httptest.NewServer(log.ServeHandler(func() (string, error) { return claimtoken.DecisionsReaderToken(integrationProxyKey) }))
	defer feed.Close()
	defer log.Close()

	// The leader: the record controller with the real client of the feed.
	f := newFixture(t, nil, nil)
	f.follower.end = context.Canceled
	kinf := kubeinformers.NewSharedInformerFactory(k8sfake.NewClientset(), 0)
	if err := f.c.SetGateway(kinf.Core().V1().Pods(), readerTokenFromKey{}); err != nil {
		t.Fatal(err)
	}
	f.c.gwPodsSynced = alwaysReady
	if _, ok := f.c.decisions.(*gatewayrecord.Client); !ok {
		t.Fatalf("the controller's decisions reader is %T, want *gatewayrecord.Client", f.c.decisions)
	}
	ledger := usage.NewLedger(nil)
	seen := make(chan record.Entry, 16)
	f.c.AddObserver(func(c *airlockv1alpha1.SandboxClaim, e record.Entry) {
		ledger.Observe(c.Namespace, c.Spec.RuntimeName, string(c.UID), e)
		if e.Kind == record.KindEgress {
			seen <- e
		}
	})
	_, feedPort, _ := net.SplitHostPort(feed.Listener.Addr().String())
	gwPod := gatewayPod("airlock-egress-0", "a", "127.0.0.1")
	p, _ := strconv.Atoi(feedPort)
	gwPod.Spec.Containers[0].Ports[1].ContainerPort = int32(p)
	_ = kinf.Core().V1().Pods().Informer().GetIndexer().Add(gwPod)
	claim := egressClaim(airlockv1alpha1.ClaimBound)
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	f.c.ctx = ctx
	if _, err := f.c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}

	// The sandbox's connections: a tunnel to the allowed host, and a refused one.
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("ns.c1:claim-password-0123456789"))
	tunnel := func(authority string) (int, int64) {
		c, err := net.Dial("tcp", proxyLn.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "CONNECT "+authority+" HTTP/1.1\r\nHost: "+authority+"\r\nProxy-Authorization: "+auth+"\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, 0
		}
		msg := []byte("bytes through the gateway")
		_, _ = c.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, int64(len(msg))
	}
	if status, _ := tunnel("echo.example:" + strconv.Itoa(port)); status != http.StatusOK {
		t.Fatalf("the allowed tunnel: %d", status)
	}
	if status, _ := tunnel("evil.example:443"); status != http.StatusForbidden {
		t.Fatalf("the refused host: %d, want 403", status)
	}
	var got []record.Entry
	for len(got) < 2 {
		select {
		case e := <-seen:
			got = append(got, e)
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatalf("the leader recorded %d of the 2 decisions", len(got))
		}
	}

	// The claim ends: the feed's read is given goneHold, then cut, and the record sealed.
	failed := claim.DeepCopy()
	failed.Status.Phase, failed.ResourceVersion = airlockv1alpha1.ClaimFailed, "9"
	_ = f.claims.Update(failed)
	_ = f.pods.Delete(runningPod(claim))
	if _, err := f.c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(goneHold)
	if _, err := f.c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	f.c.wg.Wait()
	rep, entries := f.export()
	if !rep.Intact() || !rep.Sealed {
		t.Fatalf("verdict %q, findings %v: %s", rep.Verdict(), rep.Findings, kinds(entries))
	}
	if want := "claim.phase:Bound egress egress claim.phase:Failed record.sealed"; kinds(entries) != want {
		t.Errorf("entries %q, want %q", kinds(entries), want)
	}
	// Each decision is recorded when its exchange ends: the tunnel's end and the refusal may come
	// in either order.
	allowed, denied := entries[1], entries[2]
	if allowed.Host != "echo.example" {
		allowed, denied = denied, allowed
	}
	if allowed.Source != record.SourceGateway || allowed.Host != "echo.example" || allowed.Verdict != record.VerdictAllowed ||
		allowed.Usage == nil || allowed.Usage.EgressBytes < 2*int64(len("bytes through the gateway")) || allowed.SourceSeq == 0 || allowed.SourceSeq == denied.SourceSeq || allowed.Boot != log.Boot() {
		t.Errorf("the tunnel's entry %+v", allowed)
	}
	if denied.Host != "evil.example" || denied.Verdict != record.VerdictDenied || denied.Reason != "host_not_allowed" {
		t.Errorf("the refusal's entry %+v", denied)
	}
	want := allowed.Usage.EgressBytes + denied.Usage.EgressBytes
	if snap, _ := ledger.Snapshot("ns", "agent"); snap.EgressBytes != want || want == 0 {
		t.Errorf("the ledger's egress bytes %d, want %d", snap.EgressBytes, want)
	}
}
