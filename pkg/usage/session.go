// Package usage turns a session record's entries into what the session used, and sums it per
// runtime (docs/record.md §3). It holds no client: the leader's record controller feeds it the
// entries it appends (Ledger.Observe), and the agentruntime controller reads its sums.
//
// The figures: sandboxd's `usage` entries, and the usage of its `sandbox.stopped` entry, are
// cumulative for their boot (CPU time, memory integrated over time, tool calls): a boot's figure
// is its last one, and a claim's boots (a restarted sandbox) add up. The workspace's bytes are a
// level, not a flow: the session's figure is the last one measured. Egress bytes come in the
// gateway's `egress` entries, one exchange each, and add up.
package usage

import "github.com/airlock-dev/airlock/pkg/record"

// Session is what the claim whose record holds entries used: the record's entries in order, from
// its first. An entry that appears twice (by seq) counts once.
func Session(entries []record.Entry) record.Usage {
	var c Tracker
	for _, e := range entries {
		c.Observe(e)
	}
	return c.Total()
}

// boot is what one sandboxd boot reported.
type boot struct {
	last record.Usage // its last cumulative figures
	base record.Usage // figures already counted elsewhere (a claim carried over a failover)
	// carried: the boot was seen first after its start (not from its sandbox.boot entry), so its
	// first figures are base, not usage of this ledger's.
	carried bool
	seen    bool // a figure was seen (base is set for a carried boot)
	// workspace is the workspace's bytes at the boot's stop, when it measured them.
	workspace    int64
	hasWorkspace bool
}

// Tracker is what one claim's record says it used so far, fed one entry at a time in the
// record's order (the record controller may keep one per claim for its seal's usage). Its zero
// value is ready.
type Tracker struct {
	lastSeq uint64
	boots   map[string]*boot
	order   []string // boots, in the order first seen
	egress  int64
	// carried: the claim was first seen past its first entry (a new leader resumed its record).
	carried bool
}

// Observe takes one entry; it returns false for an entry already seen (seq not past the last).
// A Tracker whose first entry is past the record's first (seq > 1) counts each boot it first sees
// past its start from its first figure on: what came before was counted elsewhere (§3).
func (c *Tracker) Observe(e record.Entry) bool {
	if e.Seq != 0 {
		if e.Seq <= c.lastSeq {
			return false
		}
		if c.lastSeq == 0 && c.boots == nil && e.Seq > 1 {
			c.carried = true
		}
		c.lastSeq = e.Seq
	}
	switch {
	case e.Source == record.SourceSandboxd && e.Boot != "":
		c.observeSandboxd(e)
	case e.Source == record.SourceGateway && e.Kind == record.KindEgress && e.Usage != nil:
		c.egress += max(e.Usage.EgressBytes, 0)
	}
	return true
}

func (c *Tracker) observeSandboxd(e record.Entry) {
	if c.boots == nil {
		c.boots = map[string]*boot{}
	}
	b, ok := c.boots[e.Boot]
	if !ok {
		b = &boot{carried: c.carried && e.SourceSeq > 1}
		c.boots[e.Boot] = b
		c.order = append(c.order, e.Boot)
	}
	if e.Usage == nil || (e.Kind != record.KindUsage && e.Kind != record.KindSandboxStopped) {
		return
	}
	u := *e.Usage
	u.WorkspaceBytes, u.EgressBytes = 0, 0
	if !b.seen && b.carried {
		b.base = u
	}
	b.seen = true
	b.last = maxUsage(b.last, u)
	if e.Kind == record.KindSandboxStopped && e.Usage.WorkspaceBytes > 0 {
		b.workspace, b.hasWorkspace = e.Usage.WorkspaceBytes, true
	}
}

// Total is the claim's usage: its boots' figures less what was counted before, the last
// workspace figure, its egress.
func (c *Tracker) Total() record.Usage {
	var t record.Usage
	for _, id := range c.order {
		b := c.boots[id]
		t.CPUMillis += max(b.last.CPUMillis-b.base.CPUMillis, 0)
		t.MemoryMiBSeconds += max(b.last.MemoryMiBSeconds-b.base.MemoryMiBSeconds, 0)
		t.ToolCalls += max(b.last.ToolCalls-b.base.ToolCalls, 0)
		if b.hasWorkspace {
			t.WorkspaceBytes = b.workspace
		}
	}
	t.EgressBytes = c.egress
	return t
}

// maxUsage is the larger of each cumulative figure: a figure of a boot never goes back.
func maxUsage(a, b record.Usage) record.Usage {
	return record.Usage{
		CPUMillis:        max(a.CPUMillis, b.CPUMillis),
		MemoryMiBSeconds: max(a.MemoryMiBSeconds, b.MemoryMiBSeconds),
		ToolCalls:        max(a.ToolCalls, b.ToolCalls),
	}
}

// Add is a + b, figure by figure.
func Add(a, b record.Usage) record.Usage {
	return record.Usage{
		CPUMillis:        a.CPUMillis + b.CPUMillis,
		MemoryMiBSeconds: a.MemoryMiBSeconds + b.MemoryMiBSeconds,
		WorkspaceBytes:   a.WorkspaceBytes + b.WorkspaceBytes,
		EgressBytes:      a.EgressBytes + b.EgressBytes,
		ToolCalls:        a.ToolCalls + b.ToolCalls,
	}
}

// Sub is a - b, figure by figure.
func Sub(a, b record.Usage) record.Usage {
	return record.Usage{
		CPUMillis:        a.CPUMillis - b.CPUMillis,
		MemoryMiBSeconds: a.MemoryMiBSeconds - b.MemoryMiBSeconds,
		WorkspaceBytes:   a.WorkspaceBytes - b.WorkspaceBytes,
		EgressBytes:      a.EgressBytes - b.EgressBytes,
		ToolCalls:        a.ToolCalls - b.ToolCalls,
	}
}
