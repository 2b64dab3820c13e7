package agentruntime

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// usagePeriod is how often at most a runtime's status.usage is written, and how often a runtime
// whose usage is kept is looked at again (docs/record.md §3).
const usagePeriod = time.Minute

// UsageSource is what the controller reads a runtime's usage from: the term's usage.Ledger, which
// the record controller feeds.
type UsageSource interface {
	// Seed carries the runtime's status.usage into the source (until Written, per UID).
	Seed(ns, name, uid string, seed usage.Totals)
	// Written says that status.usage was written from Snapshot.
	Written(ns, name string)
	// Snapshot is the runtime's sums, and whether they were seeded.
	Snapshot(ns, name string) (usage.Totals, bool)
	// ForgetRuntime drops a deleted runtime's sums.
	ForgetRuntime(ns, name string)
}

// SetUsageSource makes the controller write status.usage from src (before Run). Without one,
// status.usage is left as it is.
func (c *Controller) SetUsageSource(src UsageSource) { c.usage = src }

// runtimeUsage is the status.usage to write and when to look at the runtime again (0: not on
// usage's account). The source is seeded from the status first, so that what the status carries
// (a former leader's sums) is never written over. New figures are written at most once per
// usagePeriod, by the status's own updateTime (which a new leader reads too).
func (c *Controller) runtimeUsage(rt *airlockv1alpha1.AgentRuntime) (*airlockv1alpha1.RuntimeUsage, time.Duration) {
	current := rt.Status.Usage
	if c.usage == nil {
		return current, 0
	}
	c.usage.Seed(rt.Namespace, rt.Name, string(rt.UID), totalsOf(current))
	snap, seeded := c.usage.Snapshot(rt.Namespace, rt.Name)
	if !seeded || snap == totalsOf(current) {
		return current, usagePeriod
	}
	now := c.clock.Now()
	if current != nil && current.UpdateTime != nil {
		if wait := usagePeriod - now.Sub(current.UpdateTime.Time); wait > 0 {
			return current, wait
		}
	}
	t := metav1.NewTime(now)
	return &airlockv1alpha1.RuntimeUsage{
		CPUMillis: snap.CPUMillis, MemoryMiBSeconds: snap.MemoryMiBSeconds, WorkspaceBytes: snap.WorkspaceBytes,
		EgressBytes: snap.EgressBytes, ToolCalls: snap.ToolCalls, Sessions: snap.Sessions, UpdateTime: &t,
	}, usagePeriod
}

// totalsOf is status.usage's figures (zero when there is none).
func totalsOf(u *airlockv1alpha1.RuntimeUsage) usage.Totals {
	if u == nil {
		return usage.Totals{}
	}
	return usage.Totals{Usage: record.Usage{CPUMillis: u.CPUMillis, MemoryMiBSeconds: u.MemoryMiBSeconds, WorkspaceBytes: u.WorkspaceBytes,
		EgressBytes: u.EgressBytes, ToolCalls: u.ToolCalls}, Sessions: u.Sessions}
}
