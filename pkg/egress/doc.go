// Package egress is airlock's egress gateway: an HTTP proxy (CONNECT tunnels and absolute-URI
// requests) that a sandbox may reach, and through which it reaches only the hosts its claim's
// policy lists. Every decision fails closed, in this order, and each refusal has one reason
// (reasons.go):
//
//  1. who is asking: the Proxy-Authorization credential and the connection's source address
//     must name the same claim in a ClaimLookup that has synced (identity.go; in a cluster,
//     cluster.go, with the proxy key the operator derives for the gateway, never its token key);
//  2. what is asked for: the target's name is normalised (case, trailing dot, IDNA) and matched
//     against the claim's rules, with its port (and, for plain HTTP, method and path), before
//     anything is resolved: a name that is not allowed never reaches the resolver (the policy
//     compiler, pkg/egress/policy);
//  3. where it is: the gateway resolves an allowed name itself, refuses answers outside the
//     globally reachable address space (loopback, link-local and the metadata address, private,
//     CGNAT, the cluster's own ranges, ...) unless the rule allows private addresses, and dials
//     the very address it checked (decide.go, with the address classes of pkg/egress/policy);
//  4. what is sent: inside a CONNECT tunnel the TLS ClientHello's SNI must be the CONNECT host
//     (connect.go); a plain HTTP request's Host header must be its target, and every request on a
//     connection is checked on its own (forward.go);
//  5. where a rule restricts methods or paths or injects a credential and no rule allows the host
//     without conditions, a tunnel is terminated with a CA the gateway is given, each request in it
//     held to the host and the rules (a credential only with its rule's methods, GET and HEAD when
//     it lists none, never TRACE), its body to a method that has one and one length, the
//     credential added, the upstream verified, 1xx answers relayed before the final one, the
//     upstream connection kept only after an exchange whose framing the gateway settled
//     (terminate.go), and every credential replaced in what comes back (scrub.go).
//
// The policy compiler (rules, names, address classes, the conversion from the API's frozen record)
// is pure and apart, in pkg/egress/policy, so that the controllers check a class's egress without
// importing the gateway.
//
// docs/egress.md is the contract: what is allowed, how names are matched, the refusal reasons and
// the bypass techniques the tests prove refused.
package egress
