// Package claimname computes the deterministic name of a SandboxClaim (SPEC section 2), so that
// every operator replica computes the same name for one session and handle, and concurrent
// acquires collapse into one object.
package claimname

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxRuntimePrefix is how much of the runtime's name the claim name keeps.
const maxRuntimePrefix = 40

// hashLen is how many hex digits of the hash the claim name keeps.
const hashLen = 10

// ReplacementSuffix marks the claim that replaces a Failed one.
const ReplacementSuffix = "-r1"

// For returns the name of the claim of runtime for one session and handle:
// <runtime cut to 40>-<first 10 hex of sha256(session NUL handle)>.
func For(runtime, session, handle string) string {
	prefix := runtime
	if len(prefix) > maxRuntimePrefix {
		prefix = prefix[:maxRuntimePrefix]
	}
	// A cut can leave a trailing '-' or '.', which is still a valid name part before "-<hash>"
	// for '-' but not for '.': trim both so the name reads well and stays a DNS subdomain.
	prefix = strings.TrimRight(prefix, "-.")
	return prefix + "-" + Hash(session, handle)
}

// Replacement returns the name of the claim that replaces the claim named name.
func Replacement(name string) string {
	return name + ReplacementSuffix
}

// Shard returns the claim-shard label of the claim named name (and of its children): the
// name's last character, one of [a-z0-9] for every valid name, as the admission policy
// computes it (name.substring(size(name) - 1)).
func Shard(name string) string {
	if name == "" {
		return ""
	}
	return name[len(name)-1:]
}

// Hash returns the first 10 hex digits of sha256(session NUL handle).
func Hash(session, handle string) string {
	sum := sha256.Sum256([]byte(session + "\x00" + handle))
	return hex.EncodeToString(sum[:])[:hashLen]
}

// SessionHash returns a label-safe hash of a session (the airlock.dev/session-hash label): the
// first 10 hex digits of sha256(session).
func SessionHash(session string) string {
	sum := sha256.Sum256([]byte(session))
	return hex.EncodeToString(sum[:])[:hashLen]
}
