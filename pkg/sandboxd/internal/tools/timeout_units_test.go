package tools

import (
	"strings"
	"testing"
	"time"
)

// TestTimeoutUnits (issue 39, small 3): a timeout of CodeGen-Sandbox's range (1 to 600, its
// seconds: default 120, maximum 600) is read in seconds; above it, in milliseconds (airlock's
// and Claude Code's unit: 120000 is 2 minutes). Before, 120 meant 120 ms.
func TestTimeoutUnits(t *testing.T) {
	for _, tc := range []struct {
		in   int
		want time.Duration
	}{
		{0, 5 * time.Minute}, // the default
		{1, time.Second},
		{120, 2 * time.Minute}, // CodeGen-Sandbox's default, in seconds
		{600, 10 * time.Minute},
		{601, 601 * time.Millisecond},
		{1000, time.Second},
		{120000, 2 * time.Minute}, // airlock's and Claude Code's 2 minutes, in milliseconds
		{600000, 10 * time.Minute},
	} {
		got, err := timeoutFrom(tc.in, 5*time.Minute, 10*time.Minute)
		if err != nil || got != tc.want {
			t.Errorf("timeoutFrom(%d) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []int{-1, 600001} {
		if got, err := timeoutFrom(in, 5*time.Minute, 10*time.Minute); err == nil {
			t.Errorf("timeoutFrom(%d) = %v, want an error", in, got)
		}
	}
}

// TestBashTimeoutInCodeGenSandboxSeconds (issue 39, small 3): CodeGen-Sandbox's `timeout: 1` is
// one second, so a command of a fraction of it finishes (before, it was killed after 1 ms);
// airlock's milliseconds still kill a command at their time.
func TestBashTimeoutInCodeGenSandboxSeconds(t *testing.T) {
	tb, _ := newTestToolbox(t)
	_, out, err := tb.bash(t.Context(), BashInput{Command: "sleep 0.2; echo done", Timeout: 1})
	if err != nil || out.TimedOut || out.ExitCode != 0 || out.Output != "done\n" {
		t.Errorf("timeout 1 (s): %+v, %v; want done in time", out, err)
	}
	res, out, err := tb.bash(t.Context(), BashInput{Command: "sleep 30", Timeout: 700})
	if err != nil || !out.TimedOut || out.DurationMs >= 30000 {
		t.Errorf("timeout 700 (ms): %+v, %v; want timed out", out, err)
	}
	if text := resultText(t, res); !strings.Contains(text, "700ms") {
		t.Errorf("text %q does not say 700ms", text)
	}
}
