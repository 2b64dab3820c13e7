package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// auditEvent holds the fields of an audit.k8s.io/v1 Event the bench reads (the API server writes
// one JSON object per line).
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	// RequestReceivedTimestamp and StageTimestamp bound the time the API server took.
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
	User                     struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	} `json:"responseStatus"`
}

// clientWrite is one row of the writes-by-client table.
type clientWrite struct {
	Client, Group, Resource, Subresource, Verb string
	// Outcome is "ok", or the failure's reason (Conflict, AlreadyExists, NotFound, ...), or its
	// code when it has no reason.
	Outcome string
}

// clientWrites counts write requests by clientWrite.
type clientWrites map[clientWrite]int

// serverTimes are how long the API server took for the operator's writes (received to response
// complete, as the audit log says), by resource label and verb.
type serverTimes map[rowKey][]time.Duration

// rowKey names a row of the writes table: a resource label and a verb (CREATE, UPDATE, ...).
type rowKey struct{ resource, verb string }

// auditRead is what one read of the audit log found.
type auditRead struct {
	writes clientWrites
	times  serverTimes
}

// add merges o into a.
func (a auditRead) add(o auditRead) {
	for k, n := range o.writes {
		a.writes[k] += n
	}
	for k, ds := range o.times {
		a.times[k] = append(a.times[k], ds...)
	}
}

func newAuditRead() auditRead { return auditRead{writes: clientWrites{}, times: serverTimes{}} }

// clientOf names the component behind an API user: the operator (its ServiceAccount), the
// controller manager (its own user, or the per-controller ServiceAccounts of kube-system it uses
// with --use-service-account-credentials), the scheduler, and the admin user (kwok, and the
// bench itself outside its measuring windows).
func clientOf(username, operatorUser string) string {
	switch {
	case username == operatorUser:
		return "operator"
	case username == "system:kube-controller-manager" || strings.HasPrefix(username, "system:serviceaccount:kube-system:"):
		return "kube-controller-manager"
	case username == "system:kube-scheduler":
		return "kube-scheduler"
	case username == "kubernetes-admin":
		return "admin (kwok)"
	case strings.HasPrefix(username, "system:apiserver"):
		return "kube-apiserver"
	}
	return "other (" + username + ")"
}

// readAudit counts the audit log's completed write requests from byte offset from to the end, and
// returns the offset it stopped at (after the last whole line).
func readAudit(path string, from int64, operatorUser string) (auditRead, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return auditRead{}, from, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return auditRead{}, from, err
	}
	out, n, err := countAudit(f, operatorUser)
	return out, from + n, err
}

// countAudit counts the completed write requests of an audit log stream and returns how many
// bytes of whole lines it read (a last line without its newline is being written: left for the
// next read).
func countAudit(r io.Reader, operatorUser string) (auditRead, int64, error) {
	out := newAuditRead()
	br := bufio.NewReaderSize(r, 1<<20)
	var read int64
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			return out, read, nil
		}
		if err != nil {
			return out, read, err
		}
		read += int64(len(line))
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return out, read, fmt.Errorf("audit log line at byte %d: %w", read-int64(len(line)), err)
		}
		if ev.Stage != "ResponseComplete" || ev.ObjectRef == nil || !auditWriteVerbs[ev.Verb] {
			continue
		}
		k := clientWrite{
			Client:      clientOf(ev.User.Username, operatorUser),
			Group:       ev.ObjectRef.APIGroup,
			Resource:    ev.ObjectRef.Resource,
			Subresource: ev.ObjectRef.Subresource,
			Verb:        ev.Verb,
			Outcome:     "ok",
		}
		if s := ev.ResponseStatus; s != nil && (s.Code < 200 || s.Code > 299) {
			k.Outcome = s.Reason
			if k.Outcome == "" {
				k.Outcome = fmt.Sprintf("%d", s.Code)
			}
		}
		out.writes[k]++
		if k.Client == "operator" && !ev.RequestReceivedTimestamp.IsZero() && !ev.StageTimestamp.IsZero() {
			rk := rowKey{resourceLabel(k.Group, k.Resource, k.Subresource), strings.ToUpper(k.Verb)}
			out.times[rk] = append(out.times[rk], ev.StageTimestamp.Sub(ev.RequestReceivedTimestamp))
		}
	}
}

// auditWriteVerbs are the audit log's verbs that write.
var auditWriteVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}
