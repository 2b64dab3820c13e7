package wire

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/utils/clock"
)

// Tracking the stateful sessions: a direct call does not pass through the
// SDK's handler, so the SDK's idle timer (which every POST to it restarts)
// would close a session that only makes direct calls. The SDK's timer is
// off (SessionTimeout 0) and this transport keeps the timer instead, with
// the SDK's rule: it runs while no POST of the session is in flight,
// whichever path serves the POST, and closes the session when it fires.
// A session is tracked from the answer to its initialize (the response's
// Mcp-Session-Id), or from its first POST if that came first.

// streamableSessions are the stateful sessions of /mcp, by id.
type streamableSessions struct {
	server  *mcp.Server
	timeout time.Duration // idle timeout; 0: none
	clock   clock.WithDelayedExecution

	mu   sync.Mutex
	byID map[string]*streamableSession
}

// streamableSession is one stateful session of /mcp.
type streamableSession struct {
	id     string
	ss     *mcp.ServerSession
	ctx    context.Context // ends with the session: its direct calls' parent
	cancel context.CancelFunc
	direct directCalls

	// Under streamableSessions.mu.
	posts int         // POSTs in flight
	idle  clock.Timer // runs while posts is 0
}

func newStreamableSessions(server *mcp.Server, timeout time.Duration, clk clock.WithDelayedExecution) *streamableSessions {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &streamableSessions{server: server, timeout: timeout, clock: clk, byID: map[string]*streamableSession{}}
}

// begin returns the session id names, tracking it if it is the SDK's and
// not yet tracked, with one more POST in flight (end undoes it); nil for
// an id the SDK does not know (it answers 404).
func (s *streamableSessions) begin(id string) *streamableSession {
	s.mu.Lock()
	sess := s.byID[id]
	if sess != nil {
		sess.posts++
		if sess.idle != nil {
			sess.idle.Stop()
		}
	}
	s.mu.Unlock()
	if sess != nil {
		return sess
	}
	if sess = s.track(id); sess == nil {
		return nil
	}
	return s.begin(id)
}

// end is the end of a POST that begin counted.
func (s *streamableSessions) end(sess *streamableSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess.posts--
	if sess.posts == 0 && s.byID[sess.id] == sess {
		s.startIdleLocked(sess)
	}
}

func (s *streamableSessions) startIdleLocked(sess *streamableSession) {
	if s.timeout <= 0 {
		return
	}
	if sess.idle != nil {
		sess.idle.Reset(s.timeout) // stopped by begin: one timer per session, not per POST
		return
	}
	ss := sess.ss
	sess.idle = s.clock.AfterFunc(s.timeout, func() { _ = ss.Close() })
}

// track starts tracking the SDK's session id, if there is one and it is
// not tracked yet, and returns it.
func (s *streamableSessions) track(id string) *streamableSession {
	var ss *mcp.ServerSession
	for c := range s.server.Sessions() {
		if c.ID() == id {
			ss = c
			break
		}
	}
	if ss == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess := s.byID[id]; sess != nil {
		return sess
	}
	ctx, cancel := context.WithCancel(context.Background())
	sess := &streamableSession{id: id, ss: ss, ctx: ctx, cancel: cancel,
		direct: directCalls{cancels: make(map[any]context.CancelFunc)}}
	s.byID[id] = sess
	s.startIdleLocked(sess)
	go func() {
		_ = ss.Wait() // closed: by DELETE, the idle timer, or shutdown
		s.forget(sess)
	}()
	return sess
}

// forget drops a session that ended: its direct calls are cancelled, and
// it waits for them.
func (s *streamableSessions) forget(sess *streamableSession) {
	s.mu.Lock()
	if s.byID[sess.id] == sess {
		delete(s.byID, sess.id)
	}
	if sess.idle != nil {
		sess.idle.Stop()
	}
	s.mu.Unlock()
	sess.cancel()
	sess.direct.mu.Lock()
	sess.direct.ended = true
	sess.direct.mu.Unlock()
	sess.direct.running.Wait()
}

// close cancels the direct calls of every tracked session and waits for
// them, or for ctx. The sessions themselves are the SDK's to close.
func (s *streamableSessions) close(ctx context.Context) error {
	s.mu.Lock()
	all := make([]*streamableSession, 0, len(s.byID))
	for _, sess := range s.byID {
		all = append(all, sess)
	}
	s.mu.Unlock()
	return waitUntil(ctx, func() {
		for _, sess := range all {
			s.forget(sess)
		}
	}, "stateful tool calls still running")
}

// tracked is the number of sessions tracked (for the tests).
func (s *streamableSessions) tracked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}
