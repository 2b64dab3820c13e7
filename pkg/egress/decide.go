package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"

	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// decide returns the rules of id's policy that allow t for a request of kind ("connect" or
// "http", with method and escaped path), before anything is resolved; or the refusal reason. A
// CONNECT is passed through when some rule allows the host without conditions; otherwise, when
// the gateway can terminate TLS now (asked only then), it is terminated (terminate), and each request in it is held to
// the rules; otherwise it is refused. Plain HTTP never uses a rule that injects a credential.
func decide(id Identity, t policy.Target, kind, method, path string, canTerminate func() bool) (rules []*policy.CompiledRule, terminate bool, reason Reason) {
	rules, hostListed := id.Policy.Candidates(t)
	switch {
	case !hostListed && t.IsIP():
		return nil, false, ReasonIPLiteral
	case !hostListed:
		return nil, false, ReasonNotAllowed
	case len(rules) == 0:
		return nil, false, ReasonPortNotAllowed
	}
	if kind == "connect" {
		passthrough := slices.DeleteFunc(slices.Clone(rules), func(r *policy.CompiledRule) bool { return r.Inspects() || r.Inject != nil })
		switch {
		case len(passthrough) > 0:
			return passthrough, false, ""
		case canTerminate():
			return rules, true, ""
		}
		return nil, false, ReasonInspection
	}
	allowing := slices.DeleteFunc(rules, func(r *policy.CompiledRule) bool { return !r.AllowsRequest(method, path) })
	plain := slices.DeleteFunc(slices.Clone(allowing), func(r *policy.CompiledRule) bool { return r.Inject != nil })
	switch {
	case len(plain) > 0:
		return plain, false, ""
	case len(allowing) > 0:
		return nil, false, ReasonCredentialNeedsTLS
	}
	return nil, false, ReasonMethodOrPath
}

// resolve returns the addresses of an allowed target and the rules that admit all of them: the
// gateway's own lookup of an allowed name (never of any other), or the listed address itself.
// An answer that mixes admitted and refused addresses is refused whole.
func (g *Gateway) resolve(ctx context.Context, t policy.Target, rules []*policy.CompiledRule) ([]netip.Addr, []*policy.CompiledRule, Reason) {
	addrs := []netip.Addr{t.Addr}
	if !t.IsIP() {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
		defer cancel()
		var err error
		// Rooted: the name itself, never the pod's search domains (a gateway pod's resolv.conf
		// has ndots:5 and the cluster's suffixes, which would send allowed.example to
		// allowed.example.<namespace>.svc.cluster.local first).
		addrs, err = g.cfg.Resolver.LookupNetIP(ctx, "ip", t.Host+".")
		if err != nil || len(addrs) == 0 {
			return nil, nil, ReasonResolveFailed
		}
	}
	worst := policy.ClassPublic
	for _, a := range addrs {
		worst = max(worst, policy.Classify(a, g.cfg.ClusterCIDRs))
	}
	admitted := slices.DeleteFunc(slices.Clone(rules), func(r *policy.CompiledRule) bool {
		return addressReason(worst, r.AllowPrivate) != ""
	})
	if len(admitted) == 0 {
		return nil, nil, addressReason(worst, false)
	}
	return addrs, admitted, ""
}

// dial connects to the first of the checked addresses that answers, by address: nothing is
// resolved again.
func (g *Gateway) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel()
	var errs []error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap().WithZone(""), port)
		c, err := g.cfg.Dialer.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, err)
	}
	return nil, netip.AddrPort{}, errors.Join(errs...)
}

// open decides, resolves and dials a target for ex; on a refusal it records the reason and
// returns a nil connection.
func (g *Gateway) open(ctx context.Context, ex *exchange, t policy.Target, method, path string) (net.Conn, []*policy.CompiledRule) {
	ex.host, ex.port = t.Host, t.Port
	rules, terminate, reason := decide(ex.id, t, ex.kind, method, path, g.cfg.Terminate.available)
	ex.terminate = terminate
	if reason != "" {
		ex.reason = reason
		return nil, nil
	}
	addrs, rules, reason := g.resolve(ctx, t, rules)
	if reason != "" {
		ex.reason = reason
		return nil, nil
	}
	upstream, dialed, err := g.dial(ctx, addrs, t.Port)
	if err != nil {
		ex.reason = ReasonDialFailed
		return nil, nil
	}
	ex.dialed = dialed
	return upstream, rules
}

// addressReason is the refusal reason for an address of class c under a rule that allows
// private addresses or not; "" when the address is admitted.
func addressReason(c policy.AddressClass, allowPrivate bool) Reason {
	switch c {
	case policy.ClassLocal:
		return ReasonLocalAddress
	case policy.ClassCluster:
		if !allowPrivate {
			return ReasonClusterAddress
		}
	case policy.ClassPrivate:
		if !allowPrivate {
			return ReasonPrivateAddress
		}
	}
	return ""
}
