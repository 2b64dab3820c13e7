package client

// Verifying the operator's isolation attestation (docs/isolation.md, "Verifying it").

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// DefaultIsolationKeysFile is where a runtime's pod has the operator's isolation keys: the key
// isolation-keys.pem of the ConfigMap airlock-ca, mounted at /var/run/airlock/ca.
const DefaultIsolationKeysFile = "/var/run/airlock/ca/isolation-keys.pem"

// EnvIsolationKeysFile overrides DefaultIsolationKeysFile.
const EnvIsolationKeysFile = "AIRLOCK_ISOLATION_KEYS_FILE"

// ErrIsolation is the error of a sandbox whose isolation statement is missing, does not verify,
// or does not show what the runtime requires.
var ErrIsolation = errors.New("the sandbox's isolation is not proven")

// VerifyIsolation verifies the acquire answer's attestation with the operator's published keys
// (the PEM of isolation-keys.pem): signed by one of them, about this claim of namespace and the
// token this answer carries, its evidence what its digest says. It returns the statement, whose
// Kernel says whether the sandbox runs on a kernel of its own ("Dedicated") or the node's.
func (sb *Sandbox) VerifyIsolation(keysPEM []byte, namespace string) (*attestation.Statement, error) {
	if sb.Response == nil || sb.Response.Attestation == nil {
		return nil, fmt.Errorf("%w: the acquire answer of claim %s carries no attestation", ErrIsolation, sb.Claim)
	}
	keys, err := attestation.ParsePublicKeys(keysPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: the operator's keys: %v", ErrIsolation, err)
	}
	token, ok := strings.CutPrefix(sb.Authorization, "Bearer ")
	if !ok || token == "" {
		return nil, fmt.Errorf("%w: the acquire answer of claim %s has no bearer token", ErrIsolation, sb.Claim)
	}
	st, err := attestation.Verify(sb.Response.Attestation, keys, attestation.Expect{Token: token, Namespace: namespace, Claim: sb.Claim})
	if err != nil {
		return nil, fmt.Errorf("%w: claim %s: %v", ErrIsolation, sb.Claim, err)
	}
	return st, nil
}

// verifyIsolation is Acquire's check when Config.VerifyIsolation is set: the keys are read from
// the file for every sandbox (the ConfigMap's mount follows a rotation).
func (s *Session) verifyIsolation(sb *Sandbox) error {
	if !s.cfg.VerifyIsolation {
		return nil
	}
	pem, err := os.ReadFile(s.cfg.IsolationKeysFile)
	if err != nil {
		return fmt.Errorf("%w: reading the operator's keys: %v", ErrIsolation, err)
	}
	st, err := sb.VerifyIsolation(pem, s.cfg.Namespace)
	if err != nil {
		return err
	}
	if s.cfg.RequireDedicatedKernel && st.Kernel != "Dedicated" {
		return fmt.Errorf("%w: claim %s runs on the node's kernel (%s), and a kernel of its own is required", ErrIsolation, sb.Claim, st.NodeKernel)
	}
	sb.Isolation = st
	return nil
}
