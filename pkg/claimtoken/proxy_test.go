package claimtoken

import (
	"bytes"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

// TestDeriveProxy: the proxy credential is deterministic, bound to the claim and key like the
// bearer token, and is not the bearer token.
func TestDeriveProxy(t *testing.T) {
	p, err := DeriveProxy(testKey, "uid-1", "team-a", "agent-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 43 {
		t.Errorf("credential %q has %d characters, want 43", p, len(p))
	}
	if again, _ := DeriveProxy(testKey, "uid-1", "team-a", "agent-0123456789"); again != p {
		t.Error("the derivation is not deterministic")
	}
	bearer, _ := Derive(testKey, "uid-1", "team-a", "agent-0123456789")
	if bearer == p {
		t.Error("the proxy credential equals the bearer token")
	}
	for name, other := range map[string]func() (string, error){
		"another UID": func() (string, error) { return DeriveProxy(testKey, "uid-2", "team-a", "agent-0123456789") },
		"another key": func() (string, error) {
			return DeriveProxy(bytes.Repeat([]byte{8}, KeyBytes), "uid-1", "team-a", "agent-0123456789")
		},
	} {
		if o, err := other(); err != nil || o == p {
			t.Errorf("%s: %q, %v; want another credential", name, o, err)
		}
	}
	if _, err := DeriveProxy(testKey[:KeyBytes-1], "uid-1", "team-a", "a"); !errors.Is(err, ErrNoKey) {
		t.Errorf("a short key: %v, want ErrNoKey", err)
	}
}

// TestProxyKey: the proxy key is the operator key's HMAC in a domain of its own: not the key,
// and nothing derived with it in place of the key is a bearer token or a member key; the proxy
// credential the operator hands out is DeriveProxy of it. EnsureProxyKeySecret creates the
// Secret, then repairs another value.
func TestProxyKey(t *testing.T) {
	pk, err := ProxyKey(testKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(pk) != KeyBytes || bytes.Equal(pk, testKey) {
		t.Fatalf("proxy key %x", pk)
	}
	token, _ := Derive(testKey, "uid-1", "team-a", "c")
	if fromProxy, _ := Derive(pk, "uid-1", "team-a", "c"); fromProxy == token {
		t.Error("the proxy key derives the bearer token")
	}
	mk, _ := MemberKey(testKey, "team-a", "m")
	if fromProxy, _ := MemberKey(pk, "team-a", "m"); bytes.Equal(fromProxy, mk) {
		t.Error("the proxy key derives the member key")
	}
	if _, err := ProxyKey(testKey[:KeyBytes-1]); !errors.Is(err, ErrNoKey) {
		t.Errorf("a short key: %v, want ErrNoKey", err)
	}

	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns}, Data: map[string][]byte{KeyField: testKey}})
	src := NewSource(client, ns)
	cred, err := src.ProxyCredential(ctx, "uid-1", "team-a", "c")
	if want, _ := DeriveProxy(pk, "uid-1", "team-a", "c"); err != nil || cred != want {
		t.Errorf("ProxyCredential %q, %v; want DeriveProxy of the proxy key %q", cred, err, want)
	}
	for _, step := range []string{"created", "repaired"} {
		if err := src.EnsureProxyKey(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := client.CoreV1().Secrets(ns).Get(ctx, ProxySecretName, metav1.GetOptions{})
		if err != nil || !bytes.Equal(s.Data[KeyField], pk) {
			t.Fatalf("%s: %v, %v", step, s, err)
		}
		s.Data[KeyField] = []byte("another value, 32 bytes long....")
		if _, err := client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeriveMemberProxy: a warm member's proxy credential is deterministic and bound to the
// proxy key, the pod's UID, namespace and name; it is in a domain of its own, so it is never a
// claim's proxy credential, bearer token or member key, even for the same UID, namespace and
// name; the operator's key itself in place of the proxy key gives another (the gateway holds
// only the proxy key); the Source hands out DeriveMemberProxy of its proxy key.
func TestDeriveMemberProxy(t *testing.T) {
	pk, err := ProxyKey(testKey)
	if err != nil {
		t.Fatal(err)
	}
	p, err := DeriveMemberProxy(pk, "pod-uid-1", "team-a", "tools-codegen-abcdefghijkl")
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 43 {
		t.Errorf("credential %q has %d characters, want 43", p, len(p))
	}
	if again, _ := DeriveMemberProxy(pk, "pod-uid-1", "team-a", "tools-codegen-abcdefghijkl"); again != p {
		t.Error("the derivation is not deterministic")
	}
	others := map[string]func() (string, error){
		"another pod UID": func() (string, error) {
			return DeriveMemberProxy(pk, "pod-uid-2", "team-a", "tools-codegen-abcdefghijkl")
		},
		"another namespace": func() (string, error) {
			return DeriveMemberProxy(pk, "pod-uid-1", "team-b", "tools-codegen-abcdefghijkl")
		},
		"another member": func() (string, error) {
			return DeriveMemberProxy(pk, "pod-uid-1", "team-a", "tools-codegen-abcdefghijkm")
		},
		"the operator's key in place of the proxy key": func() (string, error) {
			return DeriveMemberProxy(testKey, "pod-uid-1", "team-a", "tools-codegen-abcdefghijkl")
		},
		// Other domains over the very same inputs.
		"a claim's proxy credential": func() (string, error) { return DeriveProxy(pk, "pod-uid-1", "team-a", "tools-codegen-abcdefghijkl") },
		"a claim's bearer token":     func() (string, error) { return Derive(testKey, "pod-uid-1", "team-a", "tools-codegen-abcdefghijkl") },
		"a bearer token of the proxy key": func() (string, error) {
			return Derive(pk, "pod-uid-1", "team-a", "tools-codegen-abcdefghijkl")
		},
		"the member key": func() (string, error) {
			k, err := MemberKey(testKey, "team-a", "tools-codegen-abcdefghijkl")
			return EncodeMemberKey(k), err
		},
	}
	for name, other := range others {
		if o, err := other(); err != nil || o == p {
			t.Errorf("%s: %q, %v; want another value", name, o, err)
		}
	}
	if _, err := DeriveMemberProxy(pk[:KeyBytes-1], "pod-uid-1", "team-a", "m"); !errors.Is(err, ErrNoKey) {
		t.Errorf("a short key: %v, want ErrNoKey", err)
	}
	for _, missing := range [][3]string{{"", "team-a", "m"}, {"u", "", "m"}, {"u", "team-a", ""}} {
		if _, err := DeriveMemberProxy(pk, types.UID(missing[0]), missing[1], missing[2]); err == nil {
			t.Errorf("DeriveMemberProxy%q: no error", missing)
		}
	}

	_, ctx := ktesting.NewTestContext(t)
	src := NewSource(k8sfake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns}, Data: map[string][]byte{KeyField: testKey}}), ns)
	if cred, err := src.MemberProxyCredential(ctx, "pod-uid-1", "team-a", "tools-codegen-abcdefghijkl"); err != nil || cred != p {
		t.Errorf("MemberProxyCredential %q, %v; want DeriveMemberProxy of the proxy key %q", cred, err, p)
	}
}

// TestDecisionsReaderToken: the gateway's decisions reader token is the proxy key's, one value,
// in a domain of its own: none of a claim's or member's proxy credentials, nor a claim's bearer
// token of the same bytes, is it; another proxy key gives another; a short key none.
func TestDecisionsReaderToken(t *testing.T) {
	pk := bytes.Repeat([]byte{3}, KeyBytes)
	tok, err := DecisionsReaderToken(pk)
	if err != nil || len(tok) != 43 {
		t.Fatalf("token %q %v: want 43 characters of base64url", tok, err)
	}
	if again, _ := DecisionsReaderToken(pk); again != tok {
		t.Error("not deterministic")
	}
	if other, _ := DecisionsReaderToken(bytes.Repeat([]byte{4}, KeyBytes)); other == tok {
		t.Error("another proxy key gives the same token")
	}
	proxy, _ := DeriveProxy(pk, "uid", "ns", "name")
	member, _ := DeriveMemberProxy(pk, "uid", "ns", "name")
	bearer, _ := Derive(pk, "uid", "ns", "name")
	for name, v := range map[string]string{"a claim's proxy credential": proxy, "a member's": member, "a bearer token": bearer} {
		if v == tok {
			t.Errorf("%s is the reader token", name)
		}
	}
	if _, err := DecisionsReaderToken(pk[:KeyBytes-1]); !errors.Is(err, ErrNoKey) {
		t.Errorf("a short key: %v, want ErrNoKey", err)
	}
}
