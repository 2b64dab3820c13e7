package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Report is the JSON file: the run's settings and every scenario's figures.
type Report struct {
	// Product is what was measured: airlock or agent-sandbox (the peer).
	Product       string    `json:"product"`
	StartedAt     time.Time `json:"startedAt"`
	Commit        string    `json:"commit"`
	CPUs          int       `json:"cpus"`
	LoadAvg       string    `json:"loadAvg"`
	OperatorFlags string    `json:"operatorFlags"`
	PlaneNotes    string    `json:"planeNotes"`
	// IdleCPUMsPerSec is each process's CPU on the idle plane, measured before the first
	// scenario: a window of s seconds includes about s times this.
	IdleCPUMsPerSec map[string]float64 `json:"idleCPUMsPerSec"`
	Results         []Result           `json:"results"`
	// Baseline is the committed baseline the run was compared with (baseline.go), nil for none.
	Baseline *Baseline `json:"baseline,omitempty"`
}

// Result is one scenario's figures.
type Result struct {
	Scenario     scenario  `json:"scenario"`
	StartedAt    time.Time `json:"startedAt"`
	LoadAvgStart string    `json:"loadAvgStart"`
	LoadAvgEnd   string    `json:"loadAvgEnd"`
	// Fill is the scale runs' filling with live claims, measured as a window of its own.
	Fill *Fill `json:"fill,omitempty"`
	// WarmFillSeconds is how long the warm pool took to be Ready (before the window), and
	// WarmBound how many of the scenario's claims were bound to a warm member.
	WarmFillSeconds float64 `json:"warmFillSeconds,omitempty"`
	WarmBound       *int    `json:"warmBound,omitempty"`
	// Demand are the figures of a pool that follows demand (warm-demand).
	Demand *DemandFigures `json:"demand,omitempty"`
	// Day are the figures of a replayed day (warm-day).
	Day *DayFigures `json:"day,omitempty"`
	// ReadyAs is what the product's acquires wait for (product.readyAs): Bound (airlock's 200
	// answer; also when empty) or Ready (the peer's claim condition).
	ReadyAs string `json:"readyAs,omitempty"`
	// Acquires and Window are the open-loop acquires' figures.
	Acquires Acquires `json:"acquires"`
	Window   Window   `json:"window"`
}

// Fill is how the scale runs' live claims were made.
type Fill struct {
	Claims int `json:"claims"`
	Bound  int `json:"bound"`
	Failed int `json:"failed"`
	// CreateSeconds is how long the fill's acquires took (every claim created); Seconds is until
	// every claim was done.
	CreateSeconds float64 `json:"createSeconds"`
	Seconds       float64 `json:"seconds"`
	BoundPerSec   float64 `json:"boundPerSec"`
	Window        Window  `json:"window"`
}

// Acquires are the client's view of an open-loop run.
type Acquires struct {
	Sent   int            `json:"sent"`
	Bound  int            `json:"bound"`
	Errors map[string]int `json:"errors"`
	// Latency is from request sent to the 200 (Bound) answer, of the Bound ones.
	Latency Latencies `json:"latency"`
	// SendRatePerSec is the achieved send rate (requests after the first over the time between the
	// first and the last send); SendSpreadMs that time.
	SendRatePerSec float64 `json:"sendRatePerSec"`
	SendSpreadMs   float64 `json:"sendSpreadMs"`
	// CompletedPerSec is Bound answers over WindowSeconds, from the first send to the last answer.
	CompletedPerSec float64 `json:"completedPerSec"`
	WindowSeconds   float64 `json:"windowSeconds"`
}

// Window is what the server side did in a window: from just before the first request until the
// API server's writes for claims settled.
type Window struct {
	// Claims is the divisor of every per-claim figure: the claims the window created.
	Claims  int     `json:"claims"`
	Seconds float64 `json:"seconds"`
	// SettleSeconds is from the last answer to the last write for claims; Settled is false when
	// writes went on until the settle timeout.
	SettleSeconds float64 `json:"settleSeconds"`
	Settled       bool    `json:"settled"`
	Writes        Writes  `json:"writes"`
	// ByClient splits the writes by API user, from the audit log.
	ByClient map[string]ClientWrites `json:"byClient"`
	// CPUMsPerClaim and CPUSeconds are each process's user+system CPU over the window.
	CPUMsPerClaim      map[string]float64 `json:"cpuMsPerClaim"`
	CPUSeconds         map[string]float64 `json:"cpuSeconds"`
	OperatorRSSMiB     float64            `json:"operatorRSSMiB"`
	OperatorPeakRSSMiB float64            `json:"operatorPeakRSSMiB"`
	// OperatorHistograms are the operator's histograms that changed in the window.
	OperatorHistograms map[string]Histogram `json:"operatorHistograms"`
	// PassMetric and Pass are the operator's histogram of one admission decision pass, when it
	// exposes one.
	PassMetric string     `json:"passMetric,omitempty"`
	Pass       *Histogram `json:"pass,omitempty"`
	// SandboxAPIAnswers counts the Sandbox API's answers by endpoint and HTTP code (the
	// operator's airlock_sandboxapi_requests_total): 503s, which pkg/client calls again after
	// their Retry-After, show here and not in the client's errors.
	SandboxAPIAnswers map[string]float64 `json:"sandboxAPIAnswers"`
	// APFRejected counts requests API Priority and Fairness rejected (429) in the window.
	APFRejected float64 `json:"apfRejected"`
}

// Writes are the API server's write requests (apiserver_request_total) in a window.
type Writes struct {
	// PerClaim counts every write but the plane's heartbeats (Node and Lease writes, in
	// Background); it is ObjectsPerClaim + EventsPerClaim + ReviewsPerClaim.
	PerClaim        float64 `json:"perClaim"`
	ObjectsPerClaim float64 `json:"objectsPerClaim"`
	EventsPerClaim  float64 `json:"eventsPerClaim"`
	ReviewsPerClaim float64 `json:"reviewsPerClaim"`
	// Code409 counts writes answered 409 (Conflict or AlreadyExists; ByClient tells which).
	Code409    int        `json:"code409"`
	Background int        `json:"background"`
	Rows       []WriteRow `json:"rows"`
}

// WriteRow is the writes to one resource with one verb.
type WriteRow struct {
	Resource string  `json:"resource"`
	Verb     string  `json:"verb"`
	Count    int     `json:"count"`
	PerClaim float64 `json:"perClaim"`
	Code409  int     `json:"code409"`
	// Operator* are the operator's own (audit log); OperatorFailed counts its failed writes by
	// reason.
	OperatorCount    int            `json:"operatorCount"`
	OperatorPerClaim float64        `json:"operatorPerClaim"`
	OperatorFailed   map[string]int `json:"operatorFailed,omitempty"`
	// OperatorServer* are the API server's time for the operator's writes (audit log: received
	// to response complete).
	OperatorServerP50Ms float64 `json:"operatorServerP50Ms"`
	OperatorServerMaxMs float64 `json:"operatorServerMaxMs"`
}

// ClientWrites are one API user's writes in a window, from the audit log.
type ClientWrites struct {
	Count           int     `json:"count"`
	PerClaim        float64 `json:"perClaim"`
	ObjectsPerClaim float64 `json:"objectsPerClaim"`
	EventsPerClaim  float64 `json:"eventsPerClaim"`
	Conflicts       int     `json:"conflicts"`
	AlreadyExists   int     `json:"alreadyExists"`
	OtherFailures   int     `json:"otherFailures"`
}

func resourceLabel(group, resource, subresource string) string {
	s := resource
	if group != "" {
		s = group + "/" + resource
	}
	if subresource != "" {
		s += "/" + subresource
	}
	return s
}

// writesTable combines the API server's counts with the operator's share from the audit log.
func writesTable(api writeCounts, audit auditRead, claims int) Writes {
	per := func(n int) float64 { return float64(n) / float64(max(claims, 1)) }
	rows := map[rowKey]*WriteRow{}
	row := func(k rowKey) *WriteRow {
		if rows[k] == nil {
			rows[k] = &WriteRow{Resource: k.resource, Verb: k.verb}
		}
		return rows[k]
	}
	var w Writes
	var all, events, reviews int
	for k, v := range api {
		n := int(v)
		if background(k) {
			w.Background += n
			continue
		}
		r := row(rowKey{resourceLabel(k.Group, k.Resource, k.Subresource), k.Verb})
		r.Count += n
		if k.Code == "409" {
			r.Code409 += n
			w.Code409 += n
		}
		all += n
		switch {
		case event(k):
			events += n
		case review(k):
			reviews += n
		}
	}
	for k, n := range audit.writes {
		if k.Client != "operator" || background(writeKey{Group: k.Group, Resource: k.Resource}) {
			continue
		}
		r := row(rowKey{resourceLabel(k.Group, k.Resource, k.Subresource), strings.ToUpper(k.Verb)})
		r.OperatorCount += n
		if k.Outcome != "ok" {
			if r.OperatorFailed == nil {
				r.OperatorFailed = map[string]int{}
			}
			r.OperatorFailed[k.Outcome] += n
		}
	}
	for k, ds := range audit.times {
		if r := rows[k]; r != nil {
			l := summarise(ds)
			r.OperatorServerP50Ms, r.OperatorServerMaxMs = l.P50Ms, l.MaxMs
		}
	}
	for _, r := range rows {
		r.PerClaim, r.OperatorPerClaim = per(r.Count), per(r.OperatorCount)
		w.Rows = append(w.Rows, *r)
	}
	slices.SortFunc(w.Rows, func(a, b WriteRow) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Verb, b.Verb))
	})
	w.PerClaim, w.EventsPerClaim, w.ReviewsPerClaim = per(all), per(events), per(reviews)
	w.ObjectsPerClaim = per(all - events - reviews)
	return w
}

// byClient sums the audit log's writes per client.
func byClient(audit clientWrites, claims int) map[string]ClientWrites {
	per := func(n int) float64 { return float64(n) / float64(max(claims, 1)) }
	counts := map[string]*struct{ all, events, reviews, conflicts, exists, other int }{}
	for k, n := range audit {
		wk := writeKey{Group: k.Group, Resource: k.Resource}
		if background(wk) {
			continue
		}
		c := counts[k.Client]
		if c == nil {
			c = &struct{ all, events, reviews, conflicts, exists, other int }{}
			counts[k.Client] = c
		}
		c.all += n
		switch {
		case event(wk):
			c.events += n
		case review(wk):
			c.reviews += n
		}
		switch k.Outcome {
		case "ok":
		case "Conflict":
			c.conflicts += n
		case "AlreadyExists":
			c.exists += n
		default:
			c.other += n
		}
	}
	out := map[string]ClientWrites{}
	for name, c := range counts {
		out[name] = ClientWrites{
			Count: c.all, PerClaim: per(c.all), ObjectsPerClaim: per(c.all - c.events - c.reviews), EventsPerClaim: per(c.events),
			Conflicts: c.conflicts, AlreadyExists: c.exists, OtherFailures: c.other,
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func newReport(o options) *Report {
	return &Report{
		Product: o.product, StartedAt: time.Now().UTC(), Commit: o.commit, CPUs: runtime.NumCPU(), LoadAvg: loadavg(),
		OperatorFlags: o.operatorFlags, PlaneNotes: o.planeNotes,
	}
}

func (rep *Report) write(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func (rep *Report) print(w io.Writer) {
	flags := rep.OperatorFlags
	if flags == "" {
		flags = "(defaults)"
	}
	fmt.Fprintf(w, "%s bench at %s, %d CPUs, load average %s\n", rep.Product, rep.Commit, rep.CPUs, rep.LoadAvg)
	fmt.Fprintf(w, "%s controller flags: %s (its figures are shown as the operator's)\n", rep.Product, flags)
	fmt.Fprintf(w, "plane: %s\n", rep.PlaneNotes)
	var idle []string
	for _, c := range shown {
		idle = append(idle, fmt.Sprintf("%s %.1f", c, rep.IdleCPUMsPerSec[c]))
	}
	fmt.Fprintf(w, "idle CPU ms/s: %s (included in each window's CPU per claim for its length)\n", strings.Join(idle, ", "))
	fmt.Fprintln(w, "figures are indicative only: the machine may be shared")
}

// printSummary prints one line per scenario, the columns of the comparison table.
func (rep *Report) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%-12s %8s %8s %8s %11s %10s %9s %6s %10s %10s %9s  %s\n", "scenario", "p50 ms", "p90 ms", "p99 ms",
		"completed/s", "writes/cl", "operator", "409s", "op CPU ms", "api CPU ms", "op RSS", "load (1 min, at the end)")
	for _, res := range rep.Results {
		a, win := res.Acquires, res.Window
		op := win.ByClient["operator"]
		fmt.Fprintf(w, "%-12s %8.0f %8.0f %8.0f %11.1f %10.1f %9.1f %6d %10.1f %10.1f %8.0fM  %s\n", res.Scenario.Name,
			a.Latency.P50Ms, a.Latency.P90Ms, a.Latency.P99Ms, a.CompletedPerSec, win.Writes.PerClaim, op.PerClaim,
			win.Writes.Code409, win.CPUMsPerClaim["operator"], win.CPUMsPerClaim["kube-apiserver"], win.OperatorPeakRSSMiB,
			strings.Fields(res.LoadAvgEnd + " ?")[0])
		rep.printBaseline(w, res)
	}
}

// readyWords are the word for a ready acquire and what its latency runs until.
func (res *Result) readyWords() (word, until string) {
	if res.ReadyAs == "" || res.ReadyAs == "Bound" {
		return "Bound", "request sent -> 200 Bound"
	}
	return res.ReadyAs, "claim create sent -> its " + res.ReadyAs + " condition seen by a watch"
}

func (res *Result) print(w io.Writer) {
	s := res.Scenario
	if f := res.Fill; f != nil {
		fmt.Fprintf(w, "-- %s fill: %d claims in %d namespace(s): %d Bound, %d failed in %.1f s (%.1f Bound/s)\n",
			s.Name, f.Claims, s.FillNamespaces, f.Bound, f.Failed, f.Seconds, f.BoundPerSec)
		f.Window.print(w, false)
	}
	a := res.Acquires
	how := s.describeLoad()
	on := ""
	if res.Fill != nil {
		on = fmt.Sprintf(", on top of %d live claims", res.Fill.Bound)
	}
	if s.Warm > 0 {
		on += fmt.Sprintf(", a warm pool of %d (Ready in %.1f s before the window)", s.Warm, res.WarmFillSeconds)
	}
	if p := s.WarmPolicy; p != nil {
		on += fmt.Sprintf(", a warm pool that follows demand within [%d, %d] (its min Ready in %.1f s before the window)", p.Min, p.Max, res.WarmFillSeconds)
	}
	fmt.Fprintf(w, "-- %s: %d acquires %s%s\n", s.Name, a.Sent, how, on)
	if res.WarmBound != nil {
		fmt.Fprintf(w, "   warm           %d of the claims adopted a warm member\n", *res.WarmBound)
	}
	if res.Demand != nil {
		res.Demand.print(w)
	}
	if res.Day != nil {
		res.Day.print(w)
	}
	word, until := res.readyWords()
	fmt.Fprintf(w, "   answers        %d %s", a.Bound, word)
	for _, k := range sortedKeys(a.Errors) {
		fmt.Fprintf(w, ", %d %s", a.Errors[k], k)
	}
	fmt.Fprintln(w)
	l := a.Latency
	fmt.Fprintf(w, "   latency ms     p50 %.0f  p90 %.0f  p99 %.0f  max %.0f   (%s)\n", l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs, until)
	sent := fmt.Sprintf("sent %.1f/s", a.SendRatePerSec)
	if s.sendRate() <= 0 {
		sent = fmt.Sprintf("sent within %.0f ms", a.SendSpreadMs)
	}
	fmt.Fprintf(w, "   rate           %s, completed %.1f %s/s (first send -> last answer %.1f s)\n", sent, a.CompletedPerSec, word, a.WindowSeconds)
	res.Window.print(w, true)
	fmt.Fprintf(w, "   load average   %s (at the end)\n", res.LoadAvgEnd)
}

func (win *Window) print(w io.Writer, rows bool) {
	wr := win.Writes
	settled := fmt.Sprintf("writes settled %.1f s after the last answer", win.SettleSeconds)
	if !win.Settled {
		settled = fmt.Sprintf("writes still going %.0f s after the last answer", win.SettleSeconds)
	}
	fmt.Fprintf(w, "   writes/claim   all clients %.1f (objects %.1f, events %.1f, reviews %.1f; %d answered 409); %s\n",
		wr.PerClaim, wr.ObjectsPerClaim, wr.EventsPerClaim, wr.ReviewsPerClaim, wr.Code409, settled)
	var parts []string
	for _, name := range sortedKeys(win.ByClient) {
		c := win.ByClient[name]
		p := fmt.Sprintf("%s %.1f", name, c.PerClaim)
		if c.Conflicts+c.AlreadyExists+c.OtherFailures > 0 {
			p += fmt.Sprintf(" (%d Conflict, %d AlreadyExists, %d other failed)", c.Conflicts, c.AlreadyExists, c.OtherFailures)
		}
		parts = append(parts, p)
	}
	fmt.Fprintf(w, "   by client      %s\n", strings.Join(parts, "; "))
	if op, ok := win.ByClient["operator"]; ok {
		fmt.Fprintf(w, "   operator own   %.1f/claim: objects %.1f, events %.1f, %d Conflict, %d AlreadyExists\n",
			op.PerClaim, op.ObjectsPerClaim, op.EventsPerClaim, op.Conflicts, op.AlreadyExists)
	}
	var cpu []string
	for _, c := range shown {
		cpu = append(cpu, fmt.Sprintf("%s %.1f", c, win.CPUMsPerClaim[c]))
	}
	fmt.Fprintf(w, "   CPU ms/claim   %s (window %.1f s)\n", strings.Join(cpu, ", "), win.Seconds)
	fmt.Fprintf(w, "   operator RSS   %.1f MiB now, %.1f MiB peak in the window\n", win.OperatorRSSMiB, win.OperatorPeakRSSMiB)
	switch {
	case win.Pass != nil:
		fmt.Fprintf(w, "   decision pass  %s: %.0f passes, mean %.3f ms, p50 %.3f ms, p99 %.3f ms (p50/p99 from buckets)\n",
			win.PassMetric, win.Pass.Count, win.Pass.MeanMs, win.Pass.P50Ms, win.Pass.P99Ms)
	case win.PassMetric != "":
		fmt.Fprintf(w, "   decision pass  %s: no pass observed in the window\n", win.PassMetric)
	default:
		fmt.Fprintf(w, "   decision pass  not exposed by the operator (no histogram matches --pass-metric)\n")
	}
	if h, ok := win.OperatorHistograms["airlock_claim_bind_duration_seconds"]; ok {
		fmt.Fprintf(w, "   operator bind  creation -> Bound mean %.0f ms, p50 %.0f ms, p99 %.0f ms (its histogram's buckets)\n", h.MeanMs, h.P50Ms, h.P99Ms)
	}
	if h, ok := win.OperatorHistograms["rest_client_rate_limiter_duration_seconds"]; ok {
		fmt.Fprintf(w, "   operator API   %.0f requests waited on its client rate limiter mean %.1f ms, p99 %.0f ms", h.Count, h.MeanMs, h.P99Ms)
		if r, ok := win.OperatorHistograms["rest_client_request_duration_seconds"]; ok {
			// (client-go's request latency starts before the rate limiter.)
			fmt.Fprintf(w, "; whole requests, that wait included, mean %.0f ms, p99 %.0f ms", r.MeanMs, r.P99Ms)
		}
		fmt.Fprintln(w)
	}
	var answers []string
	for _, k := range sortedKeys(win.SandboxAPIAnswers) {
		answers = append(answers, fmt.Sprintf("%s %.0f", k, win.SandboxAPIAnswers[k]))
	}
	if len(answers) > 0 {
		fmt.Fprintf(w, "   sandbox API    answers by endpoint and code: %s\n", strings.Join(answers, ", "))
	}
	if win.APFRejected > 0 {
		fmt.Fprintf(w, "   APF rejected   %.0f requests (429)\n", win.APFRejected)
	}
	if !rows {
		return
	}
	fmt.Fprintf(w, "   %-44s %8s %6s %9s %16s  %s\n", "writes per claim: resource", "verb", "all", "operator", "op server ms p50/max", "409 (all) / operator failed")
	for _, r := range wr.Rows {
		var failed []string
		for _, k := range sortedKeys(r.OperatorFailed) {
			failed = append(failed, fmt.Sprintf("%d %s", r.OperatorFailed[k], k))
		}
		extra := ""
		if r.Code409 > 0 || len(failed) > 0 {
			extra = fmt.Sprintf("%d", r.Code409)
			if len(failed) > 0 {
				extra += " / " + strings.Join(failed, ", ")
			}
		}
		server := ""
		if r.OperatorCount > 0 {
			server = fmt.Sprintf("%.0f/%.0f", r.OperatorServerP50Ms, r.OperatorServerMaxMs)
		}
		fmt.Fprintf(w, "   %-44s %8s %6.2f %9.2f %16s  %s\n", r.Resource, r.Verb, r.PerClaim, r.OperatorPerClaim, server, extra)
	}
}
