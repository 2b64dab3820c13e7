package egress

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
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
