package sandboxd

// Usage (docs/record.md §3): sandboxd reads its container's cgroup (v2) each second, integrates
// memory over time, and appends a `usage` entry to the session's log every minute and in its
// sandbox.stopped entry: the boot's cumulative CPU time, memory, tool calls and, at the stop,
// the workspace's bytes. What cannot be measured is not invented: it is left out and the entry's
// message says so (and a log line, once).

import (
	"context"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/meter"
)

const (
	// usageSample is how often memory is sampled (and integrated).
	usageSample = time.Second
	// usagePeriod is how often a usage entry is appended.
	usagePeriod = time.Minute
)

// usageOptions say where usage is read from; tests replace them.
type usageOptions struct {
	// clock drives the sampler (nil: the real one).
	clock clock.WithTicker
	// cgroup finds the container's cgroup counters (v2, or v1).
	cgroup func() (meter.Counters, error)
	// walk bounds the workspace's walk at the stop.
	walk meter.WalkLimits
}

func defaultUsageOptions() usageOptions {
	return usageOptions{
		clock:  clock.RealClock{},
		cgroup: func() (meter.Counters, error) { return meter.Cgroup("/proc/self/cgroup", "/sys/fs/cgroup") },
		walk:   meter.DefaultWalkLimits,
	}
}

// usageMeter is sandboxd's side of usage: the cgroup's meter (nil when there is no cgroup v2 to
// read, noCgroup then says why) and the session's log it appends to.
type usageMeter struct {
	clock     clock.WithTicker
	ticker    clock.Ticker // the sampler's, made with the meter (run reads it)
	started   time.Time
	meter     *meter.Meter
	noCgroup  string
	workspace string
	walk      meter.WalkLimits
	log       usageLog
	logger    klog.Logger
}

// usageLog is what the meter needs of the session's log (recordlog.Log).
type usageLog interface {
	Append(record.Entry)
	Count(kind string) uint64
}

// newUsageMeter finds the cgroup; without one it logs once that CPU and memory are not
// measured.
func newUsageMeter(opts usageOptions, workspace string, log usageLog, logger klog.Logger) *usageMeter {
	if opts.clock == nil {
		opts.clock = clock.RealClock{}
	}
	u := &usageMeter{clock: opts.clock, workspace: workspace, walk: opts.walk, log: log, logger: logger}
	counters, err := opts.cgroup()
	if err != nil {
		u.noCgroup = err.Error()
		logger.Info("CPU and memory usage are not measured: the container's cgroup counters cannot be read; usage entries will say so", "err", err)
		return u
	}
	u.started = opts.clock.Now()
	u.meter = meter.New(counters, u.started)
	u.ticker = opts.clock.NewTicker(usageSample)
	logger.V(2).Info("Measuring usage", "cpu", counters.CPU, "memory", counters.Memory)
	return u
}

// run samples memory each second and appends a usage entry each minute until ctx ends.
func (u *usageMeter) run(ctx context.Context) {
	if u.meter == nil {
		return // no sampler; the entries still come with the stop (tool calls, workspace)
	}
	defer u.ticker.Stop()
	lastEntry := u.started
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-u.ticker.C():
			if now.Sub(lastEntry) >= usagePeriod {
				lastEntry = now
				usage, unmeasured := u.figures(now, false)
				u.log.Append(record.Entry{Kind: record.KindUsage, Usage: usage, Message: unmeasured})
				continue
			}
			if err := u.meter.Sample(now); err != nil {
				u.logger.V(2).Info("Sampling memory failed", "err", err)
			}
		}
	}
}

// figures are the boot's cumulative figures at now: CPU and memory from the cgroup, tool calls
// from the log, and at the stop the workspace's bytes. unmeasured says what is left out (0 in
// the entry) and why.
func (u *usageMeter) figures(now time.Time, stop bool) (*record.Usage, string) {
	usage := &record.Usage{ToolCalls: int64(u.log.Count(record.KindToolCall))}
	var notes []string
	switch {
	case u.meter == nil:
		notes = append(notes, "cpu and memory not measured: "+u.noCgroup)
	default:
		f, err := u.meter.Read(now)
		if err != nil {
			notes = append(notes, "cpu and memory not measured: "+err.Error())
			u.logger.Info("CPU and memory usage not measured", "err", err)
		} else {
			usage.CPUMillis, usage.MemoryMiBSeconds = f.CPUMillis, f.MemoryMiBSeconds
		}
	}
	if stop {
		n, err := meter.WorkspaceBytes(u.workspace, u.walk, u.clock.Now)
		if err != nil {
			notes = append(notes, "workspace bytes not measured: "+err.Error())
			u.logger.Info("Workspace bytes not measured", "err", err)
		} else {
			usage.WorkspaceBytes = n
		}
	}
	return usage, strings.Join(notes, "; ")
}

// stop stops the sampler's ticker (run may never have started).
func (u *usageMeter) stop() {
	if u.ticker != nil {
		u.ticker.Stop()
	}
}

// final is the stopped entry's usage (recordlog.Log.OnStop).
func (u *usageMeter) final() (*record.Usage, string) { return u.figures(u.clock.Now(), true) }
