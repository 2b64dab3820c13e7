package wire

import "github.com/modelcontextprotocol/go-sdk/jsonrpc"

// What the tests of the server's composition (pkg/sandboxd) observe in the
// wire's pieces; nothing here changes them.

// DecodeMessage decodes one JSON-RPC message as a POST's is decoded.
func DecodeMessage(data []byte) (jsonrpc.Message, error) { return decodeMessage(data) }

// Has says whether name is a tool the direct path may call.
func (c *CallTable) Has(name string) bool {
	_, ok := c.handlers[name]
	return ok
}

// Adopted is the UID of the claim that adopted a warm member ("" before).
func (g *Guard) Adopted() string {
	if a := g.warm.adopted.Load(); a != nil {
		return string(a.claimUID)
	}
	return ""
}

// DirectCalls counts the calls the SSE direct path took.
func (t *SSETransport) DirectCalls() int64 { return t.directCalls.Load() }

// DirectTaken counts the calls the /mcp direct path took.
func (t *StreamableTransport) DirectTaken() int64 { return t.direct.taken.Load() }

// KeptTaken counts the connections taken over after a direct call.
func (t *StreamableTransport) KeptTaken() int64 { return t.keep.taken.Load() }

// KeptConns counts the kept connections.
func (t *StreamableTransport) KeptConns() int {
	t.keep.mu.Lock()
	defer t.keep.mu.Unlock()
	return len(t.keep.conns)
}

// TrackedSessions counts the stateful sessions tracked for their idle timeout.
func (t *StreamableTransport) TrackedSessions() int { return t.sessions.tracked() }

// SSESessionView is an SSE session's direct path as a test sees it.
type SSESessionView struct{ s *sseSession }

// Session returns the SSE session id, nil if there is none.
func (t *SSETransport) Session(id string) *SSESessionView {
	s := t.lookup(id)
	if s == nil {
		return nil
	}
	return &SSESessionView{s}
}

// DirectEnded says whether the session's direct path refuses new calls.
func (v *SSESessionView) DirectEnded() bool {
	v.s.direct.mu.Lock()
	defer v.s.direct.mu.Unlock()
	return v.s.direct.ended
}

// WaitDirect waits for the session's direct calls to return.
func (v *SSESessionView) WaitDirect() { v.s.direct.running.Wait() }

// DirectInFlight counts the session's direct calls registered.
func (v *SSESessionView) DirectInFlight() int {
	v.s.direct.mu.Lock()
	defer v.s.direct.mu.Unlock()
	return len(v.s.direct.cancels)
}

// TakeCall starts msg on the session's direct path and reports whether it did.
func (v *SSESessionView) TakeCall(msg jsonrpc.Message) bool { return v.s.takeCall(msg, nil) }
