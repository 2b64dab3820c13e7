package main

import (
	"fmt"
	"slices"
	"strings"
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
}

// scenarioNames are the names parseScenarios knows, in their usual order.
func scenarioNames() []string {
	return []string{"rate10", "rate20", "rate40", "burst60", "warm20", "scale2000", "scale10x500"}
}

// peerScenarios are the scenarios the peer runs: all but the scale runs, whose fill goes through
// airlock's Sandbox API.
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
