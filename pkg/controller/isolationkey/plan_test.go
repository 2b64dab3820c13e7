package isolationkey

import (
	"bytes"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// testPolicy: the next key made at day 30, signing from day 32; a retired key published for at
// least two days.
var testPolicy = Policy{Rotation: 30 * 24 * time.Hour, Propagation: 2 * 24 * time.Hour}

func mustPlan(t *testing.T, cur *document, now time.Time, inUse ...string) *Plan {
	t.Helper()
	p, err := plan(cur, testPolicy, now, func(id string) bool { return slices.Contains(inUse, id) }, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func idOf(k privateKey) string { return attestation.KeyID(k.public()) }

// bundleIDs are the key IDs of the document's published bundle, in its order.
func bundleIDs(t *testing.T, d *document) []string {
	t.Helper()
	var ids []string
	for _, k := range d.publicKeys() {
		ids = append(ids, attestation.KeyID(k))
	}
	return ids
}

// TestPlanLifecycle follows the keys through a rotation: made, kept until the rotation is due
// (and not a second before), the next key made and published, signing after the propagation
// with the old one retired and still published, and the retired one dropped only once it has been
// published for the propagation and no claim's statement names it.
func TestPlanLifecycle(t *testing.T) {
	p := mustPlan(t, nil, t0)
	if !p.Changed || p.doc.Next != nil || len(p.doc.Retired) != 0 || !p.doc.Signing.CreatedAt.Equal(t0) {
		t.Fatalf("from nothing: %+v", p)
	}
	if !p.Next.Equal(t0.Add(testPolicy.Rotation)) {
		t.Fatalf("from nothing: look again at %v, want the rotation %v", p.Next, t0.Add(testPolicy.Rotation))
	}
	first := p.doc.Signing
	d := p.doc

	// A second before the rotation: nothing.
	due := t0.Add(testPolicy.Rotation)
	if p := mustPlan(t, d, due.Add(-time.Second)); p.Changed || !p.Next.Equal(due) {
		t.Fatalf("before the rotation: changed %v (%v), next %v", p.Changed, p.Reasons, p.Next)
	}

	// At the rotation: the next key is published; the first still signs.
	p = mustPlan(t, d, due)
	if !p.Changed || p.doc.Next == nil || idOf(p.doc.Signing) != idOf(first) {
		t.Fatalf("at the rotation: %v", p.Reasons)
	}
	second := *p.doc.Next
	if got, want := bundleIDs(t, p.doc), []string{idOf(first), idOf(second)}; !slices.Equal(got, want) {
		t.Fatalf("at the rotation: bundle %v, want %v", got, want)
	}
	promote := due.Add(testPolicy.Propagation)
	if !p.Next.Equal(promote) {
		t.Fatalf("at the rotation: look again at %v, want the propagation's end %v", p.Next, promote)
	}
	d = p.doc

	// The second signs once it has been published for the propagation.
	if p := mustPlan(t, d, promote.Add(-time.Second)); p.Changed {
		t.Fatalf("before the propagation's end: %v", p.Reasons)
	}
	p = mustPlan(t, d, promote)
	if !p.Changed || p.doc.Next != nil || idOf(p.doc.Signing) != idOf(second) {
		t.Fatalf("at the propagation's end: %v", p.Reasons)
	}
	if len(p.doc.Retired) != 1 || p.doc.Retired[0].KeyID != idOf(first) || !p.doc.Retired[0].RetiredAt.Equal(promote) {
		t.Fatalf("at the propagation's end: retired %+v", p.doc.Retired)
	}
	if got, want := bundleIDs(t, p.doc), []string{idOf(second), idOf(first)}; !slices.Equal(got, want) {
		t.Fatalf("after the rotation: bundle %v, want %v", got, want)
	}
	leave := promote.Add(testPolicy.Propagation)
	if !p.Next.Equal(leave) {
		t.Fatalf("after the rotation: look again at %v, want the retired key's propagation %v", p.Next, leave)
	}
	d = p.doc

	// The retired key: kept for the propagation even when no claim names it, then while one does.
	if p := mustPlan(t, d, leave.Add(-time.Second)); p.Changed {
		t.Fatalf("a retired key dropped before its propagation ended: %v", p.Reasons)
	}
	if p := mustPlan(t, d, leave.Add(20*24*time.Hour), idOf(first)); p.Changed || len(p.doc.Retired) != 1 {
		t.Fatalf("a retired key a claim names dropped: %v", p.Reasons)
	}
	p = mustPlan(t, d, leave, idOf(second))
	if !p.Changed || len(p.doc.Retired) != 0 {
		t.Fatalf("a retired key no claim names kept: %+v", p.doc.Retired)
	}
	if got, want := bundleIDs(t, p.doc), []string{idOf(second)}; !slices.Equal(got, want) {
		t.Fatalf("bundle %v, want %v", got, want)
	}
	if !p.Next.Equal(second.CreatedAt.Add(testPolicy.Rotation)) {
		t.Fatalf("look again at %v, want the second key's rotation", p.Next)
	}
}

// TestPlanRoundTrip: what plan makes decodes to itself.
func TestPlanRoundTrip(t *testing.T) {
	d := mustPlan(t, nil, t0).doc
	d = mustPlan(t, d, t0.Add(testPolicy.Rotation)).doc
	d = mustPlan(t, d, t0.Add(testPolicy.Rotation+testPolicy.Propagation)).doc
	d = mustPlan(t, d, t0.Add(2*testPolicy.Rotation), d.Retired[0].KeyID).doc
	b, err := d.encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := back.encode(); !bytes.Equal(again, b) || len(back.Retired) != 1 || back.Next == nil {
		t.Fatalf("round trip:\n%s\n%s", b, again)
	}
}

// TestDecodeRefusesTampering: keys that do not parse, or do not hold together, are
// ErrUnreadable, saying what is wrong.
func TestDecodeRefusesTampering(t *testing.T) {
	d := mustPlan(t, nil, t0).doc
	d = mustPlan(t, d, t0.Add(testPolicy.Rotation)).doc
	d = mustPlan(t, d, t0.Add(testPolicy.Rotation+testPolicy.Propagation)).doc
	good, err := d.encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode(good); err != nil {
		t.Fatal(err)
	}
	id := d.Retired[0].KeyID
	tests := map[string]struct {
		data []byte
		want string
	}{
		"empty":                {data: nil, want: "missing or empty"},
		"not JSON":             {data: []byte("not JSON"), want: "invalid character"},
		"two values":           {data: append(slices.Clone(good), good...), want: "more than one JSON value"},
		"an unknown field":     {data: bytes.Replace(good, []byte(`"signing"`), []byte(`"extra":1,"signing"`), 1), want: "unknown field"},
		"a short signing seed": {data: mutate(t, good, func(d *document) { d.Signing.Seed = d.Signing.Seed[:31] }), want: "signing key's seed has 31 bytes"},
		"no signing key":       {data: []byte(`{}`), want: "signing key's seed has 0 bytes"},
		"no createdAt":         {data: mutate(t, good, func(d *document) { d.Signing.CreatedAt = time.Time{} }), want: "no createdAt"},
		"a retired key renamed": {data: mutate(t, good, func(d *document) { d.Retired[0].KeyID = "0000000000000000" }),
			want: `named "0000000000000000", and its key's ID is "` + id + `"`},
		"a retired key's bytes changed": {data: mutate(t, good, func(d *document) { d.Retired[0].PublicKey[0] ^= 1 }), want: "named \"" + id + "\""},
		"a short retired key":           {data: mutate(t, good, func(d *document) { d.Retired[0].PublicKey = d.Retired[0].PublicKey[:8] }), want: "has 8 bytes"},
		"no retiredAt":                  {data: mutate(t, good, func(d *document) { d.Retired[0].RetiredAt = time.Time{} }), want: "no retiredAt"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := decode(tc.data)
			if !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decode: %v, want ErrUnreadable saying %q", err, tc.want)
			}
		})
	}
}

// mutate is good decoded, changed by f, encoded.
func mutate(t *testing.T, good []byte, f func(*document)) []byte {
	t.Helper()
	d, err := decode(good)
	if err != nil {
		t.Fatal(err)
	}
	f(d)
	b, err := d.encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBundleHoldsNoPrivateMaterial: the published keys are PUBLIC KEY blocks only, and no seed or
// private key of the document appears in them.
func TestBundleHoldsNoPrivateMaterial(t *testing.T) {
	d := mustPlan(t, nil, t0).doc
	d = mustPlan(t, d, t0.Add(testPolicy.Rotation)).doc
	d = mustPlan(t, d, t0.Add(testPolicy.Rotation+testPolicy.Propagation)).doc
	d = mustPlan(t, d, t0.Add(2*testPolicy.Rotation), d.Retired[0].KeyID).doc // signing, next and retired
	bundle, err := attestation.MarshalPublicKeys(d.publicKeys()...)
	if err != nil {
		t.Fatal(err)
	}
	checkNoPrivateMaterial(t, bundle, d)
	keys, err := attestation.ParsePublicKeys(bundle)
	if err != nil || len(keys) != 3 {
		t.Fatalf("bundle: %d keys, %v", len(keys), err)
	}
}

// checkNoPrivateMaterial fails when bundle holds a block other than PUBLIC KEY, or any of d's
// seeds or private keys, in its text or in its blocks' bytes.
func checkNoPrivateMaterial(t *testing.T, bundle []byte, d *document) {
	t.Helper()
	var ders [][]byte
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" || len(b.Headers) != 0 {
			t.Errorf("a %q block with headers %v in the bundle", b.Type, b.Headers)
		}
		ders = append(ders, b.Bytes)
	}
	priv := []privateKey{d.Signing}
	if d.Next != nil {
		priv = append(priv, *d.Next)
	}
	for _, k := range priv {
		for _, secret := range [][]byte{k.Seed, k.private(), k.Seed[:16]} {
			if bytes.Contains(bundle, secret) || slices.ContainsFunc(ders, func(der []byte) bool { return bytes.Contains(der, secret) }) {
				t.Errorf("the bundle holds private material of key %s", idOf(k))
			}
		}
	}
}
