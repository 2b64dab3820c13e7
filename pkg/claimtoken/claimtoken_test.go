package claimtoken

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

const ns = "airlock-system"

var testKey = bytes.Repeat([]byte{7}, KeyBytes)

func TestDerive(t *testing.T) {
	a, err := Derive(testKey, "uid-1", "team-a", "agent-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 43 {
		t.Errorf("token %q has %d characters, want 43", a, len(a))
	}
	again, _ := Derive(testKey, "uid-1", "team-a", "agent-0123456789")
	if again != a {
		t.Error("the derivation is not deterministic")
	}
	otherKey := bytes.Repeat([]byte{8}, KeyBytes)
	for name, tok := range map[string]func() (string, error){
		"another UID":       func() (string, error) { return Derive(testKey, "uid-2", "team-a", "agent-0123456789") },
		"another namespace": func() (string, error) { return Derive(testKey, "uid-1", "team-b", "agent-0123456789") },
		"another name":      func() (string, error) { return Derive(testKey, "uid-1", "team-a", "agent-0123456789-r1") },
		"another key":       func() (string, error) { return Derive(otherKey, "uid-1", "team-a", "agent-0123456789") },
		// The separator keeps "team-a/x" + "y" apart from "team-a/xy"-like splits of the fields.
		"fields shifted": func() (string, error) { return Derive(testKey, "uid-1team-a", "", "agent") },
	} {
		got, err := tok()
		if err == nil && got == a {
			t.Errorf("%s: same token", name)
		}
	}
	for name, key := range map[string][]byte{"no key": nil, "short key": testKey[:16]} {
		if tok, err := Derive(key, "uid-1", "team-a", "c"); err == nil || tok != "" || !errors.Is(err, ErrNoKey) {
			t.Errorf("%s: token %q, error %v; want ErrNoKey and no token", name, tok, err)
		}
	}
	if tok, err := Derive(testKey, "", "team-a", "c"); err == nil || tok != "" {
		t.Errorf("no UID: token %q, error %v", tok, err)
	}
}

// TestSourceCreatesOnceAndAgrees: the first replica creates the key Secret (immutable), the
// second reads it, and both derive the same tokens.
func TestSourceCreatesOnceAndAgrees(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset()
	a, b := NewSource(client, ns), NewSource(client, ns)
	keyA, err := a.Key(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := b.Key(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keyA) != KeyBytes || !bytes.Equal(keyA, keyB) {
		t.Fatalf("keys differ or are short: %x %x", keyA, keyB)
	}
	secret, err := client.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Immutable == nil || !*secret.Immutable || !bytes.Equal(secret.Data[KeyField], keyA) {
		t.Errorf("key Secret %+v", secret)
	}
	creates := 0
	for _, act := range client.Actions() {
		if act.GetVerb() == "create" {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("%d creates, want 1", creates)
	}
	ta, _ := a.Token(ctx, "uid", "team-a", "c")
	tb, _ := b.Token(ctx, "uid", "team-a", "c")
	if ta == "" || ta != tb {
		t.Errorf("tokens %q and %q differ", ta, tb)
	}
}

// TestSourceLosesTheRace: both replicas see no Secret; the second one's create fails with
// AlreadyExists, and it takes the first one's key instead of its own.
func TestSourceLosesTheRace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	winnerKey := bytes.Repeat([]byte{1}, KeyBytes)
	client := k8sfake.NewClientset()
	// The winner's Secret appears between the loser's GET (NotFound) and its CREATE.
	gets := 0
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets == 1 {
			if err := client.Tracker().Add(&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns},
				Data:       map[string][]byte{KeyField: winnerKey},
			}); err != nil {
				t.Fatal(err)
			}
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, SecretName)
		}
		return false, nil, nil
	})
	loser := NewSource(client, ns)
	loser.random = func(b []byte) (int, error) { return copy(b, bytes.Repeat([]byte{2}, KeyBytes)), nil }
	key, err := loser.Key(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(key, winnerKey) {
		t.Fatalf("key %x, want the winner's %x", key, winnerKey)
	}
	secret, _ := client.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
	if !bytes.Equal(secret.Data[KeyField], winnerKey) {
		t.Error("the loser overwrote the key")
	}
}

// TestSourceFailsClosed: a key that cannot be read, or is too short, is an error and no token,
// and the next call tries again.
func TestSourceFailsClosed(t *testing.T) {
	tests := map[string]struct {
		objects []runtime.Object
		react   k8stesting.ReactionFunc
	}{
		"forbidden": {react: func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, SecretName, errors.New("RBAC"))
		}},
		"short key": {objects: []runtime.Object{&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns},
			Data:       map[string][]byte{KeyField: []byte("short")},
		}}},
		"no key field": {objects: []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := k8sfake.NewClientset(tc.objects...)
			if tc.react != nil {
				client.PrependReactor("get", "secrets", tc.react)
			}
			s := NewSource(client, ns)
			for range 2 {
				tok, err := s.Token(ctx, "uid", "team-a", "c")
				if !errors.Is(err, ErrNoKey) || tok != "" {
					t.Fatalf("token %q, error %v; want ErrNoKey and no token", tok, err)
				}
			}
			gets := 0
			for _, act := range client.Actions() {
				if act.GetVerb() == "get" {
					gets++
				}
			}
			if gets != 2 {
				t.Errorf("%d reads, want 2 (a failure is not cached)", gets)
			}
		})
	}
}

func TestClaimSecretName(t *testing.T) {
	a, _ := Derive(testKey, "uid-1", "team-a", "agent-0123456789")
	b, _ := Derive(testKey, "uid-2", "team-a", "agent-0123456789")
	na, nb := ClaimSecretName("agent-0123456789", a), ClaimSecretName("agent-0123456789", b)
	if na != ClaimSecretName("agent-0123456789", a) {
		t.Error("the name is not deterministic")
	}
	if na == nb || len(na) != len("agent-0123456789-token-")+12 || !strings.HasPrefix(na, "agent-0123456789-token-") {
		t.Errorf("names %q and %q: want distinct <claim>-token-<12 hex>", na, nb)
	}
	if strings.Contains(na, a[:8]) {
		t.Error("the name shows part of the token")
	}
}
