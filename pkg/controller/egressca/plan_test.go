package egressca

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-dev/airlock/pkg/pki"
)

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// testPolicy: a 30-day CA, next one made at day 20, signing from day 22.
var testPolicy = Policy{Lifetime: 30 * 24 * time.Hour, Propagation: 2 * 24 * time.Hour}

func mustPlan(t *testing.T, data map[string][]byte, now time.Time) *Plan {
	t.Helper()
	p, err := plan(data, testPolicy, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func signerOf(t *testing.T, data map[string][]byte) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil || !pair.Leaf.IsCA {
		t.Fatalf("no signing CA: %v", err)
	}
	return pair.Leaf
}

func bundleOf(t *testing.T, data map[string][]byte) []*x509.Certificate {
	t.Helper()
	certs, err := pki.ParseCerts(data[BundleKey])
	if err != nil {
		t.Fatalf("bundle: %v", err)
	}
	return certs
}

// TestPlanLifecycle follows one Secret through its life: made, kept, the next CA made and
// published, promoted after its propagation with the old one still trusted, the old one dropped
// when it expires.
func TestPlanLifecycle(t *testing.T) {
	day := 24 * time.Hour
	// Made from nothing.
	p := mustPlan(t, nil, t0)
	if !p.Changed || len(p.Data[NextCertKey]) != 0 {
		t.Fatalf("from nothing: changed %v, next %q", p.Changed, p.Data[NextCertKey])
	}
	first := signerOf(t, p.Data)
	if b := bundleOf(t, p.Data); len(b) != 1 || !b[0].Equal(first) || !first.IsCA || !first.MaxPathLenZero {
		t.Fatalf("from nothing: bundle %d certificates, CA %v", len(b), first.IsCA)
	}
	if want := issuedAt(first).Add(20 * day); !p.Next.Equal(want) {
		t.Fatalf("next look %v, want %v (two thirds of its life)", p.Next, want)
	}

	// Kept while young.
	kept := mustPlan(t, p.Data, t0.Add(19*day))
	if kept.Changed {
		t.Fatalf("day 19: changed (%v)", kept.Reasons)
	}

	// Day 20: the next CA is made and published; the first still signs.
	rot := mustPlan(t, p.Data, t0.Add(20*day))
	if !rot.Changed || !signerOf(t, rot.Data).Equal(first) {
		t.Fatalf("day 20: changed %v, the signer changed: %v", rot.Changed, rot.Reasons)
	}
	next, why := usableCA(rot.Data[NextCertKey], rot.Data[NextKeyKey], t0.Add(20*day))
	if next == nil {
		t.Fatalf("day 20: no next CA (%s)", why)
	}
	if b := bundleOf(t, rot.Data); len(b) != 2 || !b[0].Equal(first) || !b[1].Equal(next.cert) {
		t.Fatalf("day 20: bundle of %d, want the signer then the next", len(b))
	}
	if want := issuedAt(next.cert).Add(2 * day); !rot.Next.Equal(want) {
		t.Fatalf("day 20: next look %v, want the end of the propagation %v", rot.Next, want)
	}

	// Still propagating a day later: unchanged.
	if p := mustPlan(t, rot.Data, t0.Add(21*day)); p.Changed {
		t.Fatalf("day 21: changed (%v)", p.Reasons)
	}

	// Day 22: the next CA signs; the first stays in the bundle until it expires.
	prom := mustPlan(t, rot.Data, t0.Add(22*day))
	if !prom.Changed || len(prom.Data[NextCertKey]) != 0 {
		t.Fatalf("day 22: changed %v, next %q", prom.Changed, prom.Data[NextCertKey])
	}
	if c, _ := usableCA(prom.Data[corev1.TLSCertKey], prom.Data[corev1.TLSPrivateKeyKey], t0.Add(22*day)); c == nil || !c.cert.Equal(next.cert) {
		t.Fatal("day 22: the next CA does not sign")
	}
	if b := bundleOf(t, prom.Data); len(b) != 2 || !b[0].Equal(next.cert) || !b[1].Equal(first) {
		t.Fatalf("day 22: bundle of %d, want the new signer then the old CA", len(b))
	}
	if !prom.Next.Equal(first.NotAfter) {
		t.Fatalf("day 22: next look %v, want the old CA's expiry %v", prom.Next, first.NotAfter)
	}

	// The old CA's expiry: dropped from the bundle.
	drop := mustPlan(t, prom.Data, first.NotAfter)
	if !drop.Changed {
		t.Fatal("at the old CA's expiry: unchanged")
	}
	if b := bundleOf(t, drop.Data); len(b) != 1 || !b[0].Equal(next.cert) {
		t.Fatalf("at the old CA's expiry: bundle of %d", len(b))
	}
}

// TestPlanRepairs: what an edit breaks is made again, keeping what is still good.
func TestPlanRepairs(t *testing.T) {
	day := 24 * time.Hour
	good := mustPlan(t, nil, t0).Data
	rotating := mustPlan(t, good, t0.Add(20*day)).Data
	other := mustPlan(t, nil, t0).Data
	clone := func(d map[string][]byte, edit func(map[string][]byte)) map[string][]byte {
		out := map[string][]byte{}
		for k, v := range d {
			out[k] = v
		}
		edit(out)
		return out
	}
	for name, tc := range map[string]struct {
		data  map[string][]byte
		now   time.Time
		check func(t *testing.T, p *Plan)
	}{
		"a key that does not match the certificate": {
			data: clone(good, func(d map[string][]byte) { d[corev1.TLSPrivateKeyKey] = other[corev1.TLSPrivateKeyKey] }), now: t0,
			check: func(t *testing.T, p *Plan) {
				if signerOf(t, p.Data).Equal(signerOf(t, good)) {
					t.Error("kept a signer whose key does not match")
				}
			},
		},
		"garbage": {
			data: map[string][]byte{corev1.TLSCertKey: []byte("x"), corev1.TLSPrivateKeyKey: []byte("y"), BundleKey: []byte("z")}, now: t0,
			check: func(t *testing.T, p *Plan) {
				if b := bundleOf(t, p.Data); len(b) != 1 || !b[0].Equal(signerOf(t, p.Data)) {
					t.Errorf("bundle of %d", len(b))
				}
			},
		},
		"the bundle emptied": {
			data: clone(good, func(d map[string][]byte) { delete(d, BundleKey) }), now: t0,
			check: func(t *testing.T, p *Plan) {
				if !signerOf(t, p.Data).Equal(signerOf(t, good)) {
					t.Error("the signer changed")
				}
				if b := bundleOf(t, p.Data); len(b) != 1 {
					t.Errorf("bundle of %d", len(b))
				}
			},
		},
		"the signer deleted while the next propagates: the next signs at once": {
			data: clone(rotating, func(d map[string][]byte) { delete(d, corev1.TLSCertKey) }), now: t0.Add(20 * day),
			check: func(t *testing.T, p *Plan) {
				next, _ := pki.ParseCerts(rotating[NextCertKey])
				if !signerOf(t, p.Data).Equal(next[0]) {
					t.Error("the next CA does not sign")
				}
			},
		},
		"a broken next CA at two thirds: made again": {
			data: clone(rotating, func(d map[string][]byte) { d[NextKeyKey] = other[corev1.TLSPrivateKeyKey] }), now: t0.Add(20 * day),
			check: func(t *testing.T, p *Plan) {
				old, _ := pki.ParseCerts(rotating[NextCertKey])
				next, why := usableCA(p.Data[NextCertKey], p.Data[NextKeyKey], t0.Add(20*day))
				if next == nil || next.cert.Equal(old[0]) {
					t.Errorf("next CA %v (%s)", next != nil, why)
				}
				if !slices.ContainsFunc(bundleOf(t, p.Data), next.cert.Equal) {
					t.Error("the new next CA is not in the bundle")
				}
			},
		},
		"an expired signer without a next": {
			data: good, now: t0.Add(31 * day),
			check: func(t *testing.T, p *Plan) {
				s, why := usableCA(p.Data[corev1.TLSCertKey], p.Data[corev1.TLSPrivateKeyKey], t0.Add(31*day))
				if s == nil || s.cert.Equal(signerOf(t, good)) {
					t.Fatalf("signer %v (%s)", s != nil, why)
				}
				if b := bundleOf(t, p.Data); len(b) != 1 {
					t.Errorf("bundle of %d: the expired CA kept", len(b))
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := mustPlan(t, tc.data, tc.now)
			if !p.Changed || len(p.Reasons) == 0 {
				t.Fatalf("changed %v, reasons %v", p.Changed, p.Reasons)
			}
			tc.check(t, p)
			if again := mustPlan(t, p.Data, tc.now); again.Changed {
				t.Errorf("not stable: planned again %v", again.Reasons)
			}
		})
	}
}

// TestPlanKeepsACAFromAFasterClock: a CA whose NotBefore is ahead of now (the leader's clock is
// behind the one that made it) is kept, not replaced: replacing it would take every sandbox's
// trust away.
func TestPlanKeepsACAFromAFasterClock(t *testing.T) {
	made := mustPlan(t, nil, t0.Add(time.Hour)).Data
	if p := mustPlan(t, made, t0); p.Changed {
		t.Fatalf("a CA made an hour ahead was replaced: %v", p.Reasons)
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
	for _, p := range []Policy{{}, {Lifetime: time.Hour, Propagation: 20 * time.Minute}, {Lifetime: time.Hour, Propagation: -1}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}
