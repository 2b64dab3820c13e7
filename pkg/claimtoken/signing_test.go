package claimtoken

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// TestSigningKey: the signing key is the operator key's alone: one key for every replica, another
// for another operator key, and neither the proxy key (the gateway's) nor a token yields it.
func TestSigningKey(t *testing.T) {
	k, err := SigningKey(testKey)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := SigningKey(append([]byte(nil), testKey...))
	if !k.Equal(again) {
		t.Error("two derivations of one key differ")
	}
	other, _ := SigningKey(bytes.Repeat([]byte{8}, KeyBytes))
	if k.Equal(other) {
		t.Error("another operator key derives the same signing key")
	}
	pk, _ := ProxyKey(testKey)
	if fromProxy, _ := SigningKey(pk); fromProxy.Equal(k) {
		t.Error("the gateway's proxy key derives the signing key")
	}
	if bytes.Equal(k.Seed(), testKey) || bytes.Equal(k.Seed(), pk) {
		t.Error("the signing key's seed is another key")
	}
	if _, err := SigningKey(testKey[:KeyBytes-1]); !errors.Is(err, ErrNoKey) {
		t.Errorf("a short key: %v, want ErrNoKey", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns}, Data: map[string][]byte{KeyField: testKey}})
	fromSource, err := NewSource(client, ns).SigningKey(ctx)
	if err != nil || !fromSource.Equal(k) {
		t.Errorf("Source.SigningKey %v, %v", fromSource.Public().(ed25519.PublicKey), err)
	}
}

// TestIsolationKeys: the published bundle is empty until the key is read, then the signing key's
// public key, and its listener is told once.
func TestIsolationKeys(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns}, Data: map[string][]byte{KeyField: testKey}})
	src := NewSource(client, ns)
	keys := src.IsolationKeys()
	if b := keys.Bundle(); b != nil {
		t.Fatalf("a bundle before the key is read: %s", b)
	}
	told := make(chan struct{}, 2)
	keys.OnBundleChange(func() { told <- struct{}{} })
	if _, err := src.Key(ctx); err != nil {
		t.Fatal(err)
	}
	<-told
	parsed, err := attestation.ParsePublicKeys(keys.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	k, _ := SigningKey(testKey)
	pub := k.Public().(ed25519.PublicKey)
	if len(parsed) != 1 || !parsed[attestation.KeyID(pub)].Equal(pub) {
		t.Errorf("published %v, want the signing key's public key", parsed)
	}
}
