//go:build e2e && realnode

package e2e

import "testing"

// TestRealNodeOperatorWritesOnlyWhatAirlockBuilds: on the real node too, the installed operator's
// ServiceAccount can create what airlock builds and nothing of another shape: a privileged pod,
// a pod in kube-system, a hostPath or a ServiceAccount token are refused by its admission policy.
func TestRealNodeOperatorWritesOnlyWhatAirlockBuilds(t *testing.T) {
	requireRealNode(t)
	checkOperatorWritesOnlyWhatAirlockBuilds(t)
}
