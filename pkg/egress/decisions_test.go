package egress

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/gatewayrecord"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/usage"
)

var testProxyKey = bytes.Repeat([]byte{7}, claimtoken.KeyBytes)

func readerToken(t testing.TB) string {
	t.Helper()
	tok, err := claimtoken.DecisionsReaderToken(testProxyKey)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func entryAt(host string) record.Entry {
	return RecordEntry(Record{Kind: "connect", Host: host, Port: 443, Allowed: true, Reason: ReasonAllowed, BytesUp: 1, BytesDown: 2},
		time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC))
}

func seqs(es []record.Entry) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.SourceSeq)
	}
	return out
}

// TestDecisionLogIsBoundedAndCountsWhatItDoesNotKeep: a claim keeps its last perClaim entries,
// the log inAll in all; a decision past a bound still takes its number, so that a reader sees
// exactly which numbers it missed; a forgotten claim frees its entries; a decision of no claim
// (no UID) is not kept.
func TestDecisionLogIsBoundedAndCountsWhatItDoesNotKeep(t *testing.T) {
	l := NewDecisionLog(3, 5)
	for i := 0; i < 5; i++ {
		l.Add(uidA, entryAt("a.example"))
	}
	got, last, _, _ := l.after(uidA, 0)
	if want := []uint64{3, 4, 5}; !equalSeqs(seqs(got), want) || last != 5 {
		t.Fatalf("claim A after 5 decisions keeps %v (last %d), want %v (last 5)", seqs(got), last, want)
	}
	if got[0].Boot != l.Boot() || got[0].Claim != uidA || got[0].Source != record.SourceGateway {
		t.Errorf("entry %+v: want the log's boot, the claim's UID, source gateway", got[0])
	}
	l.Add(uidB, entryAt("b.example"))
	l.Add(uidB, entryAt("b.example"))
	// In all 5 kept: B's next takes B's oldest place; C, which keeps none, keeps nothing.
	l.Add(uidB, entryAt("b.example"))
	if got, _, _, _ := l.after(uidB, 0); !equalSeqs(seqs(got), []uint64{2, 3}) {
		t.Errorf("claim B at the bound in all keeps %v, want [2 3]", seqs(got))
	}
	const uidC = "uid-c"
	if kept := l.Add(uidC, entryAt("c.example")); kept {
		t.Error("a claim with nothing kept, at the bound in all: its entry was kept")
	}
	if got, last, _, _ := l.after(uidC, 0); len(got) != 1 || got[0].Kind != record.KindRecordGap || got[0].SourceSeq != 1 || got[0].Claim != uidC || last != 1 {
		t.Errorf("claim C: %+v served, last %d; want only a gap line at number 1 (its decision counted, not kept)", got, last)
	}
	if got, _, _, _ := l.after(uidC, 1); len(got) != 0 {
		t.Errorf("claim C after its gap line: %+v, want nothing", got)
	}
	l.Forget(uidA)
	if kept := l.Add(uidC, entryAt("c.example")); !kept {
		t.Error("after claim A was forgotten, claim C's entry was not kept")
	}
	if got, _, _, _ := l.after(uidC, 0); !equalSeqs(seqs(got), []uint64{2}) {
		t.Errorf("claim C keeps %v, want [2] (its first was counted, not kept)", seqs(got))
	}
	if l.Add("", entryAt("x.example")) {
		t.Error("a decision of no claim was kept")
	}
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type feedAnswer struct {
	status int
	err    string
	body   string
}

func ask(t *testing.T, srv *httptest.Server, method, path string, header http.Header) feedAnswer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := feedAnswer{status: resp.StatusCode, body: string(b)}
	if resp.StatusCode != http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: refusal with Content-Type %q, want application/json", method, path, ct)
		}
		var body struct{ Error, Message string }
		if err := json.Unmarshal(b, &body); err != nil || body.Error == "" || body.Message == "" {
			t.Errorf("%s %s: refusal body %q is not {error, message}", method, path, b)
		}
		a.err = body.Error
	}
	return a
}

// TestDecisionsFeedRefusesEveryoneButTheReader: only the token derived from the proxy key for
// this read opens the feed. A sandbox's own proxy credential (as a bearer token or as Basic), a
// warm member's, another claim's, a token of another proxy key, the proxy key itself, the
// operator's claim bearer token, no token, two tokens: 401 with a JSON body; a key the gateway
// does not know yet: 503; a write: 405; another path: 404.
func TestDecisionsFeedRefusesEveryoneButTheReader(t *testing.T) {
	l := NewDecisionLog(0, 0)
	l.Add(uidA, entryAt("allowed.example"))
	var keyKnown = true
	srv := httptest.NewServer(l.ServeHandler(func() (string, error) {
		if !keyKnown {
			return "", errors.New("no key")
		}
		return claimtoken.DecisionsReaderToken(testProxyKey)
	}))
	t.Cleanup(srv.Close)

	proxyCredA, _ := claimtoken.DeriveProxy(testProxyKey, uidA, "team-a", "agent-a")
	proxyCredB, _ := claimtoken.DeriveProxy(testProxyKey, uidB, "team-b", "agent-b")
	memberCred, _ := claimtoken.DeriveMemberProxy(testProxyKey, "pod-uid", "team-a", "member-1")
	otherKey := bytes.Repeat([]byte{8}, claimtoken.KeyBytes)
	forged, _ := claimtoken.DecisionsReaderToken(otherKey)
	bearerToken, _ := claimtoken.Derive(testProxyKey, uidA, "team-a", "agent-a")
	path := gatewayrecord.Path + "?claim=" + uidA + "&after=0"
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

	refused := map[string]struct {
		header  http.Header
		wantErr string
	}{
		"no token":                             {http.Header{}, "no_token"},
		"the sandbox's proxy credential":       {bearer(proxyCredA), "bad_token"},
		"another claim's proxy credential":     {bearer(proxyCredB), "bad_token"},
		"a warm member's proxy credential":     {bearer(memberCred), "bad_token"},
		"the proxy credential as Basic":        {http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("team-a.agent-a:"+proxyCredA))}}, "no_token"},
		"a reader token of another proxy key":  {bearer(forged), "bad_token"},
		"the proxy key itself":                 {bearer(base64.RawURLEncoding.EncodeToString(testProxyKey)), "bad_token"},
		"a claim's bearer token":               {bearer(bearerToken), "bad_token"},
		"the reader's token with a suffix":     {bearer(readerToken(t) + "x"), "bad_token"},
		"the reader's token twice":             {http.Header{"Authorization": {"Bearer " + readerToken(t), "Bearer " + readerToken(t)}}, "no_token"},
		"the reader's token as Proxy-Auth":     {http.Header{"Proxy-Authorization": {"Bearer " + readerToken(t)}}, "no_token"},
		"an empty bearer":                      {http.Header{"Authorization": {"Bearer "}}, "no_token"},
		"the reader's token in lower-case hex": {bearer(strings.ToLower(readerToken(t))), "bad_token"},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			if name == "the reader's token in lower-case hex" && strings.ToLower(readerToken(t)) == readerToken(t) {
				t.Skip("the token has no upper-case letter")
			}
			a := ask(t, srv, http.MethodGet, path, tc.header)
			if a.status != http.StatusUnauthorized || a.err != tc.wantErr {
				t.Errorf("%d %q, want 401 %q", a.status, a.err, tc.wantErr)
			}
			if strings.Contains(a.body, "allowed.example") {
				t.Error("a refused read got an entry")
			}
		})
	}
	if a := ask(t, srv, http.MethodPost, path, bearer(readerToken(t))); a.status != http.StatusMethodNotAllowed {
		t.Errorf("POST with the reader's token: %d, want 405", a.status)
	}
	if a := ask(t, srv, http.MethodGet, "/record?after=0", bearer(readerToken(t))); a.status != http.StatusNotFound {
		t.Errorf("another path: %d, want 404", a.status)
	}
	if a := ask(t, srv, http.MethodGet, gatewayrecord.Path+"?after=0", bearer(readerToken(t))); a.status != http.StatusBadRequest {
		t.Errorf("no claim: %d, want 400", a.status)
	}
	if a := ask(t, srv, http.MethodGet, path+"&boot=another", bearer(readerToken(t))); a.status != http.StatusConflict || a.err != "boot_changed" {
		t.Errorf("another boot: %d %q, want 409 boot_changed", a.status, a.err)
	}
	a := ask(t, srv, http.MethodGet, path, bearer(readerToken(t)))
	if a.status != http.StatusOK || !strings.Contains(a.body, `"host":"allowed.example"`) {
		t.Errorf("the reader: %d %q, want 200 with the entry", a.status, a.body)
	}
	if a := ask(t, srv, http.MethodGet, gatewayrecord.Path+"?claim="+uidB+"&after=0", bearer(readerToken(t))); a.status != http.StatusOK || a.body != "" {
		t.Errorf("another claim's decisions: %d %q, want 200 and none (claim A's are A's only)", a.status, a.body)
	}
	keyKnown = false
	if a := ask(t, srv, http.MethodGet, path, bearer(readerToken(t))); a.status != http.StatusServiceUnavailable {
		t.Errorf("no key yet: %d, want 503", a.status)
	}
}

// follow reads claim uid's decisions from srv into a channel until the test ends.
func follow(t *testing.T, srv *httptest.Server, uid, boot string, after uint64) (<-chan record.Entry, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	entries, done := make(chan record.Entry, 64), make(chan error, 1)
	c := gatewayrecord.NewClient()
	go func() {
		done <- c.Follow(ctx, srv.URL, readerToken(t), uid, boot, after, nil, func(line []byte) error {
			var e record.Entry
			if err := json.Unmarshal(line, &e); err != nil {
				return err
			}
			entries <- e
			return nil
		})
	}()
	return entries, done
}

func next(t *testing.T, entries <-chan record.Entry) record.Entry {
	t.Helper()
	select {
	case e := <-entries:
		return e
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no decision read")
		return record.Entry{}
	}
}

// TestDecisionsOfAConnectionReachTheReader: a real gateway's decisions, an allowed tunnel with
// its bytes and a refused host, are its claim's entries at GET /decisions, followed as they are
// made, and another claim's are not among them; their bytes are the session's egress usage.
func TestDecisionsOfAConnectionReachTheReader(t *testing.T) {
	l := NewDecisionLog(0, 0)
	f := newFixture(t, newInternet(t), withDecisions(l))
	srv := httptest.NewServer(l.ServeHandler(func() (string, error) { return claimtoken.DecisionsReaderToken(testProxyKey) }))
	t.Cleanup(srv.Close)
	entries, _ := follow(t, srv, uidA, "", 0)

	c, echo := openEcho(t, f)
	if err := echo("some bytes"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	rec := f.record()
	allowed := next(t, entries)
	if allowed.Kind != record.KindEgress || allowed.Host != "ssh.example" || allowed.Port != 22 || allowed.Verdict != record.VerdictAllowed ||
		allowed.Reason != string(ReasonAllowed) || allowed.Usage == nil || allowed.Usage.EgressBytes != rec.BytesUp+rec.BytesDown || allowed.Usage.EgressBytes == 0 ||
		allowed.SourceSeq != 1 || allowed.Boot != l.Boot() || allowed.Claim != uidA {
		t.Errorf("allowed entry %+v (record %+v)", allowed, rec)
	}
	// Claim B's decision is B's.
	res, _, cb := f.send("127.0.0.2", strings.Replace(connectReq("evil.example:443"), credA, basic("team-b.agent-b", passwordB), 1))
	cb.Close()
	f.record()
	if res.reason != ReasonNotAllowed {
		t.Fatalf("claim B: %q", res.reason)
	}
	res, _, ca := f.send("", connectReq("evil.example:443"))
	ca.Close()
	f.record()
	if res.reason != ReasonNotAllowed {
		t.Fatalf("claim A: %q", res.reason)
	}
	denied := next(t, entries)
	if denied.Host != "evil.example" || denied.Verdict != record.VerdictDenied || denied.Reason != string(ReasonNotAllowed) || denied.SourceSeq != 2 {
		t.Errorf("denied entry %+v", denied)
	}
	allowed.Seq, denied.Seq = 1, 2
	if want := allowed.Usage.EgressBytes + denied.Usage.EgressBytes; usage.Session([]record.Entry{allowed, denied}).EgressBytes != want || want == 0 {
		t.Errorf("the session's egress bytes %d, want %d (both exchanges: a refusal's answer counts)", usage.Session([]record.Entry{allowed, denied}).EgressBytes, want)
	}
	select {
	case e := <-entries:
		t.Errorf("an entry more for claim A: %+v", e)
	default:
	}
	// A reader that comes back with another boot is told the gateway restarted.
	_, done := follow(t, srv, uidA, "an-earlier-boot", 2)
	select {
	case err := <-done:
		var changed *gatewayrecord.BootChangedError
		if !errors.As(err, &changed) || changed.Boot != l.Boot() {
			t.Errorf("another boot: %v, want BootChangedError{%s}", err, l.Boot())
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no answer for another boot")
	}
}

// TestDecisionNamesTheCredentialNotItsValue: a terminated tunnel whose rule injected a
// credential is recorded with the credential's name; its value is in no line of the feed.
func TestDecisionNamesTheCredentialNotItsValue(t *testing.T) {
	in := newInternet(t)
	ca, pool := newTestCA(t, "egress gateway CA")
	tr := &Terminator{CA: ca, UpstreamRoots: in.pool, Secrets: func(name string) ([]byte, bool) {
		if name == "cred" {
			return []byte(testSecret), true
		}
		return nil, false
	}}
	l := NewDecisionLog(0, 0)
	f := newFixture(t, in, withTerminator(tr), withDecisions(l))
	tc, br, err := terminatedTunnel(t, f, pool, "cred.example:443", "cred.example")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := roundTrip(t, tc, br, innerReq("GET", "/v1/repo", "cred.example")); res.status != http.StatusOK {
		t.Fatalf("GET through the terminated tunnel: %d", res.status)
	}
	tc.Close()
	f.record()
	srv := httptest.NewServer(l.ServeHandler(func() (string, error) { return claimtoken.DecisionsReaderToken(testProxyKey) }))
	t.Cleanup(srv.Close)
	a := ask(t, srv, http.MethodGet, gatewayrecord.Path+"?claim="+uidA, http.Header{"Authorization": {"Bearer " + readerToken(t)}})
	if !strings.Contains(a.body, `"credential":"cred"`) || !strings.Contains(a.body, `"host":"cred.example"`) {
		t.Errorf("feed %q: want the entry of cred.example naming the credential cred", a.body)
	}
	if strings.Contains(a.body, "test-secret") {
		t.Errorf("the credential's value is in the feed: %q", a.body)
	}
}

// TestRunServesDecisionsOnItsOwnPortOnly: Run serves GET /decisions on --decisions-bind-address,
// behind the reader's token, and nowhere else: not on the proxy port (what sandboxes reach), not
// on the health or metrics ports.
func TestRunServesDecisionsOnItsOwnPortOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	claims, err := NewStaticClaims(StaticClaim{Namespace: "team-a", Claim: "agent-a", UID: uidA, Password: passwordA,
		Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Policy: testPolicy})
	if err != nil {
		t.Fatal(err)
	}
	claims.SetSynced()
	l := NewDecisionLog(0, 0)
	addrs := make(chan []net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, ServeConfig{Gateway: Config{Claims: claims, Resolver: &testResolver{}, Decisions: l},
			ProxyAddress: "127.0.0.1:0", HealthAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0", DecisionsAddress: "127.0.0.1:0",
			ReaderToken: func() (string, error) { return claimtoken.DecisionsReaderToken(testProxyKey) }},
			func(a []net.Addr) { addrs <- a })
	}()
	a := <-addrs
	c, err := net.Dial("tcp", a[0].String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, connectReq("evil.example:443"))
	_, _ = io.ReadAll(c) // the gateway closes the connection after its audit (and the decision's entry)
	c.Close()

	feed := "http://" + a[3].String() + gatewayrecord.Path + "?claim=" + uidA
	if code, _ := httpGet(t, feed); code != http.StatusUnauthorized {
		t.Errorf("the decisions port without a token: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodGet, feed, nil)
	req.Header.Set("Authorization", "Bearer "+readerToken(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"host":"evil.example"`) {
		t.Errorf("the reader on the decisions port: %d %q", resp.StatusCode, body)
	}
	for name, addr := range map[string]string{"health": a[1].String(), "metrics": a[2].String()} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+gatewayrecord.Path+"?claim="+uidA, nil)
		req.Header.Set("Authorization", "Bearer "+readerToken(t))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /decisions on the %s port: %d, want 404", name, resp.StatusCode)
		}
	}
	// On the proxy port, a request for /decisions is a proxy request: refused, no entry served.
	c, err = net.Dial("tcp", a[0].String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET "+gatewayrecord.Path+"?claim="+uidA+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+readerToken(t)+"\r\n\r\n")
	got, _ := io.ReadAll(c)
	c.Close()
	if strings.Contains(string(got), "evil.example") || !strings.Contains(string(got), "refused") {
		t.Errorf("GET /decisions on the proxy port: %q, want a proxy refusal", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestAForgottenClaimsReadEnds: a claim deleted (Forget) ends the reads that follow it, and its
// entries are gone.
func TestAForgottenClaimsReadEnds(t *testing.T) {
	l := NewDecisionLog(0, 0)
	l.Add(uidA, entryAt("a.example"))
	srv := httptest.NewServer(l.ServeHandler(func() (string, error) { return claimtoken.DecisionsReaderToken(testProxyKey) }))
	t.Cleanup(srv.Close)
	entries, done := follow(t, srv, uidA, "", 0)
	next(t, entries)
	l.Forget(uidA)
	select {
	case err := <-done:
		if !errors.Is(err, gatewayrecord.ErrCut) {
			t.Errorf("the read of a forgotten claim ended with %v, want ErrCut", err)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the read of a forgotten claim goes on")
	}
	if got, _, _, _ := l.after(uidA, 0); len(got) != 0 {
		t.Errorf("a forgotten claim keeps %d entries", len(got))
	}
}
