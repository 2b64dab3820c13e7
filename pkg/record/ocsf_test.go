package record

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestOCSFMapsEachKindToItsClass(t *testing.T) {
	s := testSigner(t, 1)
	entries, _ := build(t, s, claimA, 6, true)
	allowed := entries[4]
	allowed.Verdict = VerdictAllowed
	cases := []struct {
		name                      string
		e                         Entry
		class, category, activity int
		path                      []string // a field that must be there
		want                      any
	}{
		{"claim phase", entries[0], 6002, 6, 99, []string{"unmapped", "airlock", "phase"}, "Bound"},
		{"tool call", entries[1], 6003, 6, 99, []string{"api", "operation"}, "Write"},
		{"tool call status", entries[1], 6003, 6, 99, []string{"status_id"}, float64(1)},
		{"file write", entries[2], 1001, 1, 3, []string{"file", "path"}, "a.go"},
		{"file size", entries[2], 1001, 1, 3, []string{"file", "size"}, float64(122)},
		{"process", entries[3], 1007, 1, 1, []string{"process", "cmd_line"}, "/bin/bash -c go test ./..."},
		{"exit code", entries[3], 1007, 1, 1, []string{"unmapped", "airlock", "exit_code"}, float64(0)},
		{"egress denied", entries[4], 4001, 4, 5, []string{"disposition"}, "Blocked"},
		{"egress host", entries[4], 4001, 4, 5, []string{"dst_endpoint", "hostname"}, "proxy.golang.org"},
		{"egress allowed", allowed, 4001, 4, 1, []string{"disposition_id"}, float64(1)},
		{"credential by name", entries[4], 4001, 4, 5, []string{"unmapped", "airlock", "credential"}, "goproxy"},
		{"seal", entries[6], 6002, 6, 99, []string{"unmapped", "airlock", "count"}, float64(7)},
		{"chain kept", entries[2], 1001, 1, 3, []string{"unmapped", "airlock", "hash"}, entries[2].Hash},
		{"uid", entries[2], 1001, 1, 3, []string{"metadata", "uid"}, claimA + "/3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := OCSF(c.e)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if m["class_uid"] != float64(c.class) || m["category_uid"] != float64(c.category) ||
				m["activity_id"] != float64(c.activity) || m["type_uid"] != float64(c.class*100+c.activity) {
				t.Errorf("class %v category %v activity %v type %v, want %d %d %d", m["class_uid"], m["category_uid"], m["activity_id"], m["type_uid"], c.class, c.category, c.activity)
			}
			var got any = m
			for _, k := range c.path {
				got = got.(map[string]any)[k]
			}
			if got != c.want {
				t.Errorf("%s = %v, want %v", strings.Join(c.path, "."), got, c.want)
			}
			if m["time"] == nil || m["metadata"].(map[string]any)["version"] != OCSFVersion {
				t.Errorf("no time or version: %s", b)
			}
		})
	}
	if _, err := OCSF(Entry{Time: "yesterday"}); err == nil {
		t.Error("an entry with a bad time was mapped")
	}
}
