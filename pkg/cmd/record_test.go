//go:build !sandboxd_only

package cmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/record"
)

// writeRecord writes a sealed record of two entries and the signer's public key, and returns
// their paths.
func writeRecord(t *testing.T) (recordFile, keyFile string, lines []string) {
	t.Helper()
	priv, err := record.SigningKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := record.NewSigner(priv)
	c, _ := record.NewChain("uid-1", s)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var entries []record.Entry
	for _, tool := range []string{"Write", "Bash"} {
		e, err := c.Append(record.Entry{Time: record.FormatTime(now), Source: record.SourceSandboxd, Kind: record.KindToolCall, Tool: tool, Status: record.StatusOK})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	seal, a, err := c.Seal(now, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := record.WriteJSONL(&b, append(entries, seal), &a); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	recordFile, keyFile = filepath.Join(dir, "record.jsonl"), filepath.Join(dir, "key.pem")
	pem, _ := record.MarshalPublicKey(s.Public())
	if err := os.WriteFile(recordFile, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return recordFile, keyFile, strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

func TestRecordVerifyCommand(t *testing.T) {
	file, key, lines := writeRecord(t)
	code, stdout, stderr := runAirlock(t, "record", "verify", "--public-key", key, file)
	if code != 0 || !strings.Contains(stdout, "claim uid-1: intact and sealed: 3 entries") {
		t.Fatalf("verify of an intact record: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// The middle entry dropped: reported with its seq, exit 1.
	cut := strings.Join([]string{lines[0], lines[2], lines[3]}, "\n") + "\n"
	if err := os.WriteFile(file, []byte(cut), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runAirlock(t, "record", "verify", "--public-key", key, file)
	if code != 1 || !strings.Contains(stdout, "seq 2: dropped") || !strings.Contains(stdout, "tampered") || !strings.Contains(stderr, "not intact") {
		t.Fatalf("verify of a record with a dropped entry: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runAirlock(t, "record", "verify", file); code != 1 || !strings.Contains(stderr, "--public-key is required") {
		t.Errorf("verify without a key: exit %d, stderr %q", code, stderr)
	}
}

func TestRecordOCSFCommand(t *testing.T) {
	file, _, _ := writeRecord(t)
	code, stdout, stderr := runAirlock(t, "record", "ocsf", file)
	if code != 0 {
		t.Fatalf("ocsf: exit %d, stderr %q", code, stderr)
	}
	evs := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3 (the anchor left out):\n%s", len(evs), stdout)
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(evs[0]), &ev); err != nil {
		t.Fatal(err)
	}
	if ev["class_uid"] != float64(6003) || ev["api"].(map[string]any)["operation"] != "Write" {
		t.Errorf("first event %s", evs[0])
	}
}
