package record

import (
	"fmt"
	"strings"
	"time"
)

// OCSF (Open Cybersecurity Schema Framework) classes and values the entries map to
// (docs/record.md §2.7).
const (
	OCSFVersion = "1.1.0"

	ocsfFileSystemActivity   = 1001
	ocsfProcessActivity      = 1007
	ocsfNetworkActivity      = 4001
	ocsfApplicationLifecycle = 6002
	ocsfAPIActivity          = 6003

	ocsfActivityOther  = 99
	ocsfFileUpdate     = 3
	ocsfProcessLaunch  = 1
	ocsfNetworkOpen    = 1
	ocsfNetworkRefuse  = 5
	ocsfSeverityInfo   = 1
	ocsfStatusSuccess  = 1
	ocsfStatusFailure  = 2
	ocsfDispAllowed    = 1
	ocsfDispBlocked    = 2
	ocsfHashSHA256     = 3
	ocsfStatusUnknown  = 0
	ocsfProductName    = "airlock"
	ocsfProductVendor  = "airlock.dev"
	ocsfUnmappedPrefix = "airlock"
)

// OCSFEvent is one OCSF event, as JSON: the class's fields and the common ones.
type OCSFEvent map[string]any

// OCSF maps an entry to one OCSF event. The entry's seq, claim, hash and signature go in
// `unmapped` (OCSF has no place for a hash chain), so that a SIEM that keeps the events keeps
// what verifies them. An entry of an unknown kind maps to Application Lifecycle, Other.
func OCSF(e Entry) (OCSFEvent, error) {
	t, err := time.Parse(time.RFC3339Nano, e.Time)
	if err != nil {
		return nil, fmt.Errorf("entry %d: time %q: %w", e.Seq, e.Time, err)
	}
	ev := OCSFEvent{
		"time":        t.UnixMilli(),
		"severity_id": ocsfSeverityInfo,
		"metadata": map[string]any{
			"version": OCSFVersion,
			"uid":     fmt.Sprintf("%s/%d", e.Claim, e.Seq),
			"product": map[string]any{"name": ocsfProductName, "vendor_name": ocsfProductVendor},
		},
		"unmapped": map[string]any{ocsfUnmappedPrefix: unmapped(e)},
	}
	class, activity := ocsfClass(e, ev)
	ev["class_uid"] = class
	ev["category_uid"] = class / 1000
	ev["activity_id"] = activity
	ev["type_uid"] = class*100 + activity
	if e.Message != "" {
		ev["message"] = e.Message
	}
	return ev, nil
}

// ocsfClass fills ev with the fields of e's class and returns the class and activity.
func ocsfClass(e Entry, ev OCSFEvent) (class, activity int) {
	switch e.Kind {
	case KindToolCall:
		ev["api"] = map[string]any{"operation": e.Tool, "service": map[string]any{"name": "sandboxd"}}
		ev["status_id"] = ocsfStatus(e.Status)
		ev["status"] = e.Status
		ev["duration"] = e.DurationMS
		return ocsfAPIActivity, ocsfActivityOther
	case KindFileWrite:
		f := map[string]any{"path": e.Path, "name": e.Path[strings.LastIndex(e.Path, "/")+1:]}
		if e.Size != nil {
			f["size"] = *e.Size
		}
		if e.SHA256 != "" {
			f["hashes"] = []any{map[string]any{"algorithm_id": ocsfHashSHA256, "algorithm": "SHA-256", "value": e.SHA256}}
		}
		ev["file"] = f
		return ocsfFileSystemActivity, ocsfFileUpdate
	case KindProcess:
		ev["process"] = map[string]any{"cmd_line": strings.Join(e.Argv, " ")}
		ev["duration"] = e.DurationMS
		return ocsfProcessActivity, ocsfProcessLaunch
	case KindEgress:
		ev["dst_endpoint"] = map[string]any{"hostname": e.Host, "port": e.Port}
		if e.Verdict == VerdictAllowed {
			ev["disposition_id"], ev["disposition"] = ocsfDispAllowed, "Allowed"
			return ocsfNetworkActivity, ocsfNetworkOpen
		}
		ev["disposition_id"], ev["disposition"] = ocsfDispBlocked, "Blocked"
		ev["status_detail"] = e.Reason
		return ocsfNetworkActivity, ocsfNetworkRefuse
	}
	ev["app"] = map[string]any{"name": ocsfProductName}
	return ocsfApplicationLifecycle, ocsfActivityOther
}

func ocsfStatus(s string) int {
	switch s {
	case StatusOK:
		return ocsfStatusSuccess
	case StatusError, StatusCanceled, StatusProtocolError:
		return ocsfStatusFailure
	}
	return ocsfStatusUnknown
}

// unmapped is what of e OCSF has no field for.
func unmapped(e Entry) map[string]any {
	u := map[string]any{"claim": e.Claim, "seq": e.Seq, "kind": e.Kind, "source": e.Source,
		"prev": e.Prev, "hash": e.Hash, "key": e.Key, "sig": e.Sig}
	set := func(k string, v any, ok bool) {
		if ok {
			u[k] = v
		}
	}
	set("boot", e.Boot, e.Boot != "")
	set("source_seq", e.SourceSeq, e.SourceSeq != 0)
	set("call", e.Call, e.Call != 0)
	set("trace", e.Trace, e.Trace != "")
	set("span", e.Span, e.Span != "")
	set("parent_span", e.Parent, e.Parent != "")
	set("phase", e.Phase, e.Phase != "")
	set("reason", e.Reason, e.Reason != "")
	set("args_sha256", e.ArgsSHA256, e.ArgsSHA256 != "")
	set("argv", e.Argv, e.Argv != nil)
	set("exit_code", derefInt(e.Exit), e.Exit != nil)
	set("credential", e.Credential, e.Credential != "")
	set("count", e.Count, e.Count != 0)
	set("usage", e.Usage, e.Usage != nil)
	return u
}

func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
