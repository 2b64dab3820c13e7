package main

// The reacquire and bench plans (main.go runs them).

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
