package recordlog

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/airlock-dev/airlock/pkg/sandboxrecord"
)

// Path is the endpoint of the log (GET only): pkg/sandboxrecord's, the operator's client.
const Path = sandboxrecord.Path

var newline = []byte("\n")

// BootHeader carries the boot id of the log that answers.
const BootHeader = sandboxrecord.BootHeader

// ServeHTTP answers GET /record?after=<source_seq>[&boot=<id>][&follow=1]: the entries after
// source_seq `after` as JSON lines, each as sandboxd encoded it. With follow it keeps the
// response open and writes each new entry as it is appended, until the log is stopped (its
// last line is then sandbox.stopped) or closed, or the reader goes. A boot other than this
// log's is 409 with the current one in BootHeader: the reader lost what the earlier boot did
// not hand it, and must start this boot from 0. It only reads: the route admits GET alone.
func (l *Log) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, err := strconv.ParseUint(q.Get("after"), 10, 64)
	if q.Get("after") == "" {
		after, err = 0, nil
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "after must be a source_seq (an unsigned integer)")
		return
	}
	w.Header().Set(BootHeader, l.boot)
	if b := q.Get("boot"); b != "" && b != l.boot {
		writeError(w, http.StatusConflict, "boot_changed", "sandboxd restarted: this log is boot "+l.boot+", not "+b)
		return
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for {
		lines, last, changed, ended := l.after(after)
		for _, b := range lines {
			if _, err := w.Write(b); err != nil {
				return
			}
			if _, err := w.Write(newline); err != nil {
				return
			}
		}
		after = last
		if flusher != nil {
			flusher.Flush()
		}
		if !follow || ended {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

func writeError(w http.ResponseWriter, code int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": kind, "message": msg})
}
