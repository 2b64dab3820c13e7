package egress

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/egress/policy"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

const clusterKeyNS = "airlock-system"

var clusterKey = []byte("0123456789abcdef0123456789abcdef")

// keySecret is the Secret the gateway reads: the proxy key the operator derives from its key.
func keySecret() *corev1.Secret {
	pk, err := claimtoken.ProxyKey(clusterKey)
	if err != nil {
		panic(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: claimtoken.ProxySecretName, Namespace: clusterKeyNS},
		Data:       map[string][]byte{claimtoken.KeyField: pk},
	}
}

// operatorKeySecret is the operator's own key, from which sandboxd's bearer tokens derive.
func operatorKeySecret() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: claimtoken.SecretName, Namespace: clusterKeyNS},
		Data:       map[string][]byte{claimtoken.KeyField: clusterKey},
	}
}

func clusterClaim(name string, uid types.UID, phase airlockv1alpha1.ClaimPhase, hosts ...string) *airlockv1alpha1.SandboxClaim {
	c := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: uid},
		Spec:       airlockv1alpha1.SandboxClaimSpec{RuntimeName: "agent"},
		Status:     airlockv1alpha1.SandboxClaimStatus{Phase: phase, Frozen: &airlockv1alpha1.FrozenSandbox{}},
	}
	if len(hosts) > 0 {
		e := &airlockv1alpha1.FrozenEgress{Gateway: airlockv1alpha1.EgressGateway{Namespace: clusterKeyNS}}
		for _, h := range hosts {
			e.Hosts = append(e.Hosts, airlockv1alpha1.EgressHost{Host: h, Ports: []airlockv1alpha1.EgressPort{443}})
		}
		c.Status.Frozen.Egress = e
	}
	return c
}

func clusterPod(name string, claimUID types.UID, ip string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("pod-" + name),
			Labels: map[string]string{airlockv1alpha1.LabelClaimUID: string(claimUID), airlockv1alpha1.LabelClaim: name}},
		Status: corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// startClusterClaims starts a lookup over fake clientsets holding objs, and waits for its caches.
func startClusterClaims(t *testing.T, objs ...runtime.Object) *ClusterClaims {
	t.Helper()
	var kubeObjs, airlockObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*airlockv1alpha1.SandboxClaim); ok {
			airlockObjs = append(airlockObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	c, inf, err := NewClusterLookup(k8sfake.NewClientset(kubeObjs...), airlockfake.NewClientset(airlockObjs...), clusterKeyNS)
	if err != nil {
		t.Fatal(err)
	}
	if c.HasSynced() {
		t.Fatal("synced before the informers started")
	}
	if _, err := c.Lookup(context.Background(), Credential{Username: "team-a.c1", Password: "x"}, netip.MustParseAddr("10.244.0.17")); !errors.Is(err, ErrNotSynced) {
		t.Fatalf("before the informers started: %v, want ErrNotSynced", err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		inf.Shutdown()
	})
	inf.Start(stop)
	if !cache.WaitForCacheSync(stop, c.hasSyncedFn...) {
		t.Fatal("caches did not sync")
	}
	return c
}

func credentialOf(t *testing.T, claim *airlockv1alpha1.SandboxClaim) Credential {
	t.Helper()
	pk, err := claimtoken.ProxyKey(clusterKey)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := claimtoken.DeriveProxy(pk, claim.UID, claim.Namespace, claim.Name)
	if err != nil {
		t.Fatal(err)
	}
	return Credential{Username: claim.Namespace + "." + claim.Name, Password: pw}
}

// TestClusterClaims: identity is a Bound, live claim whose derived credential is presented from
// its own running pod's address; everything else is refused with its reason.
func TestClusterClaims(t *testing.T) {
	a := clusterClaim("a", "uid-a", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	b := clusterClaim("b", "uid-b", airlockv1alpha1.ClaimBound, "github.com")
	binding := clusterClaim("binding", "uid-binding", airlockv1alpha1.ClaimBinding, "proxy.golang.org")
	deleting := clusterClaim("deleting", "uid-deleting", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	deleting.DeletionTimestamp = &metav1.Time{}
	deleting.Finalizers = []string{"airlock.dev/test"}
	noEgress := clusterClaim("plain", "uid-plain", airlockv1alpha1.ClaimBound)
	terminating := clusterClaim("term", "uid-term", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	pending := clusterClaim("pending", "uid-pending", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	terminatingPod := clusterPod("term", "uid-term", "10.244.0.30", corev1.PodRunning)
	terminatingPod.DeletionTimestamp = &metav1.Time{}
	terminatingPod.Finalizers = []string{"airlock.dev/test"}
	// A pod in another namespace that carries claim a's UID label: not a's pod.
	elsewhere := clusterPod("a", "uid-a", "10.244.0.40", corev1.PodRunning)
	elsewhere.Namespace = "team-b"

	c := startClusterClaims(t, keySecret(), a, b, binding, deleting, noEgress, terminating, pending,
		clusterPod("a", "uid-a", "10.244.0.17", corev1.PodRunning),
		clusterPod("b", "uid-b", "10.244.0.18", corev1.PodRunning),
		clusterPod("binding", "uid-binding", "10.244.0.19", corev1.PodRunning),
		clusterPod("deleting", "uid-deleting", "10.244.0.20", corev1.PodRunning),
		clusterPod("plain", "uid-plain", "10.244.0.21", corev1.PodRunning),
		clusterPod("pending", "uid-pending", "10.244.0.22", corev1.PodPending),
		terminatingPod, elsewhere,
	)
	if !c.HasSynced() {
		t.Fatal("not synced")
	}
	ip := netip.MustParseAddr
	wrongPassword := credentialOf(t, a)
	wrongPassword.Password = credentialOf(t, b).Password
	tests := map[string]struct {
		cred    Credential
		source  netip.Addr
		wantErr error
		want    string // claim
	}{
		"a from a's pod":                       {credentialOf(t, a), ip("10.244.0.17"), nil, "a"},
		"a from a's pod, IPv4-mapped":          {credentialOf(t, a), ip("::ffff:10.244.0.17"), nil, "a"},
		"b from b's pod":                       {credentialOf(t, b), ip("10.244.0.18"), nil, "b"},
		"a's credential from b's pod":          {credentialOf(t, a), ip("10.244.0.18"), ErrWrongSource, ""},
		"a's credential from an unknown pod":   {credentialOf(t, a), ip("10.244.0.99"), ErrWrongSource, ""},
		"a's credential from another ns' pod":  {credentialOf(t, a), ip("10.244.0.40"), ErrWrongSource, ""},
		"a's name with b's password":           {wrongPassword, ip("10.244.0.17"), ErrBadCredential, ""},
		"a wrong password":                     {Credential{Username: "team-a.a", Password: "not-the-credential"}, ip("10.244.0.17"), ErrBadCredential, ""},
		"a claim that does not exist":          {Credential{Username: "team-a.nobody", Password: credentialOf(t, a).Password}, ip("10.244.0.17"), ErrBadCredential, ""},
		"a username without a dot":             {Credential{Username: "team-a", Password: credentialOf(t, a).Password}, ip("10.244.0.17"), ErrBadCredential, ""},
		"a username with an empty name":        {Credential{Username: "team-a.", Password: credentialOf(t, a).Password}, ip("10.244.0.17"), ErrBadCredential, ""},
		"a claim not yet Bound":                {credentialOf(t, binding), ip("10.244.0.19"), ErrBadCredential, ""},
		"a claim being deleted":                {credentialOf(t, deleting), ip("10.244.0.20"), ErrBadCredential, ""},
		"a claim whose pod is being deleted":   {credentialOf(t, terminating), ip("10.244.0.30"), ErrWrongSource, ""},
		"a claim whose pod is not running yet": {credentialOf(t, pending), ip("10.244.0.22"), ErrWrongSource, ""},
		"a claim without egress":               {credentialOf(t, noEgress), ip("10.244.0.21"), nil, "plain"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			id, err := c.Lookup(context.Background(), tc.cred, tc.source)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && (id.Claim != tc.want || id.Namespace != "team-a" || id.Runtime != "agent" || id.Policy == nil) {
				t.Errorf("identity %+v, want claim %s of runtime agent with a policy", id, tc.want)
			}
		})
	}

	// The policy is the frozen record's: a's allows proxy.golang.org:443 and nothing else; the
	// claim without egress allows nothing.
	id, _ := c.Lookup(context.Background(), credentialOf(t, a), ip("10.244.0.17"))
	if rules, _ := id.Policy.Candidates(policy.Target{Host: "proxy.golang.org", Port: 443}); len(rules) != 1 {
		t.Errorf("a's policy does not allow proxy.golang.org:443")
	}
	if rules, listed := id.Policy.Candidates(policy.Target{Host: "github.com", Port: 443}); len(rules) != 0 || listed {
		t.Errorf("a's policy allows b's host")
	}
	id, _ = c.Lookup(context.Background(), credentialOf(t, noEgress), ip("10.244.0.21"))
	if rules, listed := id.Policy.Candidates(policy.Target{Host: "proxy.golang.org", Port: 443}); len(rules) != 0 || listed {
		t.Errorf("a claim without egress allows %v", rules)
	}
}

// TestClusterClaimsRecreated: a claim deleted and created again under the same name is another
// claim: the old credential is refused, and the new credential from the old claim's pod (still
// terminating or not, it carries the old UID) is refused too.
func TestClusterClaimsRecreated(t *testing.T) {
	old := clusterClaim("a", "uid-old", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	renewed := clusterClaim("a", "uid-new", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	oldPod := clusterPod("a", "uid-old", "10.244.0.17", corev1.PodRunning)
	c := startClusterClaims(t, keySecret(), renewed, oldPod)
	ip := netip.MustParseAddr("10.244.0.17")
	if _, err := c.Lookup(context.Background(), credentialOf(t, old), ip); !errors.Is(err, ErrBadCredential) {
		t.Errorf("the old claim's credential: %v, want ErrBadCredential", err)
	}
	if _, err := c.Lookup(context.Background(), credentialOf(t, renewed), ip); !errors.Is(err, ErrWrongSource) {
		t.Errorf("the new claim's credential from the old claim's pod: %v, want ErrWrongSource", err)
	}
}

// TestClusterClaimsNoKey: without the proxy key (absent, too short, elsewhere, or only the
// operator's token key there) the lookup is not
// synced: everything is refused and the gateway is not ready.
func TestClusterClaimsNoKey(t *testing.T) {
	a := clusterClaim("a", "uid-a", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	short := keySecret()
	short.Data[claimtoken.KeyField] = []byte("short")
	for name, objs := range map[string][]runtime.Object{
		"no key Secret":            {a, clusterPod("a", "uid-a", "10.244.0.17", corev1.PodRunning)},
		"a short key":              {short, a, clusterPod("a", "uid-a", "10.244.0.17", corev1.PodRunning)},
		"the key in another place": {func() *corev1.Secret { s := keySecret(); s.Namespace = "default"; return s }(), a},
		// The operator's token key is no key of the gateway's.
		"only the operator's token key": {operatorKeySecret(), a, clusterPod("a", "uid-a", "10.244.0.17", corev1.PodRunning)},
	} {
		t.Run(name, func(t *testing.T) {
			c := startClusterClaims(t, objs...)
			if c.HasSynced() {
				t.Error("synced without the key")
			}
			if _, err := c.Lookup(context.Background(), credentialOf(t, a), netip.MustParseAddr("10.244.0.17")); !errors.Is(err, ErrNotSynced) {
				t.Errorf("err %v, want ErrNotSynced", err)
			}
		})
	}
}

// TestClusterClaimsInvalidPolicy: a frozen egress the gateway cannot compile is refused as
// policy_invalid (never read as a narrower or wider policy).
func TestClusterClaimsInvalidPolicy(t *testing.T) {
	a := clusterClaim("a", "uid-a", airlockv1alpha1.ClaimBound, "*.com")
	c := startClusterClaims(t, keySecret(), a, clusterPod("a", "uid-a", "10.244.0.17", corev1.PodRunning))
	if _, err := c.Lookup(context.Background(), credentialOf(t, a), netip.MustParseAddr("10.244.0.17")); !errors.Is(err, ErrPolicyInvalid) {
		t.Errorf("err %v, want ErrPolicyInvalid", err)
	}
}

// TestClusterClaimsThroughTheGateway: a claim's frozen egress, read from the cluster's caches,
// is what the gateway enforces: its hosts, ports, methods and paths, from its pod's address only.
func TestClusterClaimsThroughTheGateway(t *testing.T) {
	claim := clusterClaim("a", "uid-a", airlockv1alpha1.ClaimBound, "allowed.example")
	claim.Status.Frozen.Egress.Hosts = append(claim.Status.Frozen.Egress.Hosts, airlockv1alpha1.EgressHost{
		Host: "api.example", Ports: []airlockv1alpha1.EgressPort{80}, Methods: []airlockv1alpha1.EgressMethod{"GET"}, PathPrefixes: []airlockv1alpha1.EgressPathPrefix{"/v1"},
	})
	lookup := startClusterClaims(t, keySecret(), claim, clusterPod("a", "uid-a", "127.0.0.1", corev1.PodRunning))
	f := newFixture(t, newInternet(t), withLookup(lookup))
	cred := credentialOf(t, claim)
	auth := basic(cred.Username, cred.Password)

	r, br, c := f.send("", "CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\nProxy-Authorization: "+auth+"\r\n\r\n")
	if r.status != 200 {
		t.Fatalf("CONNECT to an allowed host: %+v", r)
	}
	if body, err := f.tlsGet(c, br, "allowed.example", "allowed.example"); err != nil || body == "" {
		t.Errorf("TLS through the tunnel: %q, %v", body, err)
	}
	for _, tc := range []struct {
		name, source, raw string
		status            int
		reason            Reason
	}{
		{"a host the record does not list", "", "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\nProxy-Authorization: " + auth + "\r\n\r\n", 403, ReasonNotAllowed},
		{"a port the record does not list", "", "CONNECT allowed.example:8443 HTTP/1.1\r\nHost: allowed.example:8443\r\nProxy-Authorization: " + auth + "\r\n\r\n", 403, ReasonPortNotAllowed},
		{"a method and path the record lists", "", "GET http://api.example/v1/x HTTP/1.1\r\nHost: api.example\r\nProxy-Authorization: " + auth + "\r\n\r\n", 200, ""}, // the upstream's answer
		{"a method the record does not list", "", "POST http://api.example/v1/x HTTP/1.1\r\nHost: api.example\r\nProxy-Authorization: " + auth + "\r\nContent-Length: 0\r\n\r\n", 403, ReasonMethodOrPath},
		{"a path the record does not list", "", "GET http://api.example/v2 HTTP/1.1\r\nHost: api.example\r\nProxy-Authorization: " + auth + "\r\n\r\n", 403, ReasonMethodOrPath},
		{"the claim's credential from another address", "127.0.0.2", "CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\nProxy-Authorization: " + auth + "\r\n\r\n", 407, ReasonWrongSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _ := f.send(tc.source, tc.raw)
			if r.status != tc.status || r.reason != tc.reason {
				t.Errorf("got %d %s, want %d %s", r.status, r.reason, tc.status, tc.reason)
			}
		})
	}
}

// TestGatewayHoldsNoTokenKey: the key the gateway holds is the proxy key the operator writes
// (claimtoken.ProxyKey of its key, in the Secret airlock-egress-proxy-key), never the operator's
// token key, even where both Secrets exist: with it the proxy credentials the operator gives its
// claims verify, while no sandboxd bearer token, warm member key or adoption token comes out of
// it (the derivations are HMACs in domains of their own, one-way). A credential derived with the
// operator's key itself (as before the proxy key) is refused.
func TestGatewayHoldsNoTokenKey(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := clusterClaim("a", "uid-a", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	operator := k8sfake.NewClientset(operatorKeySecret())
	tokens := claimtoken.NewSource(operator, clusterKeyNS)
	if err := tokens.EnsureProxyKey(ctx); err != nil {
		t.Fatal(err)
	}
	proxySecret, err := operator.CoreV1().Secrets(clusterKeyNS).Get(ctx, claimtoken.ProxySecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := startClusterClaims(t, operatorKeySecret(), proxySecret, a, clusterPod("a", "uid-a", "10.244.0.17", corev1.PodRunning))
	source := netip.MustParseAddr("10.244.0.17")

	cred, err := tokens.ProxyCredential(ctx, a.UID, a.Namespace, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := c.Lookup(ctx, Credential{Username: "team-a.a", Password: cred}, source); err != nil || id.Claim != "a" {
		t.Fatalf("the operator's proxy credential: %+v, %v", id, err)
	}
	old, _ := claimtoken.DeriveProxy(clusterKey, a.UID, a.Namespace, a.Name)
	if _, err := c.Lookup(ctx, Credential{Username: "team-a.a", Password: old}, source); !errors.Is(err, ErrBadCredential) {
		t.Errorf("a credential derived with the operator's key: %v, want ErrBadCredential", err)
	}

	held, err := c.key()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(held, clusterKey) {
		t.Fatal("the gateway holds the operator's token key")
	}
	token, _ := claimtoken.Derive(clusterKey, a.UID, a.Namespace, a.Name)
	memberKey, _ := claimtoken.MemberKey(clusterKey, "team-a", "pool-0")
	adoption, _ := claimtoken.AdoptionToken(memberKey, a.UID, []string{"t"})
	fromHeld := map[string]func() (string, error){
		"a bearer token": func() (string, error) { return claimtoken.Derive(held, a.UID, a.Namespace, a.Name) },
		"a member key": func() (string, error) {
			k, err := claimtoken.MemberKey(held, "team-a", "pool-0")
			return claimtoken.EncodeMemberKey(k), err
		},
		"an adoption token": func() (string, error) {
			k, _ := claimtoken.MemberKey(held, "team-a", "pool-0")
			return claimtoken.AdoptionToken(k, a.UID, []string{"t"})
		},
		"the proxy key of the held key": func() (string, error) {
			k, err := claimtoken.ProxyKey(held)
			return string(k), err
		},
	}
	for name, derive := range fromHeld {
		got, err := derive()
		if err != nil {
			continue
		}
		for what, real := range map[string]string{"bearer token": token, "member key": claimtoken.EncodeMemberKey(memberKey),
			"adoption token": adoption, "operator key": string(clusterKey)} {
			if got == real {
				t.Errorf("%s from the gateway's key is the claim's %s", name, what)
			}
		}
	}
}

// warmClaim is a claim Bound to the warm member it adopted.
func warmClaim(ns, name string, uid types.UID, member string, phase airlockv1alpha1.ClaimPhase, hosts ...string) *airlockv1alpha1.SandboxClaim {
	c := clusterClaim(name, uid, phase, hosts...)
	c.Namespace = ns
	c.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: member}
	return c
}

// memberPod is a warm member pod, adopted by the claim name with claimUID as the adoption's patch
// labels it (an idle member, claimUID "", carries an empty claim label and no UID label).
func memberPod(ns, name string, uid types.UID, claim string, claimUID types.UID, ip string, phase corev1.PodPhase) *corev1.Pod {
	labels := map[string]string{airlockv1alpha1.LabelWarmMember: name, airlockv1alpha1.LabelClaim: claim}
	if claimUID != "" {
		labels[airlockv1alpha1.LabelClaimUID] = string(claimUID)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid, Labels: labels},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// memberCredential is the member pod's proxy credential as the operator writes it into the
// member's key Secret: DeriveMemberProxy of the proxy key (of key) and the pod.
func memberCredential(t *testing.T, key []byte, ns, member string, uid types.UID) Credential {
	t.Helper()
	pk, err := claimtoken.ProxyKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := claimtoken.DeriveMemberProxy(pk, uid, ns, member)
	if err != nil {
		t.Fatal(err)
	}
	return Credential{Username: sandboxpod.MemberProxyUsername(ns, member), Password: pw}
}

// TestClusterClaimsWarmMembers (docs/egress.md, "Warm members of a class with egress"; this is
// a new way into the gateway, so adversarially): a warm member's own credential is its adopting
// claim's, with that claim's policy, from the member pod's address only, while the claim is live
// and Bound and names the pod as its member; before the adoption, after the claim is gone, from
// another pod, of another namespace, with labels forged on a pod, a forged username or a
// credential of another domain or key, it is refused.
func TestClusterClaimsWarmMembers(t *testing.T) {
	const (
		m       = "tools-codegen-mmmmmmmmmmmm"
		idle    = "tools-codegen-iiiiiiiiiiii"
		forged  = "tools-codegen-ffffffffffff"
		reaping = "tools-codegen-rrrrrrrrrrrr"
		orphan  = "tools-codegen-oooooooooooo"
		renewed = "tools-codegen-nnnnnnnnnnnn"
		dying   = "tools-codegen-dddddddddddd"
		pending = "tools-codegen-pppppppppppp"
	)
	w := warmClaim("team-a", "w", "uid-w", m, airlockv1alpha1.ClaimBound, "proxy.golang.org")
	// A claim whose member is m: labels on another pod that name w make that pod no member of w.
	cold := clusterClaim("cold", "uid-cold", airlockv1alpha1.ClaimBound, "github.com")
	r := warmClaim("team-a", "r", "uid-r", reaping, airlockv1alpha1.ClaimReaping, "proxy.golang.org")
	// The claim "n" of this name now is another claim (re-created): the member was the old one's.
	n := warmClaim("team-a", "n", "uid-n-new", renewed, airlockv1alpha1.ClaimBound, "proxy.golang.org")
	d := warmClaim("team-a", "d", "uid-d", dying, airlockv1alpha1.ClaimBound, "proxy.golang.org")
	p := warmClaim("team-a", "p", "uid-p", pending, airlockv1alpha1.ClaimBound, "proxy.golang.org")
	deleting := warmClaim("team-a", "x", "uid-x", "tools-codegen-xxxxxxxxxxxx", airlockv1alpha1.ClaimBound, "proxy.golang.org")
	deleting.DeletionTimestamp = &metav1.Time{}
	deleting.Finalizers = []string{"airlock.dev/test"}
	// Another namespace's member and claim, of the same names.
	b := warmClaim("team-b", "w", "uid-b-w", m, airlockv1alpha1.ClaimBound, "github.com")
	dyingPod := memberPod("team-a", dying, "pod-uid-d", "d", "uid-d", "10.244.0.56", corev1.PodRunning)
	dyingPod.DeletionTimestamp = &metav1.Time{}
	dyingPod.Finalizers = []string{"airlock.dev/test"}

	c := startClusterClaims(t, keySecret(), w, cold, r, n, d, p, deleting, b,
		memberPod("team-a", m, "pod-uid-m", "w", "uid-w", "10.244.0.50", corev1.PodRunning),
		memberPod("team-a", idle, "pod-uid-i", "", "", "10.244.0.51", corev1.PodRunning),
		// Someone who may patch pods labels an idle member with w's name and UID.
		memberPod("team-a", forged, "pod-uid-f", "w", "uid-w", "10.244.0.52", corev1.PodRunning),
		memberPod("team-a", reaping, "pod-uid-r", "r", "uid-r", "10.244.0.53", corev1.PodRunning),
		memberPod("team-a", orphan, "pod-uid-o", "gone", "uid-gone", "10.244.0.54", corev1.PodRunning),
		memberPod("team-a", renewed, "pod-uid-n", "n", "uid-n-old", "10.244.0.55", corev1.PodRunning),
		dyingPod,
		memberPod("team-a", pending, "pod-uid-p", "p", "uid-p", "10.244.0.57", corev1.PodPending),
		memberPod("team-a", "tools-codegen-xxxxxxxxxxxx", "pod-uid-x", "x", "uid-x", "10.244.0.58", corev1.PodRunning),
		clusterPod("cold", "uid-cold", "10.244.0.60", corev1.PodRunning),
		memberPod("team-b", m, "pod-uid-b-m", "w", "uid-b-w", "10.244.1.50", corev1.PodRunning),
	)
	ip := netip.MustParseAddr
	cred := func(ns, member string, uid types.UID) Credential {
		return memberCredential(t, clusterKey, ns, member, uid)
	}
	mine := cred("team-a", m, "pod-uid-m")
	withPassword := func(c Credential, pw string) Credential { c.Password = pw; return c }
	tests := map[string]struct {
		cred    Credential
		source  netip.Addr
		wantErr error
		want    string // the claim, in namespace wantNS
		wantNS  string
	}{
		"the member's credential once adopted":      {mine, ip("10.244.0.50"), nil, "w", "team-a"},
		"the same, IPv4-mapped":                     {mine, ip("::ffff:10.244.0.50"), nil, "w", "team-a"},
		"another namespace's member, from its pod":  {cred("team-b", m, "pod-uid-b-m"), ip("10.244.1.50"), nil, "w", "team-b"},
		"the member's credential from another pod":  {mine, ip("10.244.0.60"), ErrWrongSource, "", ""},
		"the member's credential from an idle pod":  {mine, ip("10.244.0.51"), ErrWrongSource, "", ""},
		"from another namespace's pod":              {mine, ip("10.244.1.50"), ErrWrongSource, "", ""},
		"another namespace's credential, from here": {cred("team-b", m, "pod-uid-b-m"), ip("10.244.0.50"), ErrWrongSource, "", ""},
		"another namespace's password, this name":   {withPassword(mine, cred("team-b", m, "pod-uid-b-m").Password), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"an idle member (before adoption)":          {cred("team-a", idle, "pod-uid-i"), ip("10.244.0.51"), ErrBadCredential, "", ""},
		"labels forged on a pod":                    {cred("team-a", forged, "pod-uid-f"), ip("10.244.0.52"), ErrBadCredential, "", ""},
		"a member whose claim is Reaping":           {cred("team-a", reaping, "pod-uid-r"), ip("10.244.0.53"), ErrBadCredential, "", ""},
		"a member whose claim is being deleted":     {cred("team-a", "tools-codegen-xxxxxxxxxxxx", "pod-uid-x"), ip("10.244.0.58"), ErrBadCredential, "", ""},
		"a member whose claim is gone":              {cred("team-a", orphan, "pod-uid-o"), ip("10.244.0.54"), ErrBadCredential, "", ""},
		"a member of a claim re-created":            {cred("team-a", renewed, "pod-uid-n"), ip("10.244.0.55"), ErrBadCredential, "", ""},
		"a member pod re-created under the name":    {cred("team-a", m, "pod-uid-earlier"), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"a member pod being deleted":                {cred("team-a", dying, "pod-uid-d"), ip("10.244.0.56"), ErrWrongSource, "", ""},
		"a member pod not running":                  {cred("team-a", pending, "pod-uid-p"), ip("10.244.0.57"), ErrWrongSource, "", ""},
		"a member that does not exist":              {cred("team-a", "tools-codegen-zzzzzzzzzzzz", "pod-uid-z"), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"an empty member name":                      {withPassword(Credential{Username: "team-a.~"}, mine.Password), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"a wrong password":                          {withPassword(mine, "not-the-credential"), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"the claim's own credential, member's name": {withPassword(mine, credentialOf(t, w).Password), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"the member's credential, the claim's name": {withPassword(credentialOf(t, w), mine.Password), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"a cold claim's pod named as a member":      {cred("team-a", "cold", "pod-cold"), ip("10.244.0.60"), ErrBadCredential, "", ""},
		"derived with the operator's key itself":    {memberCredential(t, bytes.Repeat([]byte{9}, 32), "team-a", m, "pod-uid-m"), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"the member key in place of the credential": {withPassword(mine, memberKeyText(t, "team-a", m)), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"a dot in the member part of another name":  {withPassword(Credential{Username: "team-a.~" + m + ".x"}, mine.Password), ip("10.244.0.50"), ErrBadCredential, "", ""},
		"the marker without the namespace":          {withPassword(Credential{Username: "~" + m}, mine.Password), ip("10.244.0.50"), ErrBadCredential, "", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			id, err := c.Lookup(context.Background(), tc.cred, tc.source)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && (id.Claim != tc.want || id.Namespace != tc.wantNS || id.Policy == nil) {
				t.Errorf("identity %+v, want claim %s/%s with a policy", id, tc.wantNS, tc.want)
			}
		})
	}

	// The policy is the adopting claim's frozen record.
	id, _ := c.Lookup(context.Background(), mine, ip("10.244.0.50"))
	if id.ClaimUID != "uid-w" {
		t.Errorf("claim UID %q, want the adopting claim's", id.ClaimUID)
	}
	if rules, _ := id.Policy.Candidates(policy.Target{Host: "proxy.golang.org", Port: 443}); len(rules) != 1 {
		t.Error("the member's policy is not its claim's")
	}
	if rules, listed := id.Policy.Candidates(policy.Target{Host: "github.com", Port: 443}); len(rules) != 0 || listed {
		t.Error("the member's policy allows another claim's host")
	}
}

// memberKeyText is the member's sandboxd key, in its Secret's text form.
func memberKeyText(t *testing.T, ns, member string) string {
	t.Helper()
	k, err := claimtoken.MemberKey(clusterKey, ns, member)
	if err != nil {
		t.Fatal(err)
	}
	return claimtoken.EncodeMemberKey(k)
}

// TestMemberUsernameShape: the gateway reads a member's username as sandboxpod writes it into
// the member's proxy URL.
func TestMemberUsernameShape(t *testing.T) {
	ns, name, _ := strings.Cut(sandboxpod.MemberProxyUsername("team-a", "tools-codegen-mmmmmmmmmmmm"), ".")
	if member, ok := strings.CutPrefix(name, memberMarker); ns != "team-a" || !ok || member != "tools-codegen-mmmmmmmmmmmm" {
		t.Errorf("namespace %q name %q: the gateway reads another shape than sandboxpod writes", ns, name)
	}
}

// TestWarmMemberThroughTheGateway: through the gateway, an adopted member's own credential
// reaches what its claim's record allows, from the member's address only; an idle member's
// credential, and the adopted one from another address, are refused with their reasons (407),
// before anything is resolved or dialled.
func TestWarmMemberThroughTheGateway(t *testing.T) {
	const m, idle = "tools-codegen-mmmmmmmmmmmm", "tools-codegen-iiiiiiiiiiii"
	claim := warmClaim("team-a", "w", "uid-w", m, airlockv1alpha1.ClaimBound, "allowed.example")
	lookup := startClusterClaims(t, keySecret(), claim,
		memberPod("team-a", m, "pod-uid-m", "w", "uid-w", "127.0.0.1", corev1.PodRunning),
		memberPod("team-a", idle, "pod-uid-i", "", "", "127.0.0.3", corev1.PodRunning))
	f := newFixture(t, newInternet(t), withLookup(lookup))
	cred := memberCredential(t, clusterKey, "team-a", m, "pod-uid-m")
	auth := basic(cred.Username, cred.Password)

	r, br, c := f.send("", "CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\nProxy-Authorization: "+auth+"\r\n\r\n")
	if r.status != 200 {
		t.Fatalf("CONNECT with the adopted member's credential: %+v", r)
	}
	if body, err := f.tlsGet(c, br, "allowed.example", "allowed.example"); err != nil || body == "" {
		t.Errorf("TLS through the tunnel: %q, %v", body, err)
	}
	idleCred := memberCredential(t, clusterKey, "team-a", idle, "pod-uid-i")
	asked := f.resolver.names()
	for _, tc := range []struct {
		name, source, raw string
		status            int
		reason            Reason
	}{
		{"a host the claim's record does not list", "", "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\nProxy-Authorization: " + auth + "\r\n\r\n", 403, ReasonNotAllowed},
		{"the member's credential from another address", "127.0.0.2", "CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\nProxy-Authorization: " + auth + "\r\n\r\n", 407, ReasonWrongSource},
		{"an idle member's credential from its own address", "127.0.0.3", "CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\nProxy-Authorization: " + basic(idleCred.Username, idleCred.Password) + "\r\n\r\n", 407, ReasonBadCredential},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _ := f.send(tc.source, tc.raw)
			if r.status != tc.status || r.reason != tc.reason {
				t.Errorf("got %d %s, want %d %s", r.status, r.reason, tc.status, tc.reason)
			}
		})
	}
	if got := f.resolver.names(); !slices.Equal(got, asked) {
		t.Errorf("the refused requests were resolved: %v, want %v", got, asked)
	}
}
