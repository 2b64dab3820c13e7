package sandboxd

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestDirectCallsAnswerAsTheSDK sends each call twice on one session: as a
// client sends it, which the direct path takes, and with a _meta key of the
// protocol's own (which the SDK ignores here), which sends it to the SDK. The two responses are the same bytes, and the
// direct path took exactly the first of each pair.
func TestDirectCallsAnswerAsTheSDK(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	if err := os.WriteFile(filepath.Join(ts.ws, "a.txt"), []byte("<b>&amp;</b> \u2028 é \"q\" \\ \x01\nline 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, endpoint := sandboxdtest.InitializedSession(t, ts.url)
	tests := directCallCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ts.sse.DirectCalls()
			meta := ""
			if tt.meta != "" {
				meta = `"_meta":` + tt.meta + `,`
			}
			direct := sandboxdtest.CallRaw(t, s, endpoint, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{%s"name":%q,"arguments":%s}}`, tt.id, meta, tt.tool, tt.args))
			if got := ts.sse.DirectCalls() - before; got != 1 {
				t.Fatalf("direct calls = %d, want 1", got)
			}
			viaSDK := sandboxdtest.CallRaw(t, s, endpoint, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/test":true},"name":%q,"arguments":%s}}`, tt.id, tt.tool, tt.args))
			if got := ts.sse.DirectCalls() - before; got != 1 {
				t.Fatalf("direct calls = %d after the call for the SDK, want 1", got)
			}
			// Bash says how long it ran: the one thing the two may differ in.
			direct, viaSDK = durationMS.ReplaceAllString(direct, `"duration_ms":0`), durationMS.ReplaceAllString(viaSDK, `"duration_ms":0`)
			if direct != viaSDK {
				t.Errorf("direct:  %s\nvia SDK: %s", direct, viaSDK)
			}
		})
	}
}

// directCallCases are the calls that the direct paths' tests send both
// ways, direct and through the SDK.
var directCallCases = []struct {
	name, id, tool, args string
	meta                 string // the direct call's _meta, if any (an object)
}{
	{name: "Read", id: `7`, tool: toolnames.Read, args: `{"file_path":"a.txt"}`},
	{name: "string id with HTML", id: `"r-<&>\u2028"`, tool: toolnames.Read, args: `{"file_path":"a.txt","offset":2}`},
	{name: "tool error", id: `8`, tool: toolnames.Read, args: `{"file_path":"missing.txt"}`},
	{name: "escape refused", id: `9`, tool: toolnames.Read, args: `{"file_path":"../../etc/passwd"}`},
	{name: "invalid arguments", id: `10`, tool: toolnames.Read, args: `{"file_path":5}`},
	{name: "argument in another case", id: `11`, tool: toolnames.Read, args: `{"file_path":"a.txt","FILE_PATH":"b"}`},
	{name: "arguments not an object", id: `12`, tool: toolnames.Read, args: `[1]`},
	{name: "null arguments", id: `13`, tool: toolnames.LS, args: `null`},
	{name: "Glob", id: `14`, tool: toolnames.Glob, args: `{"pattern":"*.txt"}`},
	{name: "Bash", id: `15`, tool: toolnames.Bash, args: `{"command":"printf '<%s>' \"$((6*7))\"; echo oops >&2; exit 3"}`},
	{name: "secret scrubbed", id: `16`, tool: toolnames.Bash, args: `{"command":"echo ghp_0123456789abcdefghijABCDEFGHIJ012345"}`},
	{name: "a client's _meta", id: `17`, tool: toolnames.Read, args: `{"file_path":"a.txt"}`, meta: `{"progressToken":"p-1","claudecode/toolUseId":"toolu_01"}`},
	{name: "an empty _meta", id: `18`, tool: toolnames.Glob, args: `{"pattern":"*"}`, meta: `{}`},
}

var durationMS = regexp.MustCompile(`"duration_ms":[0-9]+`)
