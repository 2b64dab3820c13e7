package operator

import (
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	recordcontroller "github.com/airlock-dev/airlock/pkg/controller/record"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// usageObserver feeds the term's usage ledger with every entry the record controller appends
// (docs/record.md §3): the claim's namespace and runtime name are its key.
func usageObserver(l *usage.Ledger) recordcontroller.Observer {
	return func(c *airlockv1alpha1.SandboxClaim, e record.Entry) {
		l.Observe(c.Namespace, c.Spec.RuntimeName, string(c.UID), e)
	}
}
