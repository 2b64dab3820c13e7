package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

const (
	// quietFor and settleTimeout: a window ends once the API server has logged no write for claims
	// (anything but Node and lease heartbeats) for quietFor after the last answer, or settleTimeout
	// after it at the latest, so that the writes other components make after Bound (the pod's
	// status, events) are counted.
	quietFor      = 2 * time.Second
	settleTimeout = 60 * time.Second
	// auditPoll is how often the audit log is read while settling: the log is a file, with
	// nothing to wait on but its growth.
	auditPoll = 500 * time.Millisecond
	// fillParallel bounds the scale runs' fill acquires in flight.
	fillParallel = 16
)

// planeComponents are the plane's processes whose CPU is reported beside the product's controller.
var planeComponents = []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok"}

// companions are processes of a product beside its controller, measured when they run (their
// pid file is in the state dir): airlock's records webhook, part of its default install.
var companions = []string{"airlock-records-webhook"}

// shown are the keys of the CPU figures, in print order: the product's controller, whichever
// product it is ("operator", so that the JSON of both products reads alike), its companions,
// then the plane's.
var shown = append(append([]string{"operator"}, companions...), planeComponents...)

type runner struct {
	o     options
	clock clock.WithTicker
	kube  kube
	// product is what is measured: airlock, or the peer (peer.go).
	product    product
	http       *http.Client // the controller's /metrics
	histograms *regexp.Regexp
	pass       *regexp.Regexp
	// auditOffset is how far the audit log has been read.
	auditOffset int64
}

// snapshot is the state at the start of a window.
type snapshot struct {
	at       time.Time
	apiWrite writeCounts
	apiFams  families
	opFams   families
	procs    map[string]procSample
	audit    auditRead
}

func (r *runner) auditPath() string { return filepath.Join(r.o.stateDir, "audit.log") }

// processes are the pid-file names of the processes measured: the product's controller first.
func (r *runner) processes() []string {
	ps := []string{r.product.process()}
	for _, c := range companions {
		if _, err := os.Stat(filepath.Join(r.o.stateDir, c+".pid")); err == nil {
			ps = append(ps, c)
		}
	}
	return append(ps, planeComponents...)
}

// key is the name process's figures are kept under: "operator" for the product's controller.
func (r *runner) key(process string) string {
	if process == r.product.process() {
		return "operator"
	}
	return process
}

// begin starts a window: the operator's peak RSS is reset and the counters read.
func (r *runner) begin(ctx context.Context) (*snapshot, error) {
	if _, off, err := readAudit(r.auditPath(), r.auditOffset, r.o.operatorUser); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	} else {
		r.auditOffset = off
	}
	if pid, err := pidOf(r.o.stateDir, r.product.process()); err == nil {
		_ = resetPeakRSS(pid) // without it, the peak is the peak since the operator started
	}
	s := &snapshot{at: r.clock.Now(), audit: newAuditRead()}
	var err error
	if s.procs, err = r.readProcs(); err != nil {
		return nil, err
	}
	if s.apiFams, err = scrapeAPIServer(ctx, r.kube.core.CoreV1().RESTClient()); err != nil {
		return nil, err
	}
	s.apiWrite = apiserverWrites(s.apiFams)
	if s.opFams, err = scrapeURL(ctx, r.http, r.o.operatorMetricsURL); err != nil {
		return nil, fmt.Errorf("scraping the operator: %w", err)
	}
	return s, nil
}

func (r *runner) readProcs() (map[string]procSample, error) {
	out := map[string]procSample{}
	for _, c := range r.processes() {
		pid, err := pidOf(r.o.stateDir, c)
		if err != nil {
			return nil, err
		}
		s, err := readProc(pid)
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", c, pid, err)
		}
		out[c] = s
	}
	return out, nil
}

// settle reads the audit log into s until it has logged no write for claims for quietFor (or
// settleTimeout passed), and returns how long that took.
func (r *runner) settle(ctx context.Context, s *snapshot) (time.Duration, bool, error) {
	start := r.clock.Now()
	quietSince := start
	ticker := r.clock.NewTicker(auditPoll)
	defer ticker.Stop()
	for {
		got, off, err := readAudit(r.auditPath(), r.auditOffset, r.o.operatorUser)
		if err != nil {
			return 0, false, fmt.Errorf("reading the audit log: %w", err)
		}
		r.auditOffset = off
		s.audit.add(got)
		for k := range got.writes {
			if !background(writeKey{Group: k.Group, Resource: k.Resource}) {
				quietSince = r.clock.Now()
			}
		}
		now := r.clock.Now()
		if now.Sub(quietSince) >= quietFor {
			return quietSince.Sub(start), true, nil
		}
		if now.Sub(start) >= settleTimeout {
			return now.Sub(start), false, nil
		}
		select {
		case <-ticker.C():
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
}

// end closes the window begun at s, with claims claims to divide by.
func (r *runner) end(ctx context.Context, s *snapshot, claims int) (Window, error) {
	w := Window{Claims: claims}
	settled, quiet, err := r.settle(ctx, s)
	if err != nil {
		return w, err
	}
	w.SettleSeconds, w.Settled = settled.Seconds(), quiet
	procs, err := r.readProcs()
	if err != nil {
		return w, err
	}
	apiFams, err := scrapeAPIServer(ctx, r.kube.core.CoreV1().RESTClient())
	if err != nil {
		return w, err
	}
	opFams, err := scrapeURL(ctx, r.http, r.o.operatorMetricsURL)
	if err != nil {
		return w, fmt.Errorf("scraping the operator: %w", err)
	}
	w.Seconds = r.clock.Since(s.at).Seconds()
	w.Writes = writesTable(apiserverWrites(apiFams).sub(s.apiWrite), s.audit, claims)
	w.ByClient = byClient(s.audit.writes, claims)
	w.CPUMsPerClaim, w.CPUSeconds = map[string]float64{}, map[string]float64{}
	for _, c := range r.processes() {
		cpu := procs[c].CPU - s.procs[c].CPU
		w.CPUSeconds[r.key(c)] = cpu.Seconds()
		w.CPUMsPerClaim[r.key(c)] = float64(cpu.Milliseconds()) / float64(max(claims, 1))
	}
	op := procs[r.product.process()]
	w.OperatorRSSMiB, w.OperatorPeakRSSMiB = mib(op.RSSBytes), mib(op.PeakRSSBytes)
	w.OperatorHistograms = histogramsMatching(r.histograms, s.opFams, opFams)
	for _, name := range sortedKeys(w.OperatorHistograms) {
		if r.pass.MatchString(name) {
			h := w.OperatorHistograms[name]
			w.PassMetric, w.Pass = name, &h
			break
		}
	}
	if w.PassMetric == "" {
		for name := range opFams {
			if r.pass.MatchString(name) {
				w.PassMetric = name // exposed, but nothing observed in the window
				break
			}
		}
	}
	w.SandboxAPIAnswers = counterDeltaBy(s.opFams, opFams, "airlock_sandboxapi_requests_total", "endpoint", "code")
	w.APFRejected = counterSum(apiFams, "apiserver_flowcontrol_rejected_requests_total", nil) -
		counterSum(s.apiFams, "apiserver_flowcontrol_rejected_requests_total", nil)
	return w, nil
}

// idleCPU measures each process's CPU while nothing is asked of the plane but its heartbeats
// (Node leases, the operator's lease), in ms per second: what every window's CPU figures include
// for their length.
func (r *runner) idleCPU(ctx context.Context, d time.Duration) (map[string]float64, error) {
	before, err := r.readProcs()
	if err != nil {
		return nil, err
	}
	t0 := r.clock.Now()
	timer := r.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	after, err := r.readProcs()
	if err != nil {
		return nil, err
	}
	elapsed := r.clock.Since(t0).Seconds()
	out := map[string]float64{}
	for _, c := range r.processes() {
		out[r.key(c)] = float64((after[c].CPU - before[c].CPU).Milliseconds()) / elapsed
	}
	return out, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// runScenario sets up the scenario's namespaces, fills them (scale runs), sends the acquires and
// measures; unless it is the last scenario, it then deletes its namespaces and waits until they
// are gone.
func (r *runner) runScenario(ctx context.Context, s scenario, last bool) (*Result, error) {
	res := &Result{Scenario: s, StartedAt: r.clock.Now().UTC(), LoadAvgStart: loadavg(), ReadyAs: r.product.readyAs()}
	nss := s.namespaces()
	fmt.Printf("\n== %s: setting up %d namespace(s)\n", s.Name, len(nss))
	targets := make([]target, 0, len(nss))
	for _, ns := range nss {
		tg, err := r.product.setupNamespace(ctx, ns, s)
		if err != nil {
			return nil, err
		}
		if want := s.warmBefore(); want > 0 {
			t0 := r.clock.Now()
			fmt.Printf("   waiting for %d warm members in %s\n", want, ns)
			if err := r.product.waitWarmReady(ctx, ns, want); err != nil {
				return nil, err
			}
			res.WarmFillSeconds = r.clock.Since(t0).Seconds()
			fmt.Printf("   %d warm members Ready in %.1f s\n", want, res.WarmFillSeconds)
		}
		targets = append(targets, tg)
	}

	if s.FillNamespaces > 0 {
		f, err := r.fill(ctx, s, nss, targets)
		if err != nil {
			return nil, err
		}
		res.Fill = f
	}
	if err := r.measureLoop(ctx, s, nss, targets, res); err != nil {
		return res, err
	}
	if s.Warm > 0 {
		n, err := r.product.warmBound(ctx, nss)
		if err != nil {
			return res, err
		}
		res.WarmBound = &n
	}
	res.LoadAvgEnd = loadavg()
	if !last {
		for _, ns := range nss {
			r.product.forget(ns)
			if err := r.kube.deleteNamespace(ctx, ns); err != nil {
				return res, err
			}
		}
	}
	return res, ctx.Err()
}

// fill creates the scenario's standing claims in every namespace and waits until they settle.
func (r *runner) fill(ctx context.Context, s scenario, nss []string, targets []target) (*Fill, error) {
	total := s.FillNamespaces * s.FillPerNamespace
	fmt.Printf("   filling: %d claims through the Sandbox API (waitSeconds 0), then waiting until they are Bound\n", total)
	start, err := r.begin(ctx)
	if err != nil {
		return nil, err
	}
	t0 := r.clock.Now()
	for _, tg := range targets {
		if err := fill(ctx, tg, "fill", s.FillPerNamespace, fillParallel); err != nil {
			return nil, err
		}
	}
	f := &Fill{Claims: total, CreateSeconds: r.clock.Since(t0).Seconds()}
	fmt.Printf("   %d claims created in %.1f s\n", total, f.CreateSeconds)
	f.Bound, f.Failed, err = r.kube.waitClaimsSettled(ctx, r.clock, r.o.fillStall, nss, total, func(bound, failed int) {
		fmt.Printf("   %d Bound, %d failed (+%.0fs)\n", bound, failed, r.clock.Since(t0).Seconds())
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the fill: %w", err)
	}
	f.Seconds = r.clock.Since(t0).Seconds()
	f.BoundPerSec = perSecond(f.Bound, r.clock.Since(t0))
	if f.Window, err = r.end(ctx, start, total); err != nil {
		return nil, err
	}
	return f, nil
}

// measureLoop runs the scenario's open loop of acquires, or replays its day of sessions, and puts
// its figures into res (with a demand-following pool, its statuses watched through the loop, in
// one namespace).
func (r *runner) measureLoop(ctx context.Context, s scenario, nss []string, targets []target, res *Result) error {
	// A replayed day: its trace and its session calls, before the window opens.
	var trace []daySession
	if s.Day != nil {
		var err error
		if trace, err = committedDay(); err != nil {
			return err
		}
		if targets[0].sessions == nil {
			return fmt.Errorf("%s replays sessions through airlock's Sandbox API, which %s has not", s.Name, r.o.product)
		}
	}
	start, err := r.begin(ctx)
	if err != nil {
		return err
	}
	// A pool that follows demand: its statuses are watched through the loop (one namespace).
	var (
		samples   []poolSample
		watchErr  error
		watchDone = make(chan struct{})
	)
	wctx, stopWatch := context.WithCancel(ctx)
	if s.WarmPolicy != nil {
		go func() {
			defer close(watchDone)
			samples, watchErr = r.kube.watchPool(wctx, nss[0], r.clock.Now)
		}()
	} else {
		close(watchDone)
	}
	var (
		answers    []answer
		dayStart   time.Time
		dayAnswers []dayAnswer
	)
	if s.Day != nil {
		dayStart, dayAnswers = replayDay(ctx, r.clock, *targets[0].sessions, trace, s.Day.SpeedUp, r.o.acquireTimeout)
		for _, a := range dayAnswers {
			answers = append(answers, a.answer)
		}
	} else {
		answers = openLoop(ctx, r.clock, targets, s.Name, s.Acquires, s.offset, r.o.acquireTimeout)
	}
	stopWatch()
	<-watchDone
	res.Acquires = summariseAnswers(answers, s.sendRate())
	if res.Window, err = r.end(ctx, start, s.Acquires); err != nil {
		return err
	}
	if s.WarmPolicy == nil {
		return nil
	}
	if watchErr != nil {
		return watchErr
	}
	if s.Day != nil {
		d := summariseDay(trace, s.Day.SpeedUp, dayStart, dayAnswers, samples)
		d.Model = predictDay(trace, s.Day.SpeedUp, d.ReadyMs, *s.WarmPolicy)
		res.Day = &d
		return nil
	}
	warm, err := r.kube.warmSessions(ctx, nss[0])
	if err != nil {
		return err
	}
	d := summariseDemand(s, s.Name, answers, warm, samples)
	res.Demand = &d
	return nil
}

// summariseAnswers computes the acquire figures of one open-loop run.
func summariseAnswers(answers []answer, rate float64) Acquires {
	a := Acquires{Sent: len(answers), Errors: map[string]int{}}
	if len(answers) == 0 {
		return a
	}
	var ok []time.Duration
	first, lastSent, lastAnswer := answers[0].sent, answers[0].sent, answers[0].answered
	for _, an := range answers {
		if an.sent.Before(first) {
			first = an.sent
		}
		if an.sent.After(lastSent) {
			lastSent = an.sent
		}
		if an.answered.After(lastAnswer) {
			lastAnswer = an.answered
		}
		if an.err != nil {
			a.Errors[classify(an.err)]++
			continue
		}
		ok = append(ok, an.answered.Sub(an.sent))
	}
	a.Bound = len(ok)
	a.Latency = summarise(ok)
	a.SendSpreadMs = float64(lastSent.Sub(first).Microseconds()) / 1000
	if rate > 0 && len(answers) > 1 {
		a.SendRatePerSec = perSecond(len(answers)-1, lastSent.Sub(first))
	}
	a.WindowSeconds = lastAnswer.Sub(first).Seconds()
	a.CompletedPerSec = perSecond(a.Bound, lastAnswer.Sub(first))
	return a
}
