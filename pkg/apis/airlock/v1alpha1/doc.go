// Package v1alpha1 is the v1alpha1 version of the airlock.dev API: SandboxClass, ToolRegistry,
// AgentRuntime and SandboxClaim (SPEC section 2).
//
// +k8s:deepcopy-gen=package
// +groupName=airlock.dev
package v1alpha1
