package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// scenario is one measured run.
type scenario struct {
	Name string `json:"name"`
	// Acquires are sent open-loop at Rate per second (0: a burst, all at once).
	Acquires int     `json:"acquires"`
	Rate     float64 `json:"rate"`
	// FillNamespaces × FillPerNamespace claims are created and Bound first (the scale runs): the
	// acquires then go round-robin to those namespaces, on top of the live claims.
	FillNamespaces   int `json:"fillNamespaces,omitempty"`
	FillPerNamespace int `json:"fillPerNamespace,omitempty"`
	// Warm is the registry sandbox's warm members: the acquires start once that many are Ready.
	Warm int32 `json:"warm,omitempty"`
	// Phases, when set, are the open loop's rates in turn (Rate is 0 and Acquires their sum):
	// each phase sends at its rate for its length.
	Phases []phase `json:"phases,omitempty"`
	// WarmPolicy, when set, is the registry sandbox's warmPolicy (a pool that follows demand)
	// instead of a static Warm: the acquires start once its min is Ready.
	WarmPolicy *warmPolicy `json:"warmPolicy,omitempty"`
	// Day, when set, replays a day of sessions (warm-day) instead of an open loop: Acquires are
	// its sessions.
	Day *daySpec `json:"day,omitempty"`
}

// daySpec is a replayed day: the trace and how much faster than the day it is replayed.
type daySpec struct {
	Trace   string  `json:"trace"`
	SpeedUp float64 `json:"speedUp"`
}

// phase is one rate of a phased open loop.
type phase struct {
	Rate    float64 `json:"rate"`
	Seconds float64 `json:"seconds"`
}

// acquires is how many acquires the phase sends.
func (p phase) acquires() int { return int(math.Round(p.Rate * p.Seconds)) }

// warmPolicy is a registry sandbox's warmPolicy bounds (airlock only).
type warmPolicy struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

// warmDemandPhases are the warm-demand scenario's (issue 40 item 3): a steady 2/s, a burst of 10x
// that for 30 s, and 2/s again.
var warmDemandPhases = []phase{{Rate: 2, Seconds: 30}, {Rate: 20, Seconds: 30}, {Rate: 2, Seconds: 30}}

// offset is when acquire i is sent, after the first: i/rate, or within its phase at its
// phase's rate after the phases before it.
func (s scenario) offset(i int) time.Duration {
	if len(s.Phases) == 0 {
		return schedule(i, s.Rate)
	}
	var start time.Duration
	for _, p := range s.Phases {
		n := p.acquires()
		if i < n {
			return start + schedule(i, p.Rate)
		}
		i -= n
		start += time.Duration(p.Seconds * float64(time.Second))
	}
	return start
}

// phaseOf is the index of the phase acquire i is sent in (0 without phases).
func (s scenario) phaseOf(i int) int {
	for k, p := range s.Phases {
		if i < p.acquires() {
			return k
		}
		i -= p.acquires()
	}
	return max(len(s.Phases)-1, 0)
}

// warmBefore is how many warm members must be Ready before the acquires start: a static pool's
// count, or a demand pool's min.
func (s scenario) warmBefore() int32 {
	if s.WarmPolicy != nil {
		return s.WarmPolicy.Min
	}
	return s.Warm
}

// sendRate is the rate the acquires are sent at on average (0: a burst).
func (s scenario) sendRate() float64 {
	if s.Day != nil {
		return float64(s.Acquires) / scaled(day, s.Day.SpeedUp).Seconds()
	}
	if len(s.Phases) == 0 {
		return s.Rate
	}
	var seconds float64
	for _, p := range s.Phases {
		seconds += p.Seconds
	}
	return float64(s.Acquires) / seconds
}

// describeLoad says how the acquires are sent, for the tables.
func (s scenario) describeLoad() string {
	if d := s.Day; d != nil {
		return fmt.Sprintf("replaying a day (%s) at %gx: 24 h in %.1f min, each session held for its length/%g, then closed",
			d.Trace, d.SpeedUp, scaled(day, d.SpeedUp).Minutes(), d.SpeedUp)
	}
	if len(s.Phases) > 0 {
		parts := make([]string, 0, len(s.Phases))
		for _, p := range s.Phases {
			parts = append(parts, fmt.Sprintf("%g/s for %g s", p.Rate, p.Seconds))
		}
		return "open-loop at " + strings.Join(parts, ", then ")
	}
	if s.Rate <= 0 {
		return "in one burst"
	}
	return fmt.Sprintf("open-loop at %g/s", s.Rate)
}

// scenarioNames are the names parseScenarios knows, in their usual order.
func scenarioNames() []string {
	return []string{"rate10", "rate20", "rate40", "burst60", "warm20", "warm-demand", "warm-day", "scale2000", "scale10x500"}
}

// peerScenarios are the scenarios the peer runs: all but the scale runs, whose fill goes through
// airlock's Sandbox API, and warm-demand and warm-day (the peer's pool keeps a fixed number of
// replicas unless an HPA or KEDA scales it through its /scale, and this plane runs neither).
func peerScenarios() []string {
	return []string{"rate10", "rate20", "rate40", "burst60", "warm20"}
}

// sizes are the scenarios' numbers of claims.
type sizes struct {
	// Claims are each rate scenario's acquires.
	Claims int
	// ScaleAcquires are sent at 10/s on top of the scale runs' live claims: ScaleOne in one
	// namespace (scale2000), ScalePerNamespace in each of 10 (scale10x500).
	ScaleAcquires, ScaleOne, ScalePerNamespace int
	// DaySpeedUp is how many times faster than the day warm-day replays its trace.
	DaySpeedUp float64
}

// parseScenarios turns a comma list of names into scenarios of the sizes given.
func parseScenarios(list string, z sizes) ([]scenario, error) {
	if z.Claims < 1 || z.ScaleAcquires < 1 || z.ScaleOne < 1 || z.ScalePerNamespace < 1 {
		return nil, fmt.Errorf("every number of claims must be at least 1: %+v", z)
	}
	var out []scenario
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if seen[name] {
			return nil, fmt.Errorf("scenario %q is listed twice", name)
		}
		seen[name] = true
		switch name {
		case "rate10":
			out = append(out, scenario{Name: name, Acquires: z.Claims, Rate: 10})
		case "rate20":
			out = append(out, scenario{Name: name, Acquires: z.Claims, Rate: 20})
		case "rate40":
			out = append(out, scenario{Name: name, Acquires: z.Claims, Rate: 40})
		case "burst60":
			out = append(out, scenario{Name: name, Acquires: 60})
		case "warm20":
			// Issue 14: 200 acquires at 20/s with a pool of 250 (more than the acquires: every
			// one can be bound warm).
			out = append(out, scenario{Name: name, Acquires: z.Claims, Rate: 20, Warm: int32(z.Claims + z.Claims/4)})
		case "warm-demand":
			// Issue 40 item 3: a pool that follows demand (min 2, max 200) through 2/s, a 10x
			// burst for 30 s and 2/s again; its own sizes, whatever --claims says.
			s := scenario{Name: name, Phases: slices.Clone(warmDemandPhases), WarmPolicy: &warmPolicy{Min: 2, Max: 200}}
			for _, p := range s.Phases {
				s.Acquires += p.acquires()
			}
			out = append(out, s)
		case "warm-day":
			// Issue 40 item 3's replayed day: the committed trace's sessions, each closed after
			// its length, to warm-demand's pool; the trace's own sizes, whatever --claims says.
			if !(z.DaySpeedUp >= 1) {
				return nil, fmt.Errorf("warm-day: the day's speed-up must be at least 1, not %v", z.DaySpeedUp)
			}
			trace, err := committedDay()
			if err != nil {
				return nil, err
			}
			out = append(out, scenario{Name: name, Acquires: len(trace), WarmPolicy: &warmPolicy{Min: 2, Max: 200},
				Day: &daySpec{Trace: dayTracePath, SpeedUp: z.DaySpeedUp}})
		case "scale2000":
			out = append(out, scenario{Name: name, Acquires: z.ScaleAcquires, Rate: 10, FillNamespaces: 1, FillPerNamespace: z.ScaleOne})
		case "scale10x500":
			out = append(out, scenario{Name: name, Acquires: z.ScaleAcquires, Rate: 10, FillNamespaces: 10, FillPerNamespace: z.ScalePerNamespace})
		default:
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(scenarioNames(), ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario in %q (known: %s)", list, strings.Join(scenarioNames(), ", "))
	}
	return out, nil
}

// namespaces are the scenario's namespaces: one, or one per filled namespace.
func (s scenario) namespaces() []string {
	n := max(s.FillNamespaces, 1)
	out := make([]string, 0, n)
	for i := range n {
		if n == 1 {
			out = append(out, "bench-"+s.Name)
		} else {
			out = append(out, fmt.Sprintf("bench-%s-%d", s.Name, i))
		}
	}
	return slices.Clip(out)
}
