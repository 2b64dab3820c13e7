package evidence

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/evidence/evidencetest"
	"github.com/airlock-dev/airlock/pkg/isolation"
)

func nodes(kernel string) NodeGetter {
	return func(_ context.Context, name string) (*corev1.Node, error) {
		n := nodeOf(kernel)
		n.Name = name
		return n, nil
	}
}

// TestReadsOncePerUID: a uid is read once until forgotten; the result is kept with the Node, the
// callback runs after it is kept; a token error ends the read before any request.
func TestReadsOncePerUID(t *testing.T) {
	ev := evidencetest.Of("6.18.0", isolation.RuntimeKernel, nil)
	r := NewReads()
	reader := &evidencetest.Reader{Body: ev}
	r.Reader = reader
	var ended atomic.Int32
	target := Target{Base: "http://10.0.0.9:8080", Token: "t", Node: "node-1"}
	if !r.Start(t.Context(), "uid-1", target, nodes("6.18.0"), func() { ended.Add(1) }) {
		t.Fatal("the first Start did not start")
	}
	if r.Start(t.Context(), "uid-1", target, nodes("6.18.0"), func() { ended.Add(1) }) {
		t.Error("a second Start of the same uid started another read")
	}
	r.Wait()
	res, started, done := r.Get("uid-1")
	if !started || !done || res.Err != nil || string(res.Evidence) != string(ev) || res.Node.Name != "node-1" || ended.Load() != 1 {
		t.Fatalf("read: started %v done %v %+v, %d callbacks", started, done, res, ended.Load())
	}
	if got := reader.Asked(); len(got) != 1 || got[0] != "http://10.0.0.9:8080 t" {
		t.Errorf("asked %v", got)
	}
	r.Forget("uid-1")
	if _, started, _ := r.Get("uid-1"); started {
		t.Error("a forgotten read is still there")
	}
	tokenErr := errors.New("no key")
	r.Start(t.Context(), "uid-2", Target{TokenErr: tokenErr}, nodes(""), func() {})
	r.Wait()
	if res, _, _ := r.Get("uid-2"); !errors.Is(res.Err, tokenErr) || len(reader.Asked()) != 1 {
		t.Errorf("a read without a token: %v, %d requests", res.Err, len(reader.Asked()))
	}
}

// TestHTTPReader: the bearer token on GET isolation.Path; a non-200 answer is an error; more than
// isolation.MaxBytes is read no further than one byte past it.
func TestHTTPReader(t *testing.T) {
	ev := evidencetest.Of("6.18.0", isolation.RuntimeKernel, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer good":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == isolation.Path:
			w.Write(ev)
		default:
			w.Write([]byte(strings.Repeat("x", isolation.MaxBytes+100)))
		}
	}))
	defer srv.Close()
	reader := HTTPReader{Client: srv.Client()}
	if body, err := reader.Read(t.Context(), srv.URL, "good"); err != nil || string(body) != string(ev) {
		t.Errorf("Read = %q, %v", body, err)
	}
	if _, err := reader.Read(t.Context(), srv.URL, "bad"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Read with a bad token: %v, want the 401", err)
	}
	if body, err := reader.Read(t.Context(), srv.URL+"/big", "good"); err != nil || len(body) != isolation.MaxBytes+1 {
		t.Errorf("Read of a long answer: %d bytes, %v", len(body), err)
	}
}

// TestJudge: the verdicts a claim's status shows, the universal checks, and what is no evidence.
func TestJudge(t *testing.T) {
	const node = "6.18.0"
	dedicated := &airlockv1alpha1.FrozenSandbox{Isolation: &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}}
	anyKernel := &airlockv1alpha1.FrozenSandbox{}
	gvisor := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, nil)
	runc := evidencetest.Of(node, isolation.RuntimeKernel, nil)
	reached := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, evidencetest.ReachedAPIServer)
	tests := map[string]struct {
		raw         []byte
		nodeKernel  string
		need        isolation.Need
		wantKernel  string
		wantFailure string
	}{
		"gVisor, dedicated":                      {raw: gvisor, nodeKernel: node, need: Need(dedicated), wantKernel: KernelDedicated},
		"runc, any":                              {raw: runc, nodeKernel: node, need: Need(anyKernel), wantKernel: KernelShared},
		"runc, dedicated":                        {raw: runc, nodeKernel: node, need: Need(dedicated), wantFailure: "is the node's"},
		"runc, universal":                        {raw: runc, nodeKernel: node, need: UniversalNeed(dedicated), wantKernel: KernelShared},
		"runc, the node's kernel unknown":        {raw: runc, need: Need(anyKernel), wantKernel: KernelUnknown},
		"the API server reached, universal":      {raw: reached, nodeKernel: node, need: UniversalNeed(anyKernel), wantFailure: "reached the API server"},
		"not evidence":                           {raw: []byte(`{"kernelRelease":"4.19.0-gvisor"}`), nodeKernel: node, need: Need(anyKernel), wantFailure: "evidence"},
		"gVisor claimed on the node's own uname": {raw: evidencetest.Of(node, isolation.RuntimeKernel, func(ev *isolation.Evidence) { ev.Runtime = isolation.RuntimeGVisor }), nodeKernel: node, need: Need(anyKernel), wantFailure: "runtime"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v := Judge(tc.raw, tc.nodeKernel, tc.need)
			if tc.wantFailure != "" {
				if v.Failure == "" || !strings.Contains(v.Failure, tc.wantFailure) {
					t.Fatalf("failure %q, want one saying %q", v.Failure, tc.wantFailure)
				}
				return
			}
			if v.Failure != "" || v.Kernel != tc.wantKernel {
				t.Fatalf("verdict %+v, want kernel %s", v, tc.wantKernel)
			}
		})
	}
}

// timeoutErr is a dial's timeout.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestDialAgain: a connect that timed out is tried again until one connects; a refusal, or the
// read's end, ends it with its error.
func TestDialAgain(t *testing.T) {
	refused := errors.New("connection refused")
	for name, tc := range map[string]struct {
		errs     []error // the attempts' errors before one connects
		cancel   bool
		wantN    int
		wantErr  error
		wantConn bool
	}{
		"two lost SYNs, then connected": {errs: []error{timeoutErr{}, timeoutErr{}}, wantN: 3, wantConn: true},
		"refused: not tried again":      {errs: []error{refused}, wantN: 1, wantErr: refused},
		"the read ended":                {errs: []error{timeoutErr{}, timeoutErr{}}, cancel: true, wantN: 1, wantErr: timeoutErr{}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			n := 0
			dial := dialAgain(func(context.Context, string, string) (net.Conn, error) {
				n++
				if tc.cancel {
					cancel()
				}
				if n <= len(tc.errs) {
					return nil, tc.errs[n-1]
				}
				c, _ := net.Pipe()
				return c, nil
			})
			conn, err := dial(ctx, "tcp", "10.0.0.1:8080")
			if n != tc.wantN || (conn != nil) != tc.wantConn || !errors.Is(err, tc.wantErr) {
				t.Errorf("%d attempts, conn %v, err %v; want %d, a conn: %v, err %v", n, conn, err, tc.wantN, tc.wantConn, tc.wantErr)
			}
			if conn != nil {
				conn.Close()
			}
		})
	}
}

// TestHTTPClientDirectAndOnce: the reads' client goes to the pod's address itself whatever the
// environment's proxy says (the token goes to the sandbox only; the environment's proxy is never
// used for loopback, so the transport's setting is what is checked), on a connection of its own
// for each read.
func TestHTTPClientDirectAndOnce(t *testing.T) {
	client := newHTTPClient()
	if tr, ok := client.Transport.(*http.Transport); !ok || tr.Proxy != nil || !tr.DisableKeepAlives {
		t.Fatalf("transport %#v: want one of its own, without a proxy or kept connections", client.Transport)
	}
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(evidencetest.Of("6.18.0", isolation.RuntimeKernel, nil))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	reader := HTTPReader{Client: client}
	for range 2 {
		if _, err := reader.Read(t.Context(), srv.URL, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections for two reads, want one each", n)
	}
}
