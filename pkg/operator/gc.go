package operator

import (
	"runtime/debug"

	"k8s.io/klog/v2"
)

// operatorGCPercent is the GOGC the operator runs with unless GOGC is set.
//
// What the operator keeps is its caches: with 2,000 claims (their pods, policies and runtimes)
// the live heap is about 28 MiB, while the process held 108–125 MiB (make bench, scale2000): the
// default GOGC of 100 lets the heap grow to twice what is live between two collections, and
// decoding a burst of claims (JSON: a CRD) makes garbage fast. 50 lets it grow by half: the heap
// stays within about 1.5 times what is live, for one more collection of a small heap for every
// two (docs/decisions.md, "Operator memory").
const operatorGCPercent = 50

// chooseGCPercent returns the GOGC to set, or 0 to leave it as GOGC in the environment says.
func chooseGCPercent(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		return 0
	}
	return operatorGCPercent
}

// TuneGC applies chooseGCPercent for this process.
func TuneGC(logger klog.Logger, getenv func(string) string) {
	if percent := chooseGCPercent(getenv); percent != 0 {
		debug.SetGCPercent(percent)
		logger.V(1).Info("Garbage collector", "gcPercent", percent)
	}
}
