package operator

import (
	"context"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	recordcontroller "github.com/airlock-dev/airlock/pkg/controller/record"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordtrace"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// usageObserver feeds the term's usage ledger with every entry the record controller appends
// (docs/record.md §3): the claim's namespace and runtime name are its key.
func usageObserver(l *usage.Ledger) recordcontroller.Observer {
	return func(c *airlockv1alpha1.SandboxClaim, e record.Entry) {
		l.Observe(c.Namespace, c.Spec.RuntimeName, string(c.UID), e)
	}
}

// spanObserver exports the spans of the entries the record controller appends (docs/record.md
// §1): a tool call's, its files' and its processes', with the ids sandboxd gave them. x nil or
// off: nothing.
func spanObserver(ctx context.Context, x *recordtrace.Exporter) recordcontroller.Observer {
	return func(c *airlockv1alpha1.SandboxClaim, e record.Entry) {
		x.Observe(ctx, recordtrace.Claim{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID), Runtime: c.Spec.RuntimeName}, e)
	}
}
