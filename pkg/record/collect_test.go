package record

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// sandboxdLog is a sandbox's log as sandboxd serves it: boot, calls, stopped.
func sandboxdLog(t *testing.T, boot string, calls int, stopped bool) [][]byte {
	t.Helper()
	var lines [][]byte
	add := func(e Entry) {
		e.V, e.Source, e.Boot, e.SourceSeq, e.Time = Version, SourceSandboxd, boot, uint64(len(lines)+1), FormatTime(t0)
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, b)
	}
	add(Entry{Kind: KindSandboxBoot})
	for range calls {
		add(Entry{Kind: KindToolCall, Tool: "Read", Status: StatusOK})
	}
	if stopped {
		add(Entry{Kind: KindSandboxStopped, Count: uint64(calls + 2)})
	}
	return lines
}

// collect takes lines into a new record, ends it with why when why is not empty, and returns
// the record's gap messages and its Verify report.
func collect(t *testing.T, lines [][]byte, why string) ([]string, Report) {
	t.Helper()
	s := testSigner(t, 1)
	chain, _ := NewChain(claimA, s)
	c := NewCollector(chain, func() time.Time { return t0 }, "", 0)
	var all []Entry
	for _, l := range lines {
		got, err := c.Take(l)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
	}
	if why != "" {
		got, err := c.Ended(why)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
	}
	var gaps []string
	for _, e := range all {
		if e.Kind == KindRecordGap {
			gaps = append(gaps, e.Message)
		}
	}
	a, _ := chain.Anchor(t0)
	var b bytes.Buffer
	if err := WriteJSONL(&b, all, &a); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(&b, NewKeys(s.Public()), Options{Claim: claimA})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() {
		t.Fatalf("the collected record does not verify: %v", rep.Findings)
	}
	return gaps, rep
}

func expectGap(t *testing.T, gaps []string, want string) {
	t.Helper()
	if len(gaps) != 1 || !strings.Contains(gaps[0], want) {
		t.Fatalf("gaps %q, want one saying %q", gaps, want)
	}
}

func TestCollectedLogWithoutFaultsHasNoGap(t *testing.T) {
	gaps, rep := collect(t, sandboxdLog(t, "b1", 3, true), "the pod was deleted")
	if len(gaps) != 0 || rep.Entries != 5 {
		t.Fatalf("gaps %q, %d entries", gaps, rep.Entries)
	}
}

func TestCollectorRecordsAnEntryDroppedInTheLog(t *testing.T) {
	lines := sandboxdLog(t, "b1", 4, true)
	lines = append(lines[:2], lines[3:]...)
	gaps, _ := collect(t, lines, "")
	expectGap(t, gaps, "source entries 3 to 3 of boot b1 are missing")
}

func TestCollectorRecordsEntriesOutOfOrder(t *testing.T) {
	lines := sandboxdLog(t, "b1", 4, true)
	lines[2], lines[3] = lines[3], lines[2]
	gaps, _ := collect(t, lines, "")
	if len(gaps) != 2 || !strings.Contains(gaps[0], "source entries 3 to 3 of boot b1 are missing") ||
		!strings.Contains(gaps[1], "source entry 3 of boot b1 came again or out of order") {
		t.Fatalf("gaps %q", gaps)
	}
}

func TestCollectorRecordsAReplayedEntry(t *testing.T) {
	lines := sandboxdLog(t, "b1", 2, true)
	lines = append(lines[:3], append([][]byte{lines[1]}, lines[3:]...)...)
	gaps, _ := collect(t, lines, "")
	expectGap(t, gaps, "source entry 2 of boot b1 came again or out of order")
}

func TestCollectorRefusesAnOperatorsKindFromSandboxd(t *testing.T) {
	lines := sandboxdLog(t, "b1", 1, false)
	forged, _ := json.Marshal(Entry{V: 1, Time: FormatTime(t0), Source: SourceSandboxd, Boot: "b1", SourceSeq: 3, Kind: KindRecordSealed, Prev: ""})
	gaps, _ := collect(t, append(lines, forged), "")
	expectGap(t, gaps, `sandboxd sent an entry of kind "record.sealed"`)
	notOurs, _ := json.Marshal(Entry{V: 1, Time: FormatTime(t0), Source: SourceOperator, Kind: KindClaimPhase, Phase: "Bound"})
	gaps, _ = collect(t, append(sandboxdLog(t, "b1", 1, true), notOurs), "")
	expectGap(t, gaps, `does not say it is sandboxd's (source "operator"`)
}

func TestCollectorRecordsALineThatIsNotAnEntry(t *testing.T) {
	lines := sandboxdLog(t, "b1", 1, true)
	gaps, _ := collect(t, append(lines[:1], append([][]byte{[]byte(`{"kind":"tool.call","x":1}`)}, lines[1:]...)...), "")
	expectGap(t, gaps, "is not an entry")
}

func TestCollectorRecordsARestartWithoutStop(t *testing.T) {
	lines := append(sandboxdLog(t, "b1", 2, false), sandboxdLog(t, "b2", 1, true)...)
	gaps, _ := collect(t, lines, "")
	expectGap(t, gaps, "sandboxd boot b1 ended without its stopped entry: its entries after source entry 3 are unknown")
}

func TestCollectorRecordsALogCutByThePodsEnd(t *testing.T) {
	gaps, _ := collect(t, sandboxdLog(t, "b1", 2, false), "the pod ended")
	expectGap(t, gaps, "the pod ended before sandboxd boot b1's stopped entry was read: its entries after source entry 3 are unknown")
}

func TestCollectorResumesAtItsCursor(t *testing.T) {
	s := testSigner(t, 1)
	chain, _ := NewChain(claimA, s)
	lines := sandboxdLog(t, "b1", 3, true)
	first := NewCollector(chain, func() time.Time { return t0 }, "", 0)
	for _, l := range lines[:2] {
		if _, err := first.Take(l); err != nil {
			t.Fatal(err)
		}
	}
	boot, after := first.Cursor()
	if boot != "b1" || after != 2 {
		t.Fatalf("cursor %q %d, want b1 2", boot, after)
	}
	next := NewCollector(chain, func() time.Time { return t0 }, boot, after)
	for _, l := range lines[2:] {
		got, err := next.Take(l)
		if err != nil || len(got) != 1 || got[0].Kind == KindRecordGap {
			t.Fatalf("after the resume: %+v %v", got, err)
		}
	}
}
