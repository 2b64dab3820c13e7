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
