package sandboxdtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Fake secrets of the formats the scrubber knows (none is live).
const (
	GitHubPAT = "ghp_R2d2C3poLuke0Leia1Han2Chewie3Yoda4xy"
	Bearer    = "mF_9.B5f-4.1JqM/abcDEF+xyz=="
)

// WriteFile writes content to name, making its directory.
func WriteFile(t testing.TB, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// MustSymlink makes name a symbolic link to target.
func MustSymlink(t testing.TB, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

// CheckFile checks that name holds want.
func CheckFile(t testing.TB, name, want string) {
	t.Helper()
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s = %q, want %q", name, got, want)
	}
}

// WantErrContaining fails unless err contains want.
func WantErrContaining(t testing.TB, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

// Alive reports whether the process pid exists and is not a zombie (orphans
// are reparented to a PID 1 that may not reap them).
func Alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	state := data[i+2]
	return state != 'Z' && state != 'X'
}

// WaitDead waits (bounded) until none of pids is alive.
func WaitDead(t testing.TB, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for _, pid := range pids {
		for Alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d is still alive", pid)
			}
			time.Sleep(5 * time.Millisecond) // polling another process's state: no channel to wait on
		}
	}
}

// ReadPID waits (bounded) for a command to write a pid into the file name.
func ReadPID(t testing.TB, name string) int {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		data, err := os.ReadFile(name)
		if err == nil && bytes.HasSuffix(data, []byte("\n")) {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatalf("%s holds %q", name, data)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", name)
		}
		time.Sleep(5 * time.Millisecond) // the file is written by another process
	}
}

// CallTool calls a tool and returns its result, failing on a protocol error.
func CallTool(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// CallOK calls a tool that must succeed and returns the text it answered.
func CallOK(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res := CallTool(t, cs, name, args)
	text := ContentText(res)
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", name, args, text)
	}
	return text
}

// ContentText is the text of a result's text contents.
func ContentText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// NoFragment fails if any 6-byte piece of secret's body shows in text.
func NoFragment(t testing.TB, text, secret string) {
	t.Helper()
	for i := 0; i+6 <= len(secret); i++ {
		if piece := secret[i : i+6]; strings.Contains(text, piece) {
			t.Errorf("the output shows %q, a piece of the secret %q", piece, secret)
			return
		}
	}
}

// ConnectInMemory connects server and a client over the SDK's in-memory
// transports, both closed when the test ends, and returns the client's
// session.
func ConnectInMemory(ctx context.Context, t testing.TB, server *mcp.Server, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, ct, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
