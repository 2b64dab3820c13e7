package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Version is the format of the entries this package writes.
const Version = 1

// domain separates the record's hashes and signatures from any other use of SHA-256 or the key.
const domain = "airlock.dev/record/v1"

// Sources of entries.
const (
	SourceOperator = "operator"
	SourceSandboxd = "sandboxd"
	SourceGateway  = "gateway"
)

// Kinds of entries.
const (
	KindClaimPhase      = "claim.phase"
	KindToolCall        = "tool.call"
	KindFileWrite       = "file.write"
	KindProcess         = "process"
	KindEgress          = "egress"
	KindSandboxBoot     = "sandbox.boot"
	KindSandboxStopped  = "sandbox.stopped"
	KindRecordGap       = "record.gap"
	KindRecordSealed    = "record.sealed"
	KindUsage           = "usage"
	StatusOK            = "ok"
	StatusError         = "error"
	StatusCanceled      = "canceled"
	StatusProtocolError = "protocol_error"
	VerdictAllowed      = "allowed"
	VerdictDenied       = "denied"
)

// Usage is what a session used (docs/record.md §3), in integers so that its encoding is one.
type Usage struct {
	CPUMillis        int64 `json:"cpu_millis"`
	MemoryMiBSeconds int64 `json:"memory_mib_seconds"`
	WorkspaceBytes   int64 `json:"workspace_bytes"`
	EgressBytes      int64 `json:"egress_bytes"`
	ToolCalls        int64 `json:"tool_calls"`
}

// Entry is one entry of a record. The field order is the canonical encoding's; optional fields
// are left out when empty. Hash, Key and Sig are set by Chain.Append.
type Entry struct {
	V         int    `json:"v"`
	Claim     string `json:"claim"`
	Seq       uint64 `json:"seq"`
	Time      string `json:"time"`
	Source    string `json:"source"`
	Boot      string `json:"boot,omitempty"`
	SourceSeq uint64 `json:"source_seq,omitempty"`
	Kind      string `json:"kind"`
	Call      uint64 `json:"call,omitempty"`
	Trace     string `json:"trace,omitempty"`
	Span      string `json:"span,omitempty"`
	// Parent is the span id of the span's parent (the caller's, from its traceparent), when the
	// call carried one.
	Parent string `json:"parent,omitempty"`

	// claim.phase
	Phase   string `json:"phase,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// tool.call
	Tool       string `json:"tool,omitempty"`
	ArgsSHA256 string `json:"args_sha256,omitempty"`
	Status     string `json:"status,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// file.write
	Path   string `json:"path,omitempty"`
	Size   *int64 `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// process
	Argv []string `json:"argv,omitempty"`
	Exit *int     `json:"exit,omitempty"`
	// egress
	Host       string `json:"host,omitempty"`
	Port       int    `json:"port,omitempty"`
	Verdict    string `json:"verdict,omitempty"`
	Credential string `json:"credential,omitempty"`
	// sandbox.stopped, record.sealed
	Count uint64 `json:"count,omitempty"`
	Usage *Usage `json:"usage,omitempty"`

	Prev string `json:"prev"`
	Hash string `json:"hash,omitempty"`
	Key  string `json:"key,omitempty"`
	Sig  string `json:"sig,omitempty"`
}

// FormatTime is the one form of an entry's time: RFC 3339, UTC, nanoseconds.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// marshal is encoding/json without a trailing newline: the canonical form.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Line is the entry's canonical encoding, as a line of a record holds it (without the newline).
func (e Entry) Line() ([]byte, error) { return marshal(e) }

// ComputeHash is the hex SHA-256 of domain NUL and the entry's canonical encoding without its
// hash and signature (its key id is part of it).
func (e Entry) ComputeHash() (string, error) {
	e.Hash, e.Sig = "", ""
	b, err := marshal(e)
	if err != nil {
		return "", fmt.Errorf("encoding entry %d: %w", e.Seq, err)
	}
	h := sha256.New()
	h.Write([]byte(domain))
	h.Write([]byte{0})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Genesis is the prev of a record's first entry: the hex SHA-256 of domain NUL the claim's UID.
func Genesis(claimUID string) string {
	sum := sha256.Sum256([]byte(domain + "\x00" + claimUID))
	return hex.EncodeToString(sum[:])
}

// SumHex is the hex SHA-256 of b: an entry's digests (args_sha256, sha256) are written with it.
func SumHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
