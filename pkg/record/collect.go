package record

import (
	"bytes"
	"fmt"
	"time"
)

// sandboxdKinds are the kinds sandboxd may write; the others are the operator's or the
// gateway's, and an entry of theirs read from a sandbox is not taken.
var sandboxdKinds = map[string]bool{
	KindToolCall: true, KindFileWrite: true, KindProcess: true, KindSandboxBoot: true,
	KindSandboxStopped: true, KindRecordGap: true, KindUsage: true,
}

// Collector takes what the operator reads from a sandbox's log (GET /record) into the claim's
// record (docs/record.md §2.1): each boot's entries must come from source_seq 1 on, one after
// the other, and end with sandbox.stopped. What is missing, out of order, not an entry, not
// sandboxd's to write, or unknown because the log ended early is written into the record as a
// record.gap entry that says so: nothing is dropped or invented unnoticed, and the chain still
// verifies.
type Collector struct {
	chain   *Chain
	now     func() time.Time
	boot    string
	last    uint64 // the last source_seq taken of boot
	stopped bool   // boot's stopped entry was taken
}

// NewCollector collects into chain. boot and last are where an earlier collector stopped (as the
// stored anchor's cursor says: a new leader resumes there), "" and 0 for a new record.
func NewCollector(chain *Chain, now func() time.Time, boot string, last uint64) *Collector {
	return &Collector{chain: chain, now: now, boot: boot, last: last}
}

// Cursor is where to read the log from next: GET /record?boot=<boot>&after=<after>.
func (c *Collector) Cursor() (boot string, after uint64) { return c.boot, c.last }

// Take takes one line read from sandboxd and returns the entries it appended to the record
// (the entry, with a gap before it where one is; or a gap alone when the line is not taken).
func (c *Collector) Take(line []byte) ([]Entry, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, nil
	}
	var e Entry
	if err := decodeStrict(line, &e); err != nil {
		return c.gaps(fmt.Sprintf("a line read from sandboxd (after source entry %d of boot %q) is not an entry: %v; not taken", c.last, c.boot, err))
	}
	switch {
	case e.Source != SourceSandboxd || e.Boot == "" || e.SourceSeq == 0:
		return c.gaps(fmt.Sprintf("an entry read from sandboxd does not say it is sandboxd's (source %q, boot %q, source_seq %d); not taken", e.Source, e.Boot, e.SourceSeq))
	case !sandboxdKinds[e.Kind]:
		return c.gaps(fmt.Sprintf("sandboxd sent an entry of kind %q (source entry %d of boot %s), which only the operator or the gateway writes; not taken", e.Kind, e.SourceSeq, e.Boot))
	}
	var gaps []string
	if e.Boot != c.boot {
		if c.boot != "" && !c.stopped {
			gaps = append(gaps, fmt.Sprintf("sandboxd boot %s ended without its stopped entry: its entries after source entry %d are unknown", c.boot, c.last))
		}
		c.boot, c.last, c.stopped = e.Boot, 0, false
	}
	switch {
	case c.stopped:
		return c.gaps(append(gaps, fmt.Sprintf("source entry %d of boot %s came after that boot's stopped entry; not taken", e.SourceSeq, e.Boot))...)
	case e.SourceSeq <= c.last:
		return c.gaps(append(gaps, fmt.Sprintf("source entry %d of boot %s came again or out of order (after %d); not taken", e.SourceSeq, e.Boot, c.last))...)
	case e.SourceSeq > c.last+1:
		gaps = append(gaps, fmt.Sprintf("source entries %d to %d of boot %s are missing", c.last+1, e.SourceSeq-1, e.Boot))
	}
	out, err := c.gaps(gaps...)
	if err != nil {
		return out, err
	}
	e.V, e.Claim, e.Seq, e.Prev, e.Hash, e.Key, e.Sig = 0, "", 0, "", "", "", ""
	appended, err := c.chain.Append(e)
	if err != nil {
		return out, err
	}
	c.last = e.SourceSeq
	c.stopped = e.Kind == KindSandboxStopped
	return append(out, appended), nil
}

// Ended says that the log will not be read any more (the pod is gone): when its boot did not
// end with its stopped entry, a gap says that what came after the last entry taken is unknown.
func (c *Collector) Ended(why string) ([]Entry, error) {
	if c.boot == "" || c.stopped {
		return nil, nil
	}
	c.stopped = true
	return c.gaps(fmt.Sprintf("%s before sandboxd boot %s's stopped entry was read: its entries after source entry %d are unknown", why, c.boot, c.last))
}

// gaps appends one record.gap entry of the operator's per message.
func (c *Collector) gaps(messages ...string) ([]Entry, error) {
	var out []Entry
	for _, m := range messages {
		e, err := c.chain.Append(Entry{Time: FormatTime(c.now()), Source: SourceOperator, Kind: KindRecordGap, Message: m})
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}
