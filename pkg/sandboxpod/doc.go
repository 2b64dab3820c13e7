// Package sandboxpod says what a sandbox is, as pure functions over API objects (no clients, no
// controller, no program): the record frozen at admission from a class and a registry entry, with
// every default filled in one place (record.go), the one class-conflict check that admission and
// the controllers make (its egress part is pkg/egress/policy's CheckClass), a claim's pod and
// token Secret (pod.go), its default-deny NetworkPolicy (policy.go) and the egress gateway's rule
// and proxy environment (egress.go), security contexts and resource defaults (resources.go), the restricted contexts a
// workspace's Jobs run with (pod.go: JobConfig, for pkg/workspace's builders),
// warm members and the pool key (member.go), the transforms of the operator's caches (strip.go)
// and what a pod's status says (status.go). What a workspace is (its directory, the sync-back Job,
// the kept record) is pkg/workspace's. The controllers build from these and write through their
// own clients.
package sandboxpod
