// Package evidence is the operator's one way to read and judge a sandbox's isolation evidence
// (docs/isolation.md), used by the claim controller (a cold claim's pod, before Bound) and the
// warm pool controller (a member, at its readiness, before any adoption): the read over HTTP
// (GET isolation.Path with a bearer token) and of the pod's Node, run off the workers and bounded
// (Reads), the judgment (Judge), and the record of what was read of a warm member, sealed onto
// its pod by the operator where nothing in the sandbox can change it (member.go).
package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

const (
	// MaxInFlight bounds the reads of one controller that wait on sandboxes at once.
	MaxInFlight = 32
	// Timeout bounds one read of a sandbox's evidence and its Node.
	Timeout = 10 * time.Second
	// Retry is how long after a failed read the sandbox is looked at again.
	Retry = time.Second
	// dialAttempt bounds one attempt to connect to a sandbox; a read that got no answer to its
	// SYN in that time connects again, until Timeout.
	dialAttempt = 250 * time.Millisecond
)

// newHTTPClient is the reads' HTTP client: no proxy (a read goes to the pod's own address, with
// a token), a connection per read (a pod's address is soon another pod's: the node's IPAM gives
// it out again at once, and a kept connection is to a pod that is gone), and a connect that is
// tried again after dialAttempt: a new pod's first SYN can go unanswered while the node's
// network policy learns of the pod (on the local node 2 of 33 reads waited for the kernel's
// 1 s SYN retransmission), and a new attempt costs less.
func newHTTPClient() *http.Client {
	return &http.Client{Timeout: Timeout, Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext:       dialAgain((&net.Dialer{Timeout: dialAttempt}).DialContext),
	}}
}

// dialFunc connects as net.Dialer.DialContext does.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// dialAgain connects with dial (each attempt bounded by dialAttempt) until ctx ends or an
// attempt fails other than by its time (a refusal is the read's error).
func dialAgain(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		for {
			conn, err := dial(ctx, network, addr)
			var ne net.Error
			if err == nil || ctx.Err() != nil || !errors.As(err, &ne) || !ne.Timeout() {
				return conn, err
			}
		}
	}
}

// Reader reads a sandbox's evidence: GET isolation.Path at base with the bearer token.
type Reader interface {
	Read(ctx context.Context, base, token string) ([]byte, error)
}

// HTTPReader is the Reader over HTTP.
type HTTPReader struct{ Client *http.Client }

// Read reads at most isolation.MaxBytes+1 bytes of a 200 answer (Decode refuses more).
func (r HTTPReader) Read(ctx context.Context, base, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+isolation.Path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := r.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, isolation.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sandboxd answered %d to GET %s", resp.StatusCode, isolation.Path)
	}
	return body, nil
}

// BaseURL is the address of the pod's sandboxd: its IP and the record's first port.
func BaseURL(pod *corev1.Pod, record *airlockv1alpha1.FrozenSandbox) string {
	return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(sandboxpod.Ports(record)[0].Port)))
}

// NodeGetter reads a Node from the API server.
type NodeGetter func(ctx context.Context, name string) (*corev1.Node, error)

// Target is what one read reads: sandboxd at Base with Token, then the Node named Node. A
// TokenErr (the token could not be derived) ends the read with it, before any request.
type Target struct {
	Base, Token, Node string
	TokenErr          error
	// Started is when the caller started the read (its clock), kept in the Result.
	Started time.Time
}

// Result is a finished read: the evidence's bytes as sandboxd answered them and the pod's Node,
// or the error that ended it.
type Result struct {
	Evidence []byte
	Node     *corev1.Node
	Err      error
	Started  time.Time // the Target's
}

// Reads are a controller's reads, one per pod UID: each runs in a goroutine of its own (a worker
// never waits on the network), at most MaxInFlight at a time, each bounded by Timeout, and calls
// back when it ended (the controller enqueues the object it reads for).
type Reads struct {
	// Reader reads the evidence; an HTTPReader unless a test sets another before any read.
	Reader Reader
	slots  chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	reads  map[types.UID]*read
}

type read struct {
	done   bool
	result Result
}

// NewReads returns Reads over HTTP.
func NewReads() *Reads {
	return &Reads{
		Reader: HTTPReader{Client: newHTTPClient()},
		slots:  make(chan struct{}, MaxInFlight),
		reads:  map[types.UID]*read{},
	}
}

// Get returns the read of uid: whether one was started, whether it ended, and its result.
func (r *Reads) Get(uid types.UID) (result Result, started, done bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rd := r.reads[uid]
	if rd == nil {
		return Result{}, false, false
	}
	return rd.result, true, rd.done
}

// Start starts the read of uid's sandbox, unless one was started and not forgotten since (then
// it returns false): the evidence, then the Node (nodes), within Timeout, in a goroutine bounded
// by the slots. ended is called once the result is kept. ctx ending stops it.
func (r *Reads) Start(ctx context.Context, uid types.UID, target Target, nodes NodeGetter, ended func()) bool {
	r.mu.Lock()
	if r.reads[uid] != nil {
		r.mu.Unlock()
		return false
	}
	rd := &read{}
	r.reads[uid] = rd
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		res := Result{Err: target.TokenErr, Started: target.Started}
		select {
		case r.slots <- struct{}{}:
			if res.Err == nil {
				readCtx, cancel := context.WithTimeout(ctx, Timeout)
				res.Evidence, res.Err = r.Reader.Read(readCtx, target.Base, target.Token)
				if res.Err == nil {
					res.Node, res.Err = nodes(readCtx, target.Node)
				}
				cancel()
			}
			<-r.slots
		case <-ctx.Done():
			res.Err = ctx.Err()
		}
		r.mu.Lock()
		rd.done, rd.result = true, res
		r.mu.Unlock()
		ended()
	}()
	return true
}

// Forget forgets uid's read: a later Start reads again (a failed read tried again, a pod gone).
func (r *Reads) Forget(uid types.UID) {
	r.mu.Lock()
	delete(r.reads, uid)
	r.mu.Unlock()
}

// Wait waits for the reads in flight (a controller's Run, once its context is done; tests).
func (r *Reads) Wait() { r.wg.Wait() }
