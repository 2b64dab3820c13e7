package policy

import (
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// FromRecord is the policy a claim's frozen egress (status.frozen.egress, taken from
// SandboxClass.spec.egress at admission) gives the gateway: the one conversion from the API's
// types to the gateway's, so that the gateway enforces exactly what was frozen. Each host entry
// is a rule; each credential is a rule of its own, for its one host and port, with its methods,
// paths and the header to inject (Secret: the credential's Secret's name). A nil record is the
// empty policy: nothing is allowed.
func FromRecord(e *airlockv1alpha1.FrozenEgress) Policy {
	if e == nil {
		return Policy{}
	}
	rules := make([]Rule, 0, len(e.Hosts)+len(e.Credentials))
	for _, h := range e.Hosts {
		rules = append(rules, Rule{
			Host:         h.Host,
			Ports:        ports(h.Ports),
			Methods:      methods(h.Methods),
			PathPrefixes: paths(h.PathPrefixes),
			AllowPrivate: h.AllowPrivate,
		})
	}
	for _, c := range e.Credentials {
		rules = append(rules, Rule{
			Host:         c.Host,
			Ports:        ports([]airlockv1alpha1.EgressPort{c.Port}),
			Methods:      methods(c.Methods),
			PathPrefixes: paths(c.PathPrefixes),
			Inject:       &Injection{Header: c.Header, Secret: c.SecretName},
		})
	}
	return Policy{Rules: rules}
}

// ports converts the API's ports; one out of range becomes 0, which Compile refuses (the schema
// refuses it first): a port is never wrapped into another.
func ports(in []airlockv1alpha1.EgressPort) []uint16 {
	out := make([]uint16, len(in))
	for i, p := range in {
		if p >= 1 && p <= 65535 {
			out[i] = uint16(p)
		}
	}
	return out
}

func methods(in []airlockv1alpha1.EgressMethod) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, m := range in {
		out[i] = string(m)
	}
	return out
}

func paths(in []airlockv1alpha1.EgressPathPrefix) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, p := range in {
		out[i] = string(p)
	}
	return out
}

// CheckClass says why the gateway would not compile a class's egress, or nil: the schema
// should have refused it, but a class written before a rule existed is refused at admission.
func CheckClass(e *airlockv1alpha1.SandboxEgress) error {
	if e == nil {
		return nil
	}
	_, err := Compile(FromRecord(&airlockv1alpha1.FrozenEgress{Hosts: e.Hosts, Credentials: e.Credentials}))
	return err
}
