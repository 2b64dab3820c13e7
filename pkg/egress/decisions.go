package egress

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/gatewayrecord"
	"github.com/airlock-dev/airlock/pkg/record"
)

// The bounds of a DecisionLog (docs/record.md §2.1): what a claim keeps, and what the gateway
// keeps in all. Past either, a decision's entry is not kept, but its sequence number is taken:
// the reader sees the numbers it missed (a counted gap, written into the record), never a
// silent drop.
const (
	DefaultDecisionsPerClaim = 4096
	DefaultDecisionsInAll    = 131072
)

// DecisionLog keeps, per claim (by UID), the gateway's decisions as the `egress` entries of the
// claim's session record (source gateway, this process's boot id, a sequence per claim from 1),
// in memory and bounded, and serves them read-only at GET /decisions to the operator's leader
// (ServeHTTP). A claim's entries are a ring: past perClaim the oldest goes (the leader has
// normally read it long before); past inAll the claim's oldest goes for the new one, or, when
// the claim keeps none, the new one is not kept. Either way its number is taken, so a reader
// behind the ring sees the jump, and when the claim's last numbers are of decisions not kept its
// feed ends with a gap line (a record.gap entry of the gateway with the last of them as its
// number). A claim is forgotten when it is deleted (Forget).
type DecisionLog struct {
	boot            string
	perClaim, inAll int

	mu     sync.Mutex
	claims map[types.UID]*claimDecisions
	kept   int
	closed chan struct{}
	once   sync.Once
}

type claimDecisions struct {
	entries []record.Entry // oldest first, SourceSeq ascending
	last    uint64         // the last sequence number taken
	// notKept is the last number taken by a decision not kept at the bound in all, when it is
	// above every entry kept: served as a gap line (a jump would not show without a later entry).
	notKept   uint64
	notKeptAt string
	uid       types.UID
	changed   chan struct{} // closed (and replaced) at each append
	gone      bool
}

// NewDecisionLog returns a log with a random boot id, keeping at most perClaim entries per
// claim and inAll in all (<= 0: the defaults).
func NewDecisionLog(perClaim, inAll int) *DecisionLog {
	if perClaim <= 0 {
		perClaim = DefaultDecisionsPerClaim
	}
	if inAll <= 0 {
		inAll = DefaultDecisionsInAll
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &DecisionLog{boot: hex.EncodeToString(b), perClaim: perClaim, inAll: inAll,
		claims: map[types.UID]*claimDecisions{}, closed: make(chan struct{})}
}

// Boot is the log's boot id: a gateway that restarts has another, and its earlier decisions are
// gone.
func (l *DecisionLog) Boot() string { return l.boot }

// Close ends every read (at the gateway's shutdown).
func (l *DecisionLog) Close() { l.once.Do(func() { close(l.closed) }) }

// claimLocked is the claim's decisions, made when missing.
func (l *DecisionLog) claimLocked(uid types.UID) *claimDecisions {
	c := l.claims[uid]
	if c == nil {
		c = &claimDecisions{changed: make(chan struct{}), uid: uid}
		l.claims[uid] = c
	}
	return c
}

// Add takes a decision's entry for the claim uid: it gets the log's boot and the claim's next
// sequence number. It reports whether the entry was kept (false: counted, not kept).
func (l *DecisionLog) Add(uid types.UID, e record.Entry) bool {
	if uid == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.claimLocked(uid)
	c.last++
	e.Claim, e.Boot, e.SourceSeq = string(uid), l.boot, c.last
	kept := true
	switch {
	case len(c.entries) >= l.perClaim:
		c.entries = append(c.entries[1:], e)
		decisionsDropped.WithLabelValues("claim_bound").Inc()
	case l.kept >= l.inAll && len(c.entries) > 0:
		c.entries = append(c.entries[1:], e)
		decisionsDropped.WithLabelValues("total_bound").Inc()
	case l.kept >= l.inAll:
		kept = false
		c.notKept, c.notKeptAt = c.last, e.Time
		decisionsDropped.WithLabelValues("total_bound").Inc()
	default:
		c.entries = append(c.entries, e)
		l.kept++
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return kept
}

// Forget drops a claim's decisions (its claim was deleted) and ends its reads.
func (l *DecisionLog) Forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.claims[uid]; c != nil {
		l.kept -= len(c.entries)
		c.gone = true
		close(c.changed)
		delete(l.claims, uid)
	}
}

// after returns the claim's entries after sequence number after, the last number taken, a
// channel closed at its next append, and whether the claim was forgotten.
func (l *DecisionLog) after(uid types.UID, after uint64) ([]record.Entry, uint64, <-chan struct{}, bool) {
	l.mu.Lock()
	c := l.claimLocked(uid)
	l.mu.Unlock()
	return l.afterIn(c, after)
}

// afterIn is after for the claim's decisions c (a read keeps the claim it began with: once the
// claim is forgotten, the read ends).
func (l *DecisionLog) afterIn(c *claimDecisions, after uint64) ([]record.Entry, uint64, <-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []record.Entry
	for _, e := range c.entries {
		if e.SourceSeq > after {
			out = append(out, e)
		}
	}
	if c.notKept > after && (len(c.entries) == 0 || c.notKept > c.entries[len(c.entries)-1].SourceSeq) {
		// The last numbers were taken by decisions not kept: a gap line says so, with the last of
		// them as its number, so that the reader records them now and not at a later decision.
		out = append(out, record.Entry{Time: c.notKeptAt, Source: record.SourceGateway, Claim: string(c.uid), Boot: l.boot,
			SourceSeq: c.notKept, Kind: record.KindRecordGap,
			Message: "the gateway did not keep this claim's last decisions (its bound in all)"})
	}
	return out, max(after, c.last), c.changed, c.gone
}

// ServeHandler is the decisions endpoint for the reader whose token readerToken returns (the
// proxy key's derivation, claimtoken.DecisionsReaderToken; an error: refused, the gateway does
// not know the key yet).
func (l *DecisionLog) ServeHandler(readerToken func() (string, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(gatewayrecord.Path, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeDecisionsError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the decisions feed only reads: GET")
			return
		}
		want, err := readerToken()
		if err != nil {
			writeDecisionsError(w, http.StatusServiceUnavailable, "no_key", "the gateway does not know its proxy key yet")
			return
		}
		got, ok := bearer(r.Header.Values("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock-egress-decisions"`)
			writeDecisionsError(w, http.StatusUnauthorized, "no_token", "a bearer token is required")
			return
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock-egress-decisions", error="invalid_token"`)
			writeDecisionsError(w, http.StatusUnauthorized, "bad_token", "the token is not the decisions reader's")
			return
		}
		l.serve(w, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeDecisionsError(w, http.StatusNotFound, "not_found", "only "+gatewayrecord.Path+" is served here")
	})
	return mux
}

// bearer reads the one Authorization: Bearer header.
func bearer(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// serve answers GET /decisions?claim=<uid>&after=<seq>[&boot=<id>][&follow=1]: the claim's
// entries after seq as JSON lines; with follow it keeps the response open and writes each new
// one as it is added, until the reader goes, the claim is forgotten or the gateway stops. A boot
// other than this log's is 409 with the current one in gatewayrecord.BootHeader: the gateway
// restarted and what it had not handed over is gone.
func (l *DecisionLog) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	uid := types.UID(q.Get("claim"))
	if uid == "" || len(uid) > 128 {
		writeDecisionsError(w, http.StatusBadRequest, "invalid", "claim must be a claim's UID")
		return
	}
	after, err := strconv.ParseUint(q.Get("after"), 10, 64)
	if q.Get("after") == "" {
		after, err = 0, nil
	}
	if err != nil {
		writeDecisionsError(w, http.StatusBadRequest, "invalid", "after must be a sequence number (an unsigned integer)")
		return
	}
	w.Header().Set(gatewayrecord.BootHeader, l.boot)
	if b := q.Get("boot"); b != "" && b != l.boot {
		writeDecisionsError(w, http.StatusConflict, "boot_changed", "the gateway restarted: this log is boot "+l.boot+", not "+b)
		return
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	l.mu.Lock()
	c := l.claimLocked(uid)
	l.mu.Unlock()
	for {
		entries, last, changed, gone := l.afterIn(c, after)
		for _, e := range entries {
			line, err := e.Line()
			if err != nil {
				return
			}
			if _, err := w.Write(append(line, '\n')); err != nil {
				return
			}
		}
		after = last
		if flusher != nil {
			flusher.Flush()
		}
		if !follow || gone {
			return
		}
		select {
		case <-changed:
		case <-l.closed:
			return
		case <-r.Context().Done():
			return
		}
	}
}

func writeDecisionsError(w http.ResponseWriter, code int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": kind, "message": msg})
}
