// Package policy is the egress gateway's policy compiler, pure and apart from the gateway: what a
// claim may reach (Policy: hosts, ports, methods, paths, private addresses, credentials to
// inject), validated and normalised by Compile into a Compiled policy that matches a request's
// Target; the normal form of names and request targets (NormalizeHost, ParseAuthority: case,
// trailing dot, IDNA, no address in disguise); the classes of addresses (Classify); and the one
// conversion from the API's frozen egress record (FromRecord), with CheckClass, the check that
// admission and the controllers make of a class's egress (through sandboxpod.ClassConflict). It
// holds no client, no listener and nothing of the gateway's runtime: the controllers and
// sandboxpod import it, never pkg/egress. docs/egress.md is the contract.
package policy
