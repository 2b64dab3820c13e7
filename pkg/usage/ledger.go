package usage

import (
	"sync"

	"github.com/airlock-dev/airlock/pkg/record"
)

// Key names a runtime: its namespace and name.
type Key struct{ Namespace, Name string }

// Totals is what a runtime's sessions used.
type Totals struct {
	record.Usage
	// Sessions counts the claims summed (a claim carried over a leader's change counts once:
	// in the seed).
	Sessions int64
}

// runtime is one runtime's sums: what was carried in (Seed) and what this ledger observed.
type runtime struct {
	uid    string
	seeded bool
	// written: the runtime's status was written from this ledger; its seed is fixed from then.
	written  bool
	seed     Totals
	observed Totals // the sum of its claims' totals as this ledger counted them
}

// maxSealed bounds the claims remembered as ended (so that an entry of theirs seen again is
// not counted again).
const maxSealed = 4096

// Ledger sums usage per runtime (namespace + AgentRuntime name), fed one record entry at a time
// by the leader's record controller, and remembers what each live claim counted so that an
// entry seen twice (by seq) counts once. Safe for concurrent use.
//
// Across a leader's change (docs/record.md §3): the new leader's ledger starts from each
// runtime's status.usage (Seed) and adds what it observes after. A claim first seen past its
// record's first entry was counted by the old leader up to its last status write: each of its
// boots counts from its first figure seen here on, so it is never counted twice; what it used
// between the old leader's last write and that figure (at most about two minutes a live
// session) is not counted.
type Ledger struct {
	metrics *Metrics

	mu       sync.Mutex
	runtimes map[Key]*runtime
	claims   map[string]*ledgerClaim
	sealed   map[string]bool
	sealedQ  []string
}

type ledgerClaim struct {
	key   Key
	claim Tracker
	total record.Usage // claim.total() as last added to its runtime
}

// NewLedger returns an empty ledger that counts into m (nil: no metrics).
func NewLedger(m *Metrics) *Ledger {
	return &Ledger{metrics: m, runtimes: map[Key]*runtime{}, claims: map[string]*ledgerClaim{}, sealed: map[string]bool{}}
}

// Observe takes one entry appended to the record of the claim claimUID of runtime (namespace
// ns): the record controller's observer hook. A claim is its runtime's from its first entry
// seen on; an entry of a claim not seen before whose runtime is not known (runtimeName empty:
// the claim is gone) is not counted, since it cannot be said whose it is. It does not block.
func (l *Ledger) Observe(ns, runtimeName, claimUID string, e record.Entry) {
	key := Key{ns, runtimeName}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sealed[claimUID] {
		return
	}
	c, ok := l.claims[claimUID]
	if !ok {
		if runtimeName == "" {
			return
		}
		c = &ledgerClaim{key: key}
		l.claims[claimUID] = c
	}
	first := c.claim.lastSeq == 0 && c.claim.boots == nil
	if !c.claim.Observe(e) {
		return
	}
	rt := l.runtimeLocked(c.key)
	if first && !c.claim.carried {
		rt.observed.Sessions++
		l.metrics.addSessions(c.key)
	}
	total := c.claim.Total()
	delta := Sub(total, c.total)
	c.total = total
	rt.observed.Usage = Add(rt.observed.Usage, delta)
	l.metrics.add(c.key, delta, rt.observed.WorkspaceBytes+rt.seed.WorkspaceBytes)
	if e.Kind == record.KindRecordSealed {
		l.forgetLocked(claimUID)
	}
}

// Forget drops a claim's state (a claim deleted without its record's seal); what it counted
// stays in its runtime's sums.
func (l *Ledger) Forget(claimUID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked(claimUID)
}

func (l *Ledger) forgetLocked(claimUID string) {
	delete(l.claims, claimUID)
	if l.sealed[claimUID] {
		return
	}
	l.sealed[claimUID] = true
	l.sealedQ = append(l.sealedQ, claimUID)
	if len(l.sealedQ) > maxSealed {
		delete(l.sealed, l.sealedQ[0])
		l.sealedQ = l.sealedQ[1:]
	}
}

func (l *Ledger) runtimeLocked(key Key) *runtime {
	rt, ok := l.runtimes[key]
	if !ok {
		rt = &runtime{}
		l.runtimes[key] = rt
	}
	return rt
}

// Seed carries a runtime's sums in from its status (a new leader's start): what its sums start
// from. Until Written, a later Seed replaces it (a cache that had not yet shown the former
// leader's last write); after, Seed does nothing, since the status then holds this ledger's own
// sums. A runtime seeded with another UID is another runtime (deleted and created again under
// its name): its sums start again from seed.
func (l *Ledger) Seed(ns, name, uid string, seed Totals) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rt := l.runtimeLocked(Key{ns, name})
	switch {
	case rt.seeded && rt.uid != uid:
		*rt = runtime{uid: uid, seed: seed, seeded: true}
	case !rt.written:
		rt.uid, rt.seed, rt.seeded = uid, seed, true
	}
}

// Written says that the runtime's status was written from Snapshot: its seed is fixed.
func (l *Ledger) Written(ns, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rt, ok := l.runtimes[Key{ns, name}]; ok && rt.seeded {
		rt.written = true
	}
}

// Snapshot is the runtime's sums and whether it was seeded: a status written from an unseeded
// ledger would lose what the status carried.
func (l *Ledger) Snapshot(ns, name string) (Totals, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rt, ok := l.runtimes[Key{ns, name}]
	if !ok {
		return Totals{}, false
	}
	return Totals{Usage: Add(rt.seed.Usage, rt.observed.Usage), Sessions: rt.seed.Sessions + rt.observed.Sessions}, rt.seeded
}

// ForgetRuntime drops a deleted runtime's sums and its series.
func (l *Ledger) ForgetRuntime(ns, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := Key{ns, name}
	delete(l.runtimes, key)
	for uid, c := range l.claims {
		if c.key == key {
			delete(l.claims, uid)
		}
	}
	l.metrics.forget(key)
}
