// Package recordlog is sandboxd's part of the session record (docs/record.md §2.1): the log of
// what this sandbox's tool calls did, kept in sandboxd's memory only (no file in the pod is
// evidence: the agent can write every one; it cannot touch the memory of a not-dumpable PID 1),
// and the read-only endpoint over which the operator reads it, GET /record.
//
// The entries are unsigned: sandboxd holds no key the agent cannot read. The operator chains and
// signs them when it reads them (pkg/record). Nothing here trims, acknowledges or resets the log:
// the agent holds the claim's token, so any such request could be its.
package recordlog

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/pkg/record"
)

// DefaultMaxBytes bounds the log's entries (about 25,000 tool calls); past it the entries are
// counted, not kept, and one record.gap entry says so.
const DefaultMaxBytes = 8 << 20

// kept is one entry kept: its source_seq and its encoding.
type kept struct {
	seq  uint64
	line []byte
}

// Log is the session's log in sandboxd. Its zero value is not usable: New.
type Log struct {
	boot string
	now  func() time.Time
	max  int

	mu      sync.Mutex
	lines   []kept // the entries kept, in source_seq order
	bytes   int
	seq     uint64            // the last source_seq given
	full    bool              // the gap entry was written
	dropped map[string]uint64 // entries counted, not kept, by kind
	stopped bool              // the stopped entry was written: nothing more comes
	closed  bool              // streams end (shutdown)
	changed chan struct{}     // closed at each change, then replaced

	calls uint64 // the last tool call number given

	kinds map[string]uint64 // entries appended (kept or only counted), by kind
	// final, when set, gives the stopped entry's usage (docs/record.md §3): the boot's figures.
	final func() (*record.Usage, string)
}

// New returns a log with a new boot id whose first entry is sandbox.boot. now is its clock;
// maxBytes bounds it (DefaultMaxBytes when 0).
func New(now func() time.Time, maxBytes int) (*Log, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("drawing the record's boot id: %w", err)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	l := &Log{boot: hex.EncodeToString(b[:]), now: now, max: maxBytes, dropped: map[string]uint64{}, kinds: map[string]uint64{}, changed: make(chan struct{})}
	l.Append(record.Entry{Kind: record.KindSandboxBoot})
	return l, nil
}

// Boot is this sandboxd's boot id.
func (l *Log) Boot() string { return l.boot }

// NextCall numbers a tool call (from 1 per boot): its entries carry the number as `call`.
func (l *Log) NextCall() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	return l.calls
}

// Append adds e, with this log's source, boot, next source_seq and, when e has none, the time
// now. After Stop it does nothing.
func (l *Log) Append(e record.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.appendLocked(e)
}

func (l *Log) appendLocked(e record.Entry) {
	l.kinds[e.Kind]++
	l.seq++
	e.V, e.Source, e.Boot, e.SourceSeq = record.Version, record.SourceSandboxd, l.boot, l.seq
	if e.Time == "" {
		e.Time = record.FormatTime(l.now())
	}
	b, err := json.Marshal(e)
	if err != nil { // an entry holds strings and numbers only: not reached
		b = nil
	}
	keep := e.Kind == record.KindSandboxStopped || e.Kind == record.KindRecordGap
	if keep || !l.full && l.bytes+len(b) <= l.max {
		l.store(e.SourceSeq, b)
		return
	}
	if !l.full {
		// The gap takes this entry's place; the entry is counted with the next seq.
		l.full = true
		gap := record.Entry{V: e.V, Time: e.Time, Source: e.Source, Boot: e.Boot, SourceSeq: e.SourceSeq, Kind: record.KindRecordGap,
			Message: fmt.Sprintf("the record's buffer in sandboxd is full (%d bytes): from source entry %d on, entries are counted, not kept", l.max, e.SourceSeq+1)}
		gb, _ := json.Marshal(gap)
		l.store(gap.SourceSeq, gb)
		l.seq++
	}
	l.dropped[e.Kind]++
}

// store keeps the encoded entry b of source_seq seq and wakes the streams.
func (l *Log) store(seq uint64, b []byte) {
	l.lines = append(l.lines, kept{seq: seq, line: b})
	l.bytes += len(b)
	l.signalLocked()
}

func (l *Log) signalLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Count is how many entries of kind this boot appended, kept or only counted: the usage's tool
// calls are its tool.call entries.
func (l *Log) Count(kind string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kinds[kind]
}

// OnStop sets what gives the stopped entry its usage and, when some figure was not measured, a
// message that says which (usage.go in pkg/sandboxd). Stop calls it before it takes the log's
// lock; set it before the log is shared.
func (l *Log) OnStop(final func() (*record.Usage, string)) { l.final = final }

// Stop appends sandbox.stopped, with the count of every entry this boot made (kept or not) and
// what was not kept, and ends the log: the operator's stop calls it before it answers, so that
// the operator reads the log to its end. It returns the count; a second Stop does nothing.
func (l *Log) Stop() uint64 {
	var usage *record.Usage
	var unmeasured string
	if l.final != nil && !l.Stopped() {
		usage, unmeasured = l.final()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return l.seq
	}
	e := record.Entry{Kind: record.KindSandboxStopped, Count: l.seq + 1, Usage: usage}
	var notes []string
	if len(l.dropped) > 0 {
		notes = append(notes, "not kept: "+countsOf(l.dropped))
	}
	if unmeasured != "" {
		notes = append(notes, unmeasured)
	}
	e.Message = strings.Join(notes, "; ")
	l.appendLocked(e)
	l.stopped = true
	return l.seq
}

// Stopped says whether Stop was called.
func (l *Log) Stopped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopped
}

// Close ends every stream (shutdown) without ending the log.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.signalLocked()
	}
}

// after returns the entries after source_seq after, the source_seq of the last of them (after
// when there are none), a channel closed at the next change, and whether nothing more will come.
// Taken under one lock: when ended, the entries include the last.
func (l *Log) after(after uint64) (lines [][]byte, last uint64, changed <-chan struct{}, ended bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.lines), func(i int) bool { return l.lines[i].seq > after })
	last = after
	for _, k := range l.lines[i:] {
		lines = append(lines, k.line)
		last = k.seq
	}
	return lines, last, l.changed, l.stopped || l.closed
}

func countsOf(m map[string]uint64) string {
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}
