package sandboxd

import (
	"net/url"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/traceparent"
)

// callTrace is a tool call's place in its caller's trace (docs/record.md §1): the trace, the
// call's own span (drawn at random) and the caller's span, its parent. sandboxd exports nothing
// (a sandbox reaches nothing): the ids ride in the call's record entries, and the operator
// exports them as spans when it collects the entries (pkg/recordtrace).
type callTrace struct {
	traced bool
	trace  traceparent.TraceID
	span   traceparent.SpanID
	parent traceparent.SpanID
}

// metaTraceparent is the key of a tools/call's params._meta that carries a traceparent.
const metaTraceparent = "traceparent"

// callTraceOf reads the caller's traceparent: params._meta.traceparent of the call wins (one MCP
// connection carries calls of many traces), else the HTTP request's traceparent header. A
// malformed one is ignored, never an error; a call with none, or one that was not sampled, is
// not traced (its entries carry no ids and its processes no TRACEPARENT).
func callTraceOf(req mcp.Request) callTrace {
	parent, ok := traceparent.Parent{}, false
	if p, isCall := req.GetParams().(*mcp.CallToolParamsRaw); isCall && p.Meta != nil {
		if s, isString := p.Meta[metaTraceparent].(string); isString {
			parent, ok = traceparent.Parse(s)
		}
	}
	if extra := req.GetExtra(); !ok && extra != nil && extra.Header != nil {
		parent, ok = traceparent.Parse(extra.Header.Get(traceparent.Header))
	}
	if !ok || !parent.Sampled {
		return callTrace{}
	}
	return callTrace{traced: true, trace: parent.Trace, span: traceparent.NewSpanID(), parent: parent.Span}
}

// ids returns the entry fields of a span of the call: the call's own span (span), or a child of
// it (a process: a span of its own whose parent is the call's).
func (t callTrace) ids(span, parent traceparent.SpanID) (traceID, spanID, parentID string) {
	if !t.traced {
		return "", "", ""
	}
	return t.trace.String(), span.String(), parent.String()
}

// proxyVars are the variables of the sandbox's environment that name the egress gateway
// (pkg/sandboxpod), with the credential in their URL's user information.
var proxyVars = []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"}

// processEnv is what a process the call starts gets last in its environment: TRACEPARENT of the
// call's span, and each proxy URL of sandboxd's environment with the call's span before the
// credential's user name (traceparent.ProxyUser), so that the gateway parents its egress span on
// the call (docs/security.md: attribution only, never the credential's check). getenv is
// os.Getenv but in tests.
func (t callTrace) processEnv(getenv func(string) string) []string {
	if !t.traced {
		return nil
	}
	tp := traceparent.Parent{Trace: t.trace, Span: t.span, Sampled: true}
	env := []string{traceparent.Env + "=" + tp.String()}
	for _, name := range proxyVars {
		if v := proxyWithSpan(getenv(name), tp); v != "" {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// proxyWithSpan is the proxy URL raw with the span before its user name, or "" when raw has no
// user name to put it before (then the variable is left as it is).
func proxyWithSpan(raw string, tp traceparent.Parent) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || u.User.Username() == "" {
		return ""
	}
	if password, ok := u.User.Password(); ok {
		u.User = url.UserPassword(traceparent.ProxyUser(tp, u.User.Username()), password)
	} else {
		u.User = url.User(traceparent.ProxyUser(tp, u.User.Username()))
	}
	return u.String()
}

// processGetenv is where processEnv reads the proxy URLs: sandboxd's own environment.
var processGetenv = os.Getenv
