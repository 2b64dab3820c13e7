package servingcert

import (
	"crypto/rand"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-dev/airlock/pkg/pki"
)

var (
	t0        = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	testNames = []string{"airlock-sandbox-api.airlock-system.svc", "airlock-sandbox-api.airlock-system.svc.cluster.local", "127.0.0.1"}
	day       = 24 * time.Hour
)

// mustPlan plans data at now and fails the test on an error.
func mustPlan(t *testing.T, data map[string][]byte, now time.Time) *Plan {
	t.Helper()
	p, err := plan(data, DefaultPolicy(testNames), now, rand.Reader)
	if err != nil {
		t.Fatalf("plan at %v: %v", now, err)
	}
	return p
}

// certOf parses the first certificate of a PEM field.
func certOf(t *testing.T, data map[string][]byte, key string) *x509.Certificate {
	t.Helper()
	certs, err := pki.ParseCerts(data[key])
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return certs[0]
}

// verifies says whether the serving certificate of data verifies, for dnsName at now, against
// the PEM bundle.
func verifies(t *testing.T, data map[string][]byte, bundle []byte, dnsName string, now time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("the bundle holds no certificate")
	}
	_, err := certOf(t, data, corev1.TLSCertKey).Verify(x509.VerifyOptions{DNSName: dnsName, Roots: pool, CurrentTime: now})
	return err
}

func TestPlanMakesCAAndServingCertificate(t *testing.T) {
	p := mustPlan(t, nil, t0)
	if !p.Changed {
		t.Fatal("no Secret data: want a change")
	}
	ca := certOf(t, p.Data, SignerCertKey)
	serving := certOf(t, p.Data, corev1.TLSCertKey)
	if !ca.IsCA || ca.NotAfter != t0.Add(DefaultCALifetime) {
		t.Errorf("CA: IsCA %v, NotAfter %v; want a CA until %v", ca.IsCA, ca.NotAfter, t0.Add(DefaultCALifetime))
	}
	if serving.IsCA || serving.NotAfter != t0.Add(DefaultServingLifetime) || !serving.NotBefore.Before(t0) {
		t.Errorf("serving: IsCA %v, valid %v to %v; want a leaf valid (backdated) to %v", serving.IsCA, serving.NotBefore, serving.NotAfter, t0.Add(DefaultServingLifetime))
	}
	for _, name := range []string{"airlock-sandbox-api.airlock-system.svc", "airlock-sandbox-api.airlock-system.svc.cluster.local"} {
		if err := verifies(t, p.Data, p.Data[BundleKey], name, t0); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := verifies(t, p.Data, p.Data[BundleKey], "airlock-sandbox-api.other.svc", t0); err == nil {
		t.Error("the certificate verifies for a name it was not made for")
	}
	if got := certNames(serving); !sameNames(serving, testNames) {
		t.Errorf("SANs %v, want %v", got, testNames)
	}
	// Renewal at two thirds of the serving certificate's life.
	if want := t0.Add(DefaultServingLifetime * 2 / 3); !p.Next.Equal(want) {
		t.Errorf("next look %v, want %v", p.Next, want)
	}
}

// TestPlanKeepsWhatIsValid: the plan of a current Secret changes nothing.
func TestPlanKeepsWhatIsValid(t *testing.T) {
	first := mustPlan(t, nil, t0)
	for _, at := range []time.Duration{time.Minute, 30 * day, DefaultServingLifetime*2/3 - time.Second} {
		p := mustPlan(t, first.Data, t0.Add(at))
		if p.Changed {
			t.Errorf("at +%v: changed (%v)", at, p.Reasons)
		}
	}
}

// TestPlanRenewsServingCertificate: at two thirds of its life the serving certificate is
// re-issued by the same CA, and so when its names change or it no longer verifies.
func TestPlanRenewsServingCertificate(t *testing.T) {
	first := mustPlan(t, nil, t0)
	at := t0.Add(DefaultServingLifetime * 2 / 3)
	p := mustPlan(t, first.Data, at)
	if !p.Changed || string(p.Data[SignerCertKey]) != string(first.Data[SignerCertKey]) {
		t.Fatalf("at two thirds: changed %v, same CA %v; want a new serving certificate from the same CA", p.Changed, string(p.Data[SignerCertKey]) == string(first.Data[SignerCertKey]))
	}
	if string(p.Data[corev1.TLSCertKey]) == string(first.Data[corev1.TLSCertKey]) || string(p.Data[corev1.TLSPrivateKeyKey]) == string(first.Data[corev1.TLSPrivateKeyKey]) {
		t.Error("the serving certificate or its key was not renewed")
	}
	if got := certOf(t, p.Data, corev1.TLSCertKey).NotAfter; !got.Equal(at.Add(DefaultServingLifetime)) {
		t.Errorf("renewed certificate valid until %v, want %v", got, at.Add(DefaultServingLifetime))
	}
	// Clients holding the bundle of before still verify the new certificate.
	if err := verifies(t, p.Data, first.Data[BundleKey], testNames[0], at); err != nil {
		t.Errorf("the old bundle does not verify the renewed certificate: %v", err)
	}

	renamed, err := plan(first.Data, DefaultPolicy([]string{"api.example.internal"}), t0.Add(time.Hour), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifies(t, renamed.Data, renamed.Data[BundleKey], "api.example.internal", t0.Add(time.Hour)); err != nil || !renamed.Changed {
		t.Errorf("new names: changed %v, verify %v", renamed.Changed, err)
	}

	// Fewer names than the certificate has (another replica's --tls-sans, during a rollout):
	// kept, so that two replicas never re-issue it in turn; the renewal issues the names asked.
	fewer := DefaultPolicy(testNames[:1])
	kept, err := plan(first.Data, fewer, t0.Add(time.Hour), rand.Reader)
	if err != nil || kept.Changed {
		t.Errorf("a subset of the names: changed %v (%v), error %v; want the certificate kept", kept.Changed, kept.Reasons, err)
	}
	back, err := plan(renamed.Data, DefaultPolicy(append([]string{"api.example.internal"}, testNames...)), t0.Add(2*time.Hour), rand.Reader)
	if err != nil || !back.Changed {
		t.Fatalf("names added: changed %v, error %v", back.Changed, err)
	}
	if again, _ := plan(back.Data, DefaultPolicy([]string{"api.example.internal"}), t0.Add(3*time.Hour), rand.Reader); again.Changed {
		t.Errorf("the replica with fewer names re-issued a certificate that covers them: %v", again.Reasons)
	}
	renewedFewer, err := plan(back.Data, fewer, t0.Add(2*time.Hour+DefaultServingLifetime*2/3), rand.Reader)
	if err != nil || !sameNames(certOf(t, renewedFewer.Data, corev1.TLSCertKey), fewer.Names) {
		t.Errorf("at renewal: names %v, error %v; want exactly %v", certNames(certOf(t, renewedFewer.Data, corev1.TLSCertKey)), err, fewer.Names)
	}

	broken := map[string][]byte{}
	for k, v := range first.Data {
		broken[k] = v
	}
	broken[corev1.TLSPrivateKeyKey] = mustPlan(t, nil, t0).Data[corev1.TLSPrivateKeyKey] // another key
	p = mustPlan(t, broken, t0.Add(time.Hour))
	if !p.Changed || string(p.Data[SignerCertKey]) != string(first.Data[SignerCertKey]) {
		t.Errorf("a key that does not match: changed %v; want a new serving certificate from the same CA", p.Changed)
	}
	if _, err := parseKeyPair(p.Data[corev1.TLSCertKey], p.Data[corev1.TLSPrivateKeyKey]); err != nil {
		t.Errorf("the re-issued pair: %v", err)
	}
}

// TestPlanRotatesCAWithOverlap walks a CA's whole rotation: the new CA joins the bundle at two
// thirds of the old one's life while the old one still signs the served certificate; once the
// new one has propagated it signs the served certificate; the old one leaves the bundle when it
// expires. At every step a client holding the bundle of the step before verifies what is served.
func TestPlanRotatesCAWithOverlap(t *testing.T) {
	data := mustPlan(t, nil, t0).Data
	oldCA := certOf(t, data, SignerCertKey)
	now := t0
	bundleBefore := data[BundleKey]
	// step plans at now and checks that the bundle of the step before verifies what is served.
	step := func(what string) *Plan {
		t.Helper()
		p := mustPlan(t, data, now)
		if err := verifies(t, p.Data, bundleBefore, testNames[0], now); err != nil {
			t.Fatalf("%s: a client with the previous bundle fails: %v", what, err)
		}
		if err := verifies(t, p.Data, p.Data[BundleKey], testNames[0], now); err != nil {
			t.Fatalf("%s: the new bundle does not verify the served certificate: %v", what, err)
		}
		data, bundleBefore = p.Data, p.Data[BundleKey]
		return p
	}
	// Follow the plan's own Next until the CA rotates, as the issuer's AddAfter does.
	var p *Plan
	for i := 0; ; i++ {
		if i > 20 {
			t.Fatal("the CA did not rotate within 20 looks")
		}
		p = mustPlan(t, data, now)
		now = p.Next
		p = step("renewal at " + now.String())
		if !certOf(t, data, SignerCertKey).Equal(oldCA) {
			break
		}
	}
	if want := t0.Add(DefaultCALifetime * 2 / 3); now.Before(want) {
		t.Errorf("the CA rotated at %v, before two thirds of its life (%v)", now, want)
	}
	newCA := certOf(t, data, SignerCertKey)
	bundle, _ := pki.ParseCerts(data[BundleKey])
	if len(bundle) != 2 || !bundle[0].Equal(newCA) || !bundle[1].Equal(oldCA) {
		t.Fatalf("bundle during the overlap has %d CAs, want [new, old]", len(bundle))
	}
	if !signedBy(certOf(t, data, corev1.TLSCertKey), oldCA, now) {
		t.Fatal("the served certificate changed CA before the new CA propagated")
	}
	if want := now.Add(DefaultCAPropagation); !p.Next.Equal(want) {
		t.Errorf("next look %v, want the end of the propagation %v", p.Next, want)
	}

	now = now.Add(DefaultCAPropagation - time.Second)
	if p := step("just before the propagation ends"); p.Changed {
		t.Errorf("changed before the new CA propagated: %v", p.Reasons)
	}
	now = now.Add(time.Second)
	p = step("the propagation ends")
	if !p.Changed || !signedBy(certOf(t, data, corev1.TLSCertKey), newCA, now) {
		t.Fatalf("the served certificate is not re-signed by the new CA once it propagated (%v)", p.Reasons)
	}
	if bundle, _ := pki.ParseCerts(data[BundleKey]); len(bundle) != 2 {
		t.Errorf("the old CA left the bundle before it expired")
	}

	// The old CA leaves the bundle when it expires, and not before.
	for i := 0; now.Before(oldCA.NotAfter); i++ {
		if i > 20 {
			t.Fatal("the old CA's expiry was not looked at within 20 looks")
		}
		now = mustPlan(t, data, now).Next
		step("until the old CA expires")
	}
	bundle, _ = pki.ParseCerts(data[BundleKey])
	if len(bundle) != 1 || !bundle[0].Equal(newCA) {
		t.Errorf("after the old CA expired the bundle has %d CAs, want the new one alone", len(bundle))
	}
}

// TestPlanRecoversFromGarbage: a Secret whose fields are not PEM gets a new CA and certificate.
func TestPlanRecoversFromGarbage(t *testing.T) {
	p := mustPlan(t, map[string][]byte{SignerCertKey: []byte("x"), SignerKeyKey: []byte("y"), BundleKey: []byte("z"), corev1.TLSCertKey: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}, t0)
	if !p.Changed || !strings.Contains(strings.Join(p.Reasons, "; "), "no usable CA") {
		t.Errorf("changed %v, reasons %v", p.Changed, p.Reasons)
	}
	if err := verifies(t, p.Data, p.Data[BundleKey], testNames[0], t0); err != nil {
		t.Error(err)
	}
}
