package main

// The reacquire, resume and bench plans (main.go runs them).

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/pkg/client"
)

// runReacquire acquires, uses and closes the same session and handle p.Sessions times in a row.
func runReacquire(ctx context.Context, p Plan) *ReacquireResult {
	out := &ReacquireResult{Rounds: []ReacquireRound{}}
	s, err := apiSession(p, p.Session)
	if err != nil {
		out.Error = "the Sandbox API's CA: " + err.Error()
		return out
	}
	prevAuth := ""
	for i := 0; i < p.Sessions; i++ {
		got, d, err := acquire(ctx, s, p)
		if err != nil {
			out.Error = fmt.Sprintf("round %d: acquire: %v", i, err)
			return out
		}
		r := ReacquireRound{Claim: got.Claim, AcquireMillis: ms(d)}
		url := got.Response.Addresses[0].URL
		sctx, cancel := context.WithCancel(ctx)
		cs, _, err := connectRetry(sctx, url, got.Response.Headers, p.Transport)
		if err != nil {
			cancel()
			out.Error = fmt.Sprintf("round %d: connect %s: %v", i, url, err)
			return out
		}
		m := call(ctx, cs, Step{Tool: "Bash", Args: map[string]any{"command": markerCommand}})
		r.Marker = strings.TrimSpace(m.Text + m.Err)
		r.Resumed = got.ResumedWorkspace != nil
		j := call(ctx, cs, Step{Tool: "Bash", Args: map[string]any{"command": fmt.Sprintf(journalCommand, i)}})
		r.JournalSHA256 = strings.TrimSpace(j.Text + j.Err)
		if e := call(ctx, cs, Step{Tool: "Bash", Args: map[string]any{"command": escapeCommand}}); e.Err != "" || strings.TrimSpace(e.Text) != "escaped" {
			out.Error = fmt.Sprintf("round %d: leaving a process behind: %q %s", i, e.Text, e.Err)
			cancel()
			return out
		}
		if prevAuth != "" {
			r.PrevTokenStatus = rawStatus(ctx, url, prevAuth)
		}
		prevAuth = got.Authorization
		cs.Close()
		cancel()
		out.Rounds = append(out.Rounds, r)
		say("round %d: claim %s in %.0f ms, pod %s, previous token -> %d", i, r.Claim, r.AcquireMillis, r.Marker, r.PrevTokenStatus)
		if _, err := s.Close(ctx); err != nil {
			out.Error = fmt.Sprintf("round %d: close: %v", i, err)
			return out
		}
	}
	return out
}

func runBench(ctx context.Context, p Plan) *BenchResult {
	out := &BenchResult{}
	cfg, err := apiConfig(p)
	if err != nil {
		out.Error = "the Sandbox API's CA: " + err.Error()
		return out
	}
	// The sessions share cfg's HTTP client, as one runtime process does.
	newSession := func(id string) *client.Session {
		s, err := client.NewSession(cfg, id)
		if err != nil {
			panic(err) // cfg is complete: nothing is left to fail
		}
		return s
	}
	if p.Connect {
		start := time.Now()
		if _, err := newSession(p.Session + "-connect").Close(ctx); err != nil {
			out.Error = "the first call of the Sandbox API: " + err.Error()
			return out
		}
		out.ConnectMillis = ms(time.Since(start))
	}
	for i := 0; i < p.Sessions; i++ {
		if i > 0 && p.GapMillis > 0 {
			select {
			case <-time.After(time.Duration(p.GapMillis) * time.Millisecond):
			case <-ctx.Done():
				out.Error = ctx.Err().Error()
				return out
			}
		}
		session := fmt.Sprintf("%s-%02d", p.Session, i)
		began := time.Now()
		s := newSession(session)
		got, d, err := acquire(ctx, s, p)
		if err != nil {
			out.Error = fmt.Sprintf("acquire %s: %v", session, err)
			return out
		}
		out.AcquireMillis = append(out.AcquireMillis, ms(d))
		sctx, cancel := context.WithCancel(ctx)
		cs, wait, err := connectRetry(sctx, got.Response.Addresses[0].URL, got.Response.Headers, p.Transport)
		out.ReachableMillis = append(out.ReachableMillis, ms(wait))
		if err != nil {
			cancel()
			out.Error = fmt.Sprintf("connect %s: %v", session, err)
			return out
		}
		r := call(ctx, cs, Step{Tool: "Bash", Args: map[string]any{"command": "echo hi"}})
		if r.Err != "" || r.IsError {
			out.Error = fmt.Sprintf("first call %s: %s %s", session, r.Err, r.Text)
		}
		out.FirstCallMillis = append(out.FirstCallMillis, r.Millis)
		out.FirstResultMillis = append(out.FirstResultMillis, ms(time.Since(began)))
		if i == 0 && p.RoundTrips > 0 {
			w := call(ctx, cs, Step{Tool: "Write", Args: map[string]any{"file_path": "rt.txt", "content": "round trip\n"}})
			if w.Err != "" || w.IsError {
				out.Error = "write: " + w.Err + w.Text
			}
			for j := 0; j < p.RoundTrips; j++ {
				r := call(ctx, cs, Step{Tool: "Read", Args: map[string]any{"file_path": "rt.txt"}})
				if r.Err != "" || r.IsError {
					out.Error = "read: " + r.Err + r.Text
					break
				}
				out.RoundTripMillis = append(out.RoundTripMillis, r.Millis)
			}
		}
		cs.Close()
		cancel()
		if _, err := s.Close(ctx); err != nil {
			out.Error = fmt.Sprintf("close %s: %v", session, err)
			return out
		}
		if out.Error != "" {
			return out
		}
	}
	sort.Float64s(out.RoundTripMillis)
	return out
}

// ResumeRound is one round of `resume`: one acquire of the plan's session and handle, which
// resumes the workspace the previous round (or invocation) left.
type ResumeRound struct {
	Claim string `json:"claim"`
	// AcquireMillis is the acquire call to its 200 (Bound); FirstResultMillis the acquire call to
	// the first tool result (acquire, connect, the tree hash's Bash call).
	AcquireMillis     float64 `json:"acquireMillis"`
	FirstResultMillis float64 `json:"firstResultMillis"`
	// Resumed says whether the acquire answered resumedWorkspace.
	Resumed bool `json:"resumed"`
	// StartSHA256 is the workspace's tree hash (treeHashCommand) as the round found it (its first
	// tool call), EndSHA256 after the round changed it (a line appended to its journal).
	StartSHA256 string `json:"startSHA256"`
	EndSHA256   string `json:"endSHA256"`
}

// ResumeResult is the output of `resume`.
type ResumeResult struct {
	Rounds []ResumeRound `json:"rounds"`
	Error  string        `json:"error,omitempty"`
}

// treeHashCommand prints one SHA-256 of the whole workspace: every regular file's path and
// content (sha256sum of each, in byte order of the paths), sandboxd's own transient files left
// out (a readiness probe's, an atomic write's).
const treeHashCommand = `find . -type f ! -name '.airlock-readyz-*' ! -name '.*.airlock-*.tmp' -print0 | LC_ALL=C sort -z | ` +
	`xargs -0 -r sha256sum | sha256sum | cut -d' ' -f1`

// seedCommand writes the files a session leaves: sources in nested directories, a journal, an
// empty file, an executable, and 2 MiB of random bytes.
const seedCommand = `mkdir -p src/pkg/util notes bin && ` +
	`printf 'package main\n\nfunc main() { println("resume") }\n' > src/main.go && ` +
	`printf 'package util\n\nfunc N() int { return 42 }\n' > src/pkg/util/util.go && ` +
	`printf 'seed\n' > notes/journal.txt && : > notes/empty && ` +
	`printf '#!/bin/sh\necho resume\n' > bin/run.sh && chmod 755 bin/run.sh && ` +
	`head -c 2097152 /dev/urandom > blob.bin && echo seeded`

// runResume acquires, checks and changes the workspace, and closes the same session and handle
// p.Sessions times, p.GapMillis apart (the pool's resume member starts meanwhile): each round's
// first tool call hashes the workspace (StartSHA256), which must be what the round before left
// (EndSHA256; p.ExpectSHA256 for the first), then it appends a line to the journal and hashes
// again. With p.Seed the first round writes the files first.
func runResume(ctx context.Context, p Plan) *ResumeResult {
	out := &ResumeResult{Rounds: []ResumeRound{}}
	s, err := apiSession(p, p.Session)
	if err != nil {
		out.Error = "the Sandbox API's CA: " + err.Error()
		return out
	}
	for i := 0; i < p.Sessions; i++ {
		if p.GapMillis > 0 && (i > 0 || !p.Seed) {
			select {
			case <-time.After(time.Duration(p.GapMillis) * time.Millisecond):
			case <-ctx.Done():
				out.Error = ctx.Err().Error()
				return out
			}
		}
		began := time.Now()
		got, d, err := acquire(ctx, s, p)
		if err != nil {
			out.Error = fmt.Sprintf("round %d: acquire: %v", i, err)
			return out
		}
		r := ResumeRound{Claim: got.Claim, AcquireMillis: ms(d), Resumed: got.ResumedWorkspace != nil}
		url := got.Response.Addresses[0].URL
		sctx, cancel := context.WithCancel(ctx)
		cs, _, err := connectRetry(sctx, url, got.Response.Headers, p.Transport)
		if err != nil {
			cancel()
			out.Error = fmt.Sprintf("round %d: connect %s: %v", i, url, err)
			return out
		}
		// The tree hash first (the round's first tool result), the seed, a line appended, the hash.
		type bashStep struct {
			command string
			into    *string
		}
		steps := []bashStep{{treeHashCommand, &r.StartSHA256}}
		if p.Seed && i == 0 {
			steps = append(steps, bashStep{seedCommand, nil})
		}
		steps = append(steps, bashStep{fmt.Sprintf(`mkdir -p notes && echo "round %d $(date +%%s%%N)" >> notes/journal.txt`, i), nil}, bashStep{treeHashCommand, &r.EndSHA256})
		for j, step := range steps {
			res := call(ctx, cs, Step{Tool: "Bash", Args: map[string]any{"command": step.command}})
			if j == 0 {
				r.FirstResultMillis = ms(time.Since(began))
			}
			if res.Err != "" || res.IsError {
				out.Error = fmt.Sprintf("round %d: %q: %s %s", i, step.command, res.Err, res.Text)
				cs.Close()
				cancel()
				return out
			}
			if step.into != nil {
				*step.into = strings.TrimSpace(res.Text)
			}
		}
		cs.Close()
		cancel()
		out.Rounds = append(out.Rounds, r)
		say("round %d: claim %s in %.0f ms, first tool result %.0f ms, resumed %v, workspace %s -> %s", i, r.Claim, r.AcquireMillis, r.FirstResultMillis, r.Resumed, short(r.StartSHA256), short(r.EndSHA256))
		if _, err := s.Close(ctx); err != nil {
			out.Error = fmt.Sprintf("round %d: close: %v", i, err)
			return out
		}
	}
	return out
}

// short is the first 12 characters of a hash, for say.
func short(h string) string { return h[:min(12, len(h))] }
