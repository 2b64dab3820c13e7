//go:build !sandboxd_only

package cmd

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/egress"
)

const testClaimsFile = `[{"namespace":"team-a","claim":"c","runtime":"r","password":"0123456789abcdefghij",
	"sources":["10.0.0.5"],"policy":{"rules":[{"host":"proxy.golang.org","ports":[443]}]}}]`

func TestEgressDefaults(t *testing.T) {
	o := NewEgressOptions()
	if errs := o.Validate(); len(errs) != 0 {
		t.Fatalf("the defaults (claims from the cluster) do not validate: %v", errs)
	}
	o.ClaimsFile = tempFile(t, "claims.json", testClaimsFile)
	if errs := o.Validate(); len(errs) != 0 {
		t.Fatalf("the defaults with a claims file do not validate: %v", errs)
	}
	got := []any{o.ProxyBindAddress, o.HealthProbeBindAddress, o.MetricsBindAddress, o.HeadTimeout, o.DialTimeout, o.IdleTimeout, o.ShutdownGrace, o.Tracing.Endpoint}
	want := []any{":3128", ":8081", ":8080", 30 * time.Second, 10 * time.Second, 10 * time.Minute, 30 * time.Second, ""} // tracing off
	if !slices.Equal(got, want) {
		t.Errorf("defaults %v, want %v", got, want)
	}
	cfg, informers, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Gateway.Claims.HasSynced() || cfg.ProxyAddress != ":3128" || informers != nil {
		t.Errorf("config %+v, informers %v", cfg, informers)
	}
}

// TestEgressClusterLookup: without --claims-file the gateway reads the cluster the kubeconfig
// names: a lookup that has not synced (its informers are the caller's to start), over the
// token key's namespace.
func TestEgressClusterLookup(t *testing.T) {
	o := newEgressOptionsWithEnv(func(name string) string {
		if name == "POD_NAMESPACE" {
			return "gateway-ns"
		}
		return ""
	})
	if o.TokenKeyNamespace != "gateway-ns" {
		t.Errorf("token key namespace %q, want $POD_NAMESPACE", o.TokenKeyNamespace)
	}
	o.KubeClient.Kubeconfig = tempFile(t, "kubeconfig", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\ncurrent-context: c\n")
	if errs := o.Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
	cfg, informers, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if informers == nil || cfg.Gateway.Claims.HasSynced() {
		t.Errorf("informers %v, synced %v: want informers to start, not synced", informers, cfg.Gateway.Claims.HasSynced())
	}
	if _, ok := cfg.Gateway.Claims.(*egress.ClusterClaims); !ok {
		t.Errorf("lookup %T, want the cluster's", cfg.Gateway.Claims)
	}
}

// TestEgressInvalidFlags: each invalid value is one error that names its flag.
func TestEgressInvalidFlags(t *testing.T) {
	claims := tempFile(t, "claims.json", testClaimsFile)
	tests := map[string]struct {
		set  func(o *EgressOptions)
		flag string
	}{
		"proxy address":       {func(o *EgressOptions) { o.ProxyBindAddress = "3128" }, "proxy-bind-address"},
		"health address":      {func(o *EgressOptions) { o.HealthProbeBindAddress = ":99999" }, "health-probe-bind-address"},
		"metrics address":     {func(o *EgressOptions) { o.MetricsBindAddress = "nowhere" }, "metrics-bind-address"},
		"same addresses":      {func(o *EgressOptions) { o.MetricsBindAddress = ":3128" }, "metrics-bind-address"},
		"missing claims file": {func(o *EgressOptions) { o.ClaimsFile = "/nonexistent/claims.json" }, "claims-file"},
		"not a CIDR":          {func(o *EgressOptions) { o.ClusterCIDRs = []string{"10.96.0.0"} }, "cluster-cidrs"},
		"host bits in a CIDR": {func(o *EgressOptions) { o.ClusterCIDRs = []string{"10.96.0.1/12"} }, "cluster-cidrs"},
		"DNS server name":     {func(o *EgressOptions) { o.DNSServer = "kube-dns:53" }, "dns-server"},
		"DNS server port":     {func(o *EgressOptions) { o.DNSServer = "10.96.0.10" }, "dns-server"},
		"zero head timeout":   {func(o *EgressOptions) { o.HeadTimeout = 0 }, "head-timeout"},
		"zero dial timeout":   {func(o *EgressOptions) { o.DialTimeout = 0 }, "dial-timeout"},
		"zero idle timeout":   {func(o *EgressOptions) { o.IdleTimeout = 0 }, "idle-timeout"},
		"negative grace":      {func(o *EgressOptions) { o.ShutdownGrace = -time.Second }, "shutdown-grace"},
		"missing kubeconfig": {func(o *EgressOptions) {
			o.ClaimsFile, o.KubeClient.Kubeconfig = "", "/nonexistent/kubeconfig"
		}, "kubeconfig"},
		"token key namespace":         {func(o *EgressOptions) { o.ClaimsFile, o.TokenKeyNamespace = "", "Not_A_Namespace" }, "token-key-namespace"},
		"zero QPS":                    {func(o *EgressOptions) { o.ClaimsFile, o.KubeClient.QPS = "", 0 }, "kube-api-qps"},
		"missing CA directory":        {func(o *EgressOptions) { o.TerminateCADir = "/nonexistent/egress-ca" }, "terminate-ca-dir"},
		"CA directory that is a file": {func(o *EgressOptions) { o.TerminateCADir = claims }, "terminate-ca-dir"},
		"CA directory and CA files": {func(o *EgressOptions) {
			o.TerminateCADir, o.TerminateCACertFile, o.TerminateCAKeyFile = t.TempDir(), claims, claims
		}, "terminate-ca-dir"},
		"upstream CA without a CA": {func(o *EgressOptions) { o.UpstreamCAFile = claims }, "upstream-ca-file"},
		"tracing endpoint":         {func(o *EgressOptions) { o.Tracing.Endpoint = "no-port" }, "tracing-endpoint"},
		"tracing protocol":         {func(o *EgressOptions) { o.Tracing.Protocol = "udp" }, "tracing-protocol"},
		"tracing sample ratio":     {func(o *EgressOptions) { o.Tracing.SampleRatio = -1 }, "tracing-sample-ratio"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewEgressOptions()
			o.ClaimsFile = claims
			tc.set(o)
			checkOneErrorFor(t, o.Validate(), tc.flag)
		})
	}
}

// TestEgressTerminateCADir: a CA directory that holds no CA yet (the operator's Secret not made)
// is a gateway that terminates nothing until it does, not a failed start.
func TestEgressTerminateCADir(t *testing.T) {
	o := NewEgressOptions()
	o.ClaimsFile = tempFile(t, "claims.json", testClaimsFile)
	o.TerminateCADir = t.TempDir()
	if errs := o.Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
	cfg, _, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway.Terminate == nil || cfg.Gateway.Terminate.CAFiles == nil || cfg.Gateway.Terminate.CAFiles.CertFile != o.TerminateCADir+"/tls.crt" {
		t.Errorf("terminator %+v", cfg.Gateway.Terminate)
	}
}

func TestEgressBadClaimsFileFailsAtStart(t *testing.T) {
	bad := tempFile(t, "claims.json", strings.Replace(testClaimsFile, "proxy.golang.org", "*", 1))
	code, _, stderr := runAirlock(t, "egress", "--claims-file="+bad, "--proxy-bind-address=127.0.0.1:0",
		"--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=0")
	if code != 1 || !strings.HasPrefix(stderr, "Error: invalid value for --claims-file: ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want one line about --claims-file", code, stderr)
	}
}

func TestEgressCommandInFullBuild(t *testing.T) {
	var names []string
	for _, c := range NewAirlockCommand().Commands() {
		names = append(names, c.Name())
	}
	if !slices.Contains(names, "egress") {
		t.Errorf("commands %v lack egress", names)
	}
}
