package sandboxapi

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/claimname"
)

// The audit line: one structured log line per request of every endpoint (acquire, renew,
// sessions/open, sessions/close), at level 0 under the logger name "sandboxapi/audit", with the
// caller's ServiceAccount (empty when the request was not authenticated), the namespace, runtime,
// session hash (never the session: it is the runtime's secret-ish correlation id), handle and
// the HTTP status. A field the request did not get as far as (a body that does not decode) is
// empty.
const auditMessage = "Sandbox API audit"

// auditKey is the context key of a request's *auditRecord.
type auditKey struct{}

// auditRecord collects what the audit line of one request says.
type auditRecord struct {
	who                        caller
	namespace, runtime, handle string
	sessionHash                string
}

// noteAudit records the request's decoded target for its audit line.
func noteAudit(ctx context.Context, namespace, runtime, session, handle string) {
	a, ok := ctx.Value(auditKey{}).(*auditRecord)
	if !ok {
		return
	}
	a.namespace, a.runtime, a.handle = namespace, runtime, handle
	if session != "" {
		a.sessionHash = claimname.SessionHash(session)
	}
}

func (a *auditRecord) log(base klog.Logger, endpoint string, status int) {
	sa := ""
	if a.who.serviceAccount != "" {
		sa = a.who.namespace + "/" + a.who.serviceAccount
	}
	klog.LoggerWithName(base, "audit").Info(auditMessage,
		"endpoint", endpoint,
		"serviceAccount", sa,
		"namespace", a.namespace,
		"runtime", a.runtime,
		"sessionHash", a.sessionHash,
		"handle", a.handle,
		"status", status,
	)
}
