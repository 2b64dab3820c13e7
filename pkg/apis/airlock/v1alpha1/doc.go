// Package v1alpha1 is the v1alpha1 version of the airlock.dev API: SandboxClass, ToolRegistry,
// AgentRuntime and SandboxClaim (SPEC section 2), and SessionRecord, a segment of a claim's session
// record (docs/record.md §2.5).
//
// +k8s:deepcopy-gen=package
// +groupName=airlock.dev
package v1alpha1
