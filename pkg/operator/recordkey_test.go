package operator

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/record"
)

// TestRecordSigningIsDerivedFromTheTokenKey: the record's signer is record.SigningKey of the
// token key the operator holds; its public key, published once derived (the CA bundle
// distributor is told), is the signer's, and verifies what it signs.
func TestRecordSigningIsDerivedFromTheTokenKey(t *testing.T) {
	key := bytes.Repeat([]byte{9}, claimtoken.KeyBytes)
	client := k8sfake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "airlock-system", Name: claimtoken.SecretName},
		Data:       map[string][]byte{claimtoken.KeyField: key},
	})
	r := newRecordSigning(claimtoken.NewSource(client, "airlock-system"))
	told := 0
	remove := r.OnBundleChange(func() { told++ })
	defer remove()
	if r.Bundle() != nil {
		t.Fatal("a public key before the key was derived")
	}
	signer, err := r.Signer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := record.SigningKey(key)
	if want, _ := record.NewSigner(priv); signer.ID() != want.ID() {
		t.Errorf("signer %s, want record.SigningKey of the token key (%s)", signer.ID(), want.ID())
	}
	if again, _ := r.Signer(t.Context()); again != signer || told != 1 {
		t.Errorf("derived again (%v) or told %d times, want once", again != signer, told)
	}
	keys, err := record.ParsePublicKeys(r.Bundle())
	if err != nil || keys[signer.ID()] == nil || len(keys) != 1 {
		t.Fatalf("published %q: %v, want the signer's public key", r.Bundle(), err)
	}
	chain, _ := record.NewChain("uid-1", signer)
	e, _ := chain.Append(record.Entry{Time: record.FormatTime(t0Record), Source: record.SourceOperator, Kind: record.KindClaimPhase, Phase: "Bound"})
	line, _ := e.Line()
	a, _ := chain.Anchor(t0Record)
	var buf bytes.Buffer
	buf.Write(append(line, '\n'))
	_ = record.WriteJSONL(&buf, nil, &a)
	if rep, err := record.Verify(&buf, keys, record.Options{Claim: "uid-1"}); err != nil || !rep.Intact() {
		t.Errorf("a record signed with the signer does not verify with the published key: %v %v", err, rep.Findings)
	}
}

var t0Record = time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
