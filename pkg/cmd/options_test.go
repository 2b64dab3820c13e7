//go:build !sandboxd_only

package cmd

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
	"github.com/airlock-dev/airlock/pkg/operator"
	"github.com/airlock-dev/airlock/pkg/sandboxd"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// tempFile writes a file in a test directory and returns its path.
func tempFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkOneErrorFor checks that errs is exactly one error, for --flag.
func checkOneErrorFor(t *testing.T, errs []error, flag string) {
	t.Helper()
	if len(errs) != 1 {
		t.Fatalf("got %d errors, want exactly 1 for --%s: %v", len(errs), flag, errs)
	}
	if prefix := "invalid value for --" + flag + ": "; !strings.HasPrefix(errs[0].Error(), prefix) {
		t.Errorf("error %q does not start with %q", errs[0], prefix)
	}
	if strings.Contains(errs[0].Error(), "\n") {
		t.Errorf("error %q spans several lines", errs[0])
	}
}

func TestOperatorDefaults(t *testing.T) {
	o := newOperatorOptions(func(string) string { return "" })
	if errs := o.Validate(); len(errs) != 0 {
		t.Fatalf("the defaults do not validate: %v", errs)
	}
	want := componentbaseconfig.LeaderElectionConfiguration{
		LeaderElect:       true,
		LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
		RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
		RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
		ResourceLock:      "leases",
		ResourceName:      "airlock-operator",
		ResourceNamespace: "airlock-system",
	}
	if diff := cmp.Diff(want, o.LeaderElection.LeaderElectionConfiguration); diff != "" {
		t.Errorf("leader election defaults (-want +got):\n%s", diff)
	}
	got := []any{o.SandboxAPI.BindAddress, o.Serving.MetricsBindAddress, o.Serving.HealthProbeBindAddress,
		o.Controllers.Workers, o.Controllers.SyncImage, o.KubeClient.QPS, o.KubeClient.Burst, o.KubeClient.Kubeconfig, o.SandboxAPI.TokenAudiences, o.namespace}
	wantRest := []any{":8443", ":8080", ":8081", 4, "ghcr.io/airlock-dev/airlock:dev", float32(200), 400, "", []string{"airlock"}, "airlock-system"}
	if diff := cmp.Diff(wantRest, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}

	inPod := newOperatorOptions(func(key string) string {
		if key == "POD_NAMESPACE" {
			return "team-a"
		}
		return ""
	})
	if inPod.namespace != "team-a" {
		t.Errorf("the operator's namespace in a pod is %q, want $POD_NAMESPACE", inPod.namespace)
	}
	if ns := inPod.LeaderElection.ResourceNamespace; ns != "team-a" {
		t.Errorf("lease namespace with POD_NAMESPACE=team-a: %q", ns)
	}

	// TLS is on by default, with a certificate for the Sandbox API Service's names in the
	// operator's namespace.
	if o.SandboxAPI.TLSMode != TLSModeSelfSigned {
		t.Errorf("--tls-mode defaults to %q, want self-signed", o.SandboxAPI.TLSMode)
	}
	wantSANs := []string{"airlock-sandbox-api.team-a.svc", "airlock-sandbox-api.team-a.svc.cluster.local", "airlock-sandbox-api.team-a"}
	if diff := cmp.Diff(wantSANs, inPod.SandboxAPI.TLSSANs); diff != "" {
		t.Errorf("--tls-sans defaults (-want +got):\n%s", diff)
	}
}

func TestOperatorFlagsParse(t *testing.T) {
	tlsCrt, tlsKey, caCrt := tempFile(t, "tls.crt", "c"), tempFile(t, "tls.key", "k"), tempFile(t, "ca.crt", "a")
	o := newOperatorOptions(func(string) string { return "" })
	cmd := newOperatorCommand(o)
	err := cmd.ParseFlags([]string{
		"--workers=8", "--token-audiences=airlock,https://kubernetes.default.svc", "--metrics-bind-address=0",
		"--leader-elect=false", "--leader-elect-lease-duration=30s", "--kube-api-qps=12.5",
		"--sync-image=registry.local/airlock:v1", "--tls-mode=files", "--tls-cert-file=" + tlsCrt,
		"--tls-key-file=" + tlsKey, "--tls-ca-file=" + caCrt, "--tls-sans=a.example,10.0.0.1",
		"--warm-refill-rate=2.5",
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.Controllers.Workers != 8 || o.Serving.MetricsBindAddress != "0" || o.LeaderElection.LeaderElect ||
		o.LeaderElection.LeaseDuration.Duration != 30*time.Second || o.KubeClient.QPS != 12.5 ||
		o.Controllers.SyncImage != "registry.local/airlock:v1" || o.Controllers.WarmRefillRate != 2.5 {
		t.Errorf("flags not bound: %+v %+v %+v %+v", o.Controllers, o.Serving, o.LeaderElection, o.KubeClient)
	}
	if tls := o.SandboxAPI; tls.TLSMode != "files" || tls.TLSCertFile != tlsCrt || tls.TLSKeyFile != tlsKey || tls.TLSCAFile != caCrt ||
		!cmp.Equal(tls.TLSSANs, []string{"a.example", "10.0.0.1"}) {
		t.Errorf("TLS flags not bound: %+v", tls)
	}
	if diff := cmp.Diff([]string{"airlock", "https://kubernetes.default.svc"}, o.SandboxAPI.TokenAudiences); diff != "" {
		t.Errorf("--token-audiences (-want +got):\n%s", diff)
	}
	if errs := o.Validate(); len(errs) != 0 {
		t.Errorf("valid flags rejected: %v", errs)
	}
}

func TestOperatorValidate(t *testing.T) {
	certFile := tempFile(t, "tls.crt", "cert")
	keyFile := tempFile(t, "tls.key", "key")
	kubeconfig := tempFile(t, "kubeconfig", "apiVersion: v1\nkind: Config\n")

	tests := map[string]struct {
		modify   func(o *OperatorOptions)
		wantFlag string // "" for valid options
	}{
		"kubeconfig that exists":    {modify: func(o *OperatorOptions) { o.KubeClient.Kubeconfig = kubeconfig }},
		"missing kubeconfig":        {modify: func(o *OperatorOptions) { o.KubeClient.Kubeconfig = "/nonexistent/kubeconfig" }, wantFlag: "kubeconfig"},
		"kubeconfig is a directory": {modify: func(o *OperatorOptions) { o.KubeClient.Kubeconfig = t.TempDir() }, wantFlag: "kubeconfig"},
		"zero qps":                  {modify: func(o *OperatorOptions) { o.KubeClient.QPS = 0 }, wantFlag: "kube-api-qps"},
		"negative qps":              {modify: func(o *OperatorOptions) { o.KubeClient.QPS = -1 }, wantFlag: "kube-api-qps"},
		"zero burst":                {modify: func(o *OperatorOptions) { o.KubeClient.Burst = 0 }, wantFlag: "kube-api-burst"},
		"zero workers":              {modify: func(o *OperatorOptions) { o.Controllers.Workers = 0 }, wantFlag: "workers"},
		"negative workers":          {modify: func(o *OperatorOptions) { o.Controllers.Workers = -3 }, wantFlag: "workers"},
		"one worker":                {modify: func(o *OperatorOptions) { o.Controllers.Workers = 1 }},
		"tracing on":                {modify: func(o *OperatorOptions) { o.Tracing.Endpoint = "otel-collector.observability:4317" }},
		"tracing over https":        {modify: func(o *OperatorOptions) { o.Tracing.Endpoint, o.Tracing.Protocol = "https://collector:4318", "http" }},
		"tracing endpoint no port":  {modify: func(o *OperatorOptions) { o.Tracing.Endpoint = "collector" }, wantFlag: "tracing-endpoint"},
		"tracing endpoint a path":   {modify: func(o *OperatorOptions) { o.Tracing.Endpoint = "http://collector:4318/v1/traces" }, wantFlag: "tracing-endpoint"},
		"tracing protocol unknown":  {modify: func(o *OperatorOptions) { o.Tracing.Protocol = "thrift" }, wantFlag: "tracing-protocol"},
		"tracing ratio above one":   {modify: func(o *OperatorOptions) { o.Tracing.SampleRatio = 1.5 }, wantFlag: "tracing-sample-ratio"},
		"empty sync image":          {modify: func(o *OperatorOptions) { o.Controllers.SyncImage = "" }, wantFlag: "sync-image"},
		"zero warm refill rate":     {modify: func(o *OperatorOptions) { o.Controllers.WarmRefillRate = 0 }, wantFlag: "warm-refill-rate"},
		"negative warm refill rate": {modify: func(o *OperatorOptions) { o.Controllers.WarmRefillRate = -1 }, wantFlag: "warm-refill-rate"},
		"warm refill rate too high": {modify: func(o *OperatorOptions) { o.Controllers.WarmRefillRate = 5000 }, wantFlag: "warm-refill-rate"},
		"sync image with a space":   {modify: func(o *OperatorOptions) { o.Controllers.SyncImage = "a b" }, wantFlag: "sync-image"},
		"egress gateway":            {modify: func(o *OperatorOptions) { o.Controllers.EgressGatewayService = "airlock-system/airlock-egress:3128" }},
		"operator pod labels": {modify: func(o *OperatorOptions) {
			o.Controllers.OperatorPodLabels = "app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator"
		}},
		"operator pod labels not a selector":   {modify: func(o *OperatorOptions) { o.Controllers.OperatorPodLabels = "a=b=c" }, wantFlag: "operator-pod-labels"},
		"operator pod labels with a bad key":   {modify: func(o *OperatorOptions) { o.Controllers.OperatorPodLabels = "bad key=x" }, wantFlag: "operator-pod-labels"},
		"operator pod labels with a bad value": {modify: func(o *OperatorOptions) { o.Controllers.OperatorPodLabels = "app=-x-" }, wantFlag: "operator-pod-labels"},
		"egress gateway and bundle": {modify: func(o *OperatorOptions) {
			o.Controllers.EgressGatewayService, o.Controllers.EgressCABundleConfigMap = "airlock-system/airlock-egress:3128", "airlock-egress-ca"
		}},
		"egress gateway without port":      {modify: func(o *OperatorOptions) { o.Controllers.EgressGatewayService = "airlock-system/airlock-egress" }, wantFlag: "egress-gateway-service"},
		"egress gateway without namespace": {modify: func(o *OperatorOptions) { o.Controllers.EgressGatewayService = "airlock-egress:3128" }, wantFlag: "egress-gateway-service"},
		"egress gateway port out of range": {modify: func(o *OperatorOptions) { o.Controllers.EgressGatewayService = "a/b:70000" }, wantFlag: "egress-gateway-service"},
		"egress gateway name not a label":  {modify: func(o *OperatorOptions) { o.Controllers.EgressGatewayService = "a/B_c:3128" }, wantFlag: "egress-gateway-service"},
		"egress bundle without gateway":    {modify: func(o *OperatorOptions) { o.Controllers.EgressCABundleConfigMap = "airlock-egress-ca" }, wantFlag: "egress-ca-bundle-configmap"},
		"egress bundle name not a name": {modify: func(o *OperatorOptions) {
			o.Controllers.EgressGatewayService, o.Controllers.EgressCABundleConfigMap = "a/b:3128", "Bad Name"
		}, wantFlag: "egress-ca-bundle-configmap"},
		"managed egress CA": {modify: func(o *OperatorOptions) {
			o.Controllers.EgressGatewayService, o.Controllers.EgressCABundleConfigMap, o.Controllers.ManageEgressCA = "a/b:3128", "airlock-egress-ca", true
		}},
		"managed egress CA with roots": {modify: func(o *OperatorOptions) {
			o.Controllers.EgressGatewayService, o.Controllers.EgressCABundleConfigMap, o.Controllers.ManageEgressCA = "a/b:3128", "airlock-egress-ca", true
			o.Controllers.EgressCARootsFile = certFile
		}},
		"managed egress CA without bundle": {modify: func(o *OperatorOptions) {
			o.Controllers.EgressGatewayService, o.Controllers.ManageEgressCA = "a/b:3128", true
		}, wantFlag: "manage-egress-ca"},
		"egress roots without managed CA": {modify: func(o *OperatorOptions) {
			o.Controllers.EgressGatewayService, o.Controllers.EgressCABundleConfigMap, o.Controllers.EgressCARootsFile = "a/b:3128", "airlock-egress-ca", certFile
		}, wantFlag: "egress-ca-roots-file"},
		"missing egress roots": {modify: func(o *OperatorOptions) {
			o.Controllers.EgressGatewayService, o.Controllers.EgressCABundleConfigMap, o.Controllers.ManageEgressCA = "a/b:3128", "airlock-egress-ca", true
			o.Controllers.EgressCARootsFile = "/nonexistent/roots.pem"
		}, wantFlag: "egress-ca-roots-file"},
		"api address without port":       {modify: func(o *OperatorOptions) { o.SandboxAPI.BindAddress = "localhost" }, wantFlag: "api-bind-address"},
		"api port out of range":          {modify: func(o *OperatorOptions) { o.SandboxAPI.BindAddress = ":99999" }, wantFlag: "api-bind-address"},
		"api port not a number":          {modify: func(o *OperatorOptions) { o.SandboxAPI.BindAddress = ":https" }, wantFlag: "api-bind-address"},
		"api host not a name":            {modify: func(o *OperatorOptions) { o.SandboxAPI.BindAddress = "bad_host!:8443" }, wantFlag: "api-bind-address"},
		"api on an IPv6 address":         {modify: func(o *OperatorOptions) { o.SandboxAPI.BindAddress = "[::1]:8443" }},
		"api cannot be disabled":         {modify: func(o *OperatorOptions) { o.SandboxAPI.BindAddress = "0" }, wantFlag: "api-bind-address"},
		"metrics disabled":               {modify: func(o *OperatorOptions) { o.Serving.MetricsBindAddress = "0" }},
		"metrics address invalid":        {modify: func(o *OperatorOptions) { o.Serving.MetricsBindAddress = "8080" }, wantFlag: "metrics-bind-address"},
		"health probes cannot be off":    {modify: func(o *OperatorOptions) { o.Serving.HealthProbeBindAddress = "0" }, wantFlag: "health-probe-bind-address"},
		"empty health probe address":     {modify: func(o *OperatorOptions) { o.Serving.HealthProbeBindAddress = "" }, wantFlag: "health-probe-bind-address"},
		"metrics on the probes' address": {modify: func(o *OperatorOptions) { o.Serving.MetricsBindAddress = "0.0.0.0:8081" }, wantFlag: "metrics-bind-address"},
		"probes on the API's address":    {modify: func(o *OperatorOptions) { o.Serving.HealthProbeBindAddress = "127.0.0.1:8443" }, wantFlag: "health-probe-bind-address"},
		"same port on two hosts": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.BindAddress, o.Serving.MetricsBindAddress = "127.0.0.1:9000", "127.0.0.2:9000"
		}},
		"any free port twice": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.BindAddress, o.Serving.MetricsBindAddress, o.Serving.HealthProbeBindAddress = ":0", ":0", ":0"
		}},
		"tls self-signed by default": {modify: func(o *OperatorOptions) {}},
		"tls none":                   {modify: func(o *OperatorOptions) { o.SandboxAPI.TLSMode = TLSModeNone }},
		"tls mode unknown":           {modify: func(o *OperatorOptions) { o.SandboxAPI.TLSMode = "insecure" }, wantFlag: "tls-mode"},
		"tls mode empty":             {modify: func(o *OperatorOptions) { o.SandboxAPI.TLSMode = "" }, wantFlag: "tls-mode"},
		"tls files pair": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.TLSMode, o.SandboxAPI.TLSCertFile, o.SandboxAPI.TLSKeyFile = TLSModeFiles, certFile, keyFile
		}},
		"tls files pair and ca": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.TLSMode, o.SandboxAPI.TLSCertFile, o.SandboxAPI.TLSKeyFile, o.SandboxAPI.TLSCAFile = TLSModeFiles, certFile, keyFile, certFile
		}},
		"tls files without key": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.TLSMode, o.SandboxAPI.TLSCertFile = TLSModeFiles, certFile
		}, wantFlag: "tls-key-file"},
		"tls files without cert": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.TLSMode, o.SandboxAPI.TLSKeyFile = TLSModeFiles, keyFile
		}, wantFlag: "tls-cert-file"},
		"missing tls cert": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.TLSMode, o.SandboxAPI.TLSCertFile, o.SandboxAPI.TLSKeyFile = TLSModeFiles, "/nonexistent.crt", keyFile
		}, wantFlag: "tls-cert-file"},
		"tls key is a directory": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.TLSMode, o.SandboxAPI.TLSCertFile, o.SandboxAPI.TLSKeyFile = TLSModeFiles, certFile, t.TempDir()
		}, wantFlag: "tls-key-file"},
		"missing tls ca": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.TLSMode, o.SandboxAPI.TLSCertFile, o.SandboxAPI.TLSKeyFile, o.SandboxAPI.TLSCAFile = TLSModeFiles, certFile, keyFile, "/nonexistent/ca.crt"
		}, wantFlag: "tls-ca-file"},
		"tls cert without files mode": {modify: func(o *OperatorOptions) { o.SandboxAPI.TLSCertFile = certFile }, wantFlag: "tls-cert-file"},
		"tls ca with mode none": {modify: func(o *OperatorOptions) {
			o.SandboxAPI.TLSMode, o.SandboxAPI.TLSCAFile = TLSModeNone, certFile
		}, wantFlag: "tls-ca-file"},
		"tls sans empty":            {modify: func(o *OperatorOptions) { o.SandboxAPI.TLSSANs = nil }, wantFlag: "tls-sans"},
		"tls sans not a name":       {modify: func(o *OperatorOptions) { o.SandboxAPI.TLSSANs = []string{"Airlock_API"} }, wantFlag: "tls-sans"},
		"tls sans names, IPs":       {modify: func(o *OperatorOptions) { o.SandboxAPI.TLSSANs = []string{"api.example.internal", "10.0.0.7", "::1"} }},
		"tls sans unused, none":     {modify: func(o *OperatorOptions) { o.SandboxAPI.TLSMode, o.SandboxAPI.TLSSANs = TLSModeNone, nil }},
		"token audiences":           {modify: func(o *OperatorOptions) { o.SandboxAPI.TokenAudiences = []string{"airlock", "vault"} }},
		"empty token audience":      {modify: func(o *OperatorOptions) { o.SandboxAPI.TokenAudiences = []string{"airlock", ""} }, wantFlag: "token-audiences"},
		"two empty token audiences": {modify: func(o *OperatorOptions) { o.SandboxAPI.TokenAudiences = []string{"", " "} }, wantFlag: "token-audiences"},
		"zero lease duration": {modify: func(o *OperatorOptions) { o.LeaderElection.LeaseDuration.Duration = 0 },
			wantFlag: "leader-elect-lease-duration"},
		"zero renew deadline": {modify: func(o *OperatorOptions) { o.LeaderElection.RenewDeadline.Duration = 0 },
			wantFlag: "leader-elect-renew-deadline"},
		"negative retry period": {modify: func(o *OperatorOptions) { o.LeaderElection.RetryPeriod.Duration = -time.Second },
			wantFlag: "leader-elect-retry-period"},
		"renew deadline equal to the lease": {modify: func(o *OperatorOptions) { o.LeaderElection.RenewDeadline.Duration = 15 * time.Second },
			wantFlag: "leader-elect-renew-deadline"},
		"renew deadline past the lease": {modify: func(o *OperatorOptions) { o.LeaderElection.LeaseDuration.Duration = 5 * time.Second },
			wantFlag: "leader-elect-renew-deadline"},
		"renew deadline equal to 1.2 retry periods": {modify: func(o *OperatorOptions) {
			o.LeaderElection.RenewDeadline.Duration, o.LeaderElection.RetryPeriod.Duration = 12*time.Second, 10*time.Second
		}, wantFlag: "leader-elect-retry-period"},
		"renew deadline just past 1.2 retry periods": {modify: func(o *OperatorOptions) {
			o.LeaderElection.RenewDeadline.Duration, o.LeaderElection.RetryPeriod.Duration = 12*time.Second+time.Millisecond, 10*time.Second
		}},
		"resource lock endpoints": {modify: func(o *OperatorOptions) { o.LeaderElection.ResourceLock = "endpoints" },
			wantFlag: "leader-elect-resource-lock"},
		"resource lock configmapsleases": {modify: func(o *OperatorOptions) { o.LeaderElection.ResourceLock = "configmapsleases" },
			wantFlag: "leader-elect-resource-lock"},
		"bad lease name": {modify: func(o *OperatorOptions) { o.LeaderElection.ResourceName = "Airlock_Operator" },
			wantFlag: "leader-elect-resource-name"},
		"empty lease name": {modify: func(o *OperatorOptions) { o.LeaderElection.ResourceName = "" },
			wantFlag: "leader-elect-resource-name"},
		"bad lease namespace": {modify: func(o *OperatorOptions) { o.LeaderElection.ResourceNamespace = "airlock.system" },
			wantFlag: "leader-elect-resource-namespace"},
		"lease flags unused without leader election": {modify: func(o *OperatorOptions) {
			o.LeaderElection.LeaderElect = false
			o.LeaderElection.LeaseDuration.Duration = 0
			o.LeaderElection.ResourceLock = "endpoints"
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := newOperatorOptions(func(string) string { return "" })
			tc.modify(o)
			errs := o.Validate()
			if tc.wantFlag == "" {
				if len(errs) != 0 {
					t.Fatalf("valid options rejected: %v", errs)
				}
				return
			}
			checkOneErrorFor(t, errs, tc.wantFlag)
		})
	}
}

// TestLeaderElectionValidationMatchesClientGo checks that the durations Validate accepts are
// exactly those client-go's leader elector accepts.
func TestLeaderElectionValidationMatchesClientGo(t *testing.T) {
	s := time.Second
	tests := []struct{ lease, renew, retry time.Duration }{
		{15 * s, 10 * s, 2 * s},
		{15 * s, 15 * s, 2 * s},
		{15 * s, 16 * s, 2 * s},
		{15 * s, 12 * s, 10 * s},
		{15 * s, 12*s + 1, 10 * s},
		{15 * s, 10 * s, 9 * s},
		{2 * s, s, 500 * time.Millisecond},
		{0, 10 * s, 2 * s},
		{15 * s, 0, 2 * s},
		{15 * s, 10 * s, 0},
		{-s, -2 * s, -3 * s},
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "airlock-system", Name: "airlock-operator"},
		Client:     k8sfake.NewClientset().CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "test"},
	}
	for _, tc := range tests {
		o := newOperatorOptions(func(string) string { return "" })
		o.LeaderElection.LeaseDuration.Duration = tc.lease
		o.LeaderElection.RenewDeadline.Duration = tc.renew
		o.LeaderElection.RetryPeriod.Duration = tc.retry
		errs := o.LeaderElection.Validate()

		_, clientGoErr := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: tc.lease,
			RenewDeadline: tc.renew,
			RetryPeriod:   tc.retry,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {},
				OnStoppedLeading: func() {},
			},
		})
		if (len(errs) == 0) != (clientGoErr == nil) {
			t.Errorf("lease %v, renew %v, retry %v: Validate says %v, client-go says %v", tc.lease, tc.renew, tc.retry, errs, clientGoErr)
		}
		if len(errs) > 0 {
			for _, err := range errs {
				if !strings.HasPrefix(err.Error(), "invalid value for --leader-elect-") {
					t.Errorf("error %q does not name a --leader-elect-* flag", err)
				}
			}
		}
	}
}

func TestSandboxdValidate(t *testing.T) {
	workspace := t.TempDir()
	tokenFile := tempFile(t, "token", "secret")

	tests := map[string]struct {
		modify   func(o *SandboxdOptions)
		wantFlag string
	}{
		"defaults with a workspace":  {},
		"every tool":                 {modify: func(o *SandboxdOptions) { o.AllowedTools = toolnames.All() }},
		"some tools":                 {modify: func(o *SandboxdOptions) { o.AllowedTools = []string{"Read", "Grep", "run_tests"} }},
		"readonly":                   {modify: func(o *SandboxdOptions) { o.ReadOnly = true }},
		"token file":                 {modify: func(o *SandboxdOptions) { o.AuthTokenFile = tokenFile }},
		"bad listen":                 {modify: func(o *SandboxdOptions) { o.Listen = "8080" }, wantFlag: "listen"},
		"missing workspace":          {modify: func(o *SandboxdOptions) { o.Workspace = "/nonexistent/workspace" }, wantFlag: "workspace"},
		"workspace is a file":        {modify: func(o *SandboxdOptions) { o.Workspace = tokenFile }, wantFlag: "workspace"},
		"empty workspace":            {modify: func(o *SandboxdOptions) { o.Workspace = "" }, wantFlag: "workspace"},
		"unknown tool":               {modify: func(o *SandboxdOptions) { o.AllowedTools = []string{"Read", "WebFetch"} }, wantFlag: "allowed-tools"},
		"several unknown tools":      {modify: func(o *SandboxdOptions) { o.AllowedTools = []string{"read", "WebFetch", "Task"} }, wantFlag: "allowed-tools"},
		"empty tool name":            {modify: func(o *SandboxdOptions) { o.AllowedTools = []string{"Read", ""} }, wantFlag: "allowed-tools"},
		"empty tool list":            {modify: func(o *SandboxdOptions) { o.AllowedTools = []string{} }, wantFlag: "allowed-tools"},
		"missing token file":         {modify: func(o *SandboxdOptions) { o.AuthTokenFile = "/nonexistent/token" }, wantFlag: "auth-token-file"},
		"token file is a directory":  {modify: func(o *SandboxdOptions) { o.AuthTokenFile = workspace }, wantFlag: "auth-token-file"},
		"zero shutdown grace":        {modify: func(o *SandboxdOptions) { o.ShutdownGrace = 0 }, wantFlag: "shutdown-grace"},
		"negative shutdown grace":    {modify: func(o *SandboxdOptions) { o.ShutdownGrace = -time.Second }, wantFlag: "shutdown-grace"},
		"state dir beside":           {modify: func(o *SandboxdOptions) { o.StateDir = filepath.Join(filepath.Dir(workspace), "state") }},
		"state dir in the workspace": {modify: func(o *SandboxdOptions) { o.StateDir = filepath.Join(workspace, "state") }, wantFlag: "state-dir"},
		"state dir is the workspace": {modify: func(o *SandboxdOptions) { o.StateDir = workspace + "/." }, wantFlag: "state-dir"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewSandboxdOptions()
			o.Workspace = workspace
			if tc.modify != nil {
				tc.modify(o)
			}
			errs := o.Validate()
			if tc.wantFlag == "" {
				if len(errs) != 0 {
					t.Fatalf("valid options rejected: %v", errs)
				}
				return
			}
			checkOneErrorFor(t, errs, tc.wantFlag)
		})
	}
}

// TestSandboxdWarmKeyFile: --warm-key-file needs a member key and excludes the flags whose job
// the adoption token does; each error names both flags.
func TestSandboxdWarmKeyFile(t *testing.T) {
	workspace := t.TempDir()
	key := warmtoken.EncodeMemberKey(bytes.Repeat([]byte{7}, warmtoken.MemberKeyBytes))
	keyFile := tempFile(t, "key", key+"\n")
	tokenFile := tempFile(t, "token", "secret")
	tests := map[string]struct {
		modify func(o *SandboxdOptions)
		want   []string // one error per entry, each containing it
	}{
		"a key":                  {},
		"with --auth-token-file": {modify: func(o *SandboxdOptions) { o.AuthTokenFile = tokenFile }, want: []string{"excludes --auth-token-file"}},
		"with --allowed-tools":   {modify: func(o *SandboxdOptions) { o.AllowedTools = []string{"Read"} }, want: []string{"excludes --allowed-tools"}},
		"with --readonly":        {modify: func(o *SandboxdOptions) { o.ReadOnly = true }, want: []string{"excludes --readonly"}},
		"with all three": {modify: func(o *SandboxdOptions) {
			o.AuthTokenFile, o.AllowedTools, o.ReadOnly = tokenFile, []string{"Read"}, true
		}, want: []string{"excludes --auth-token-file", "excludes --allowed-tools", "excludes --readonly"}},
		"missing file": {modify: func(o *SandboxdOptions) { o.WarmKeyFile = "/nonexistent/key" }, want: []string{"/nonexistent/key"}},
		"a directory":  {modify: func(o *SandboxdOptions) { o.WarmKeyFile = workspace }, want: []string{workspace}},
		"not a key":    {modify: func(o *SandboxdOptions) { o.WarmKeyFile = tokenFile }, want: []string{"member key"}},
		"empty file":   {modify: func(o *SandboxdOptions) { o.WarmKeyFile = tempFile(t, "empty", "") }, want: []string{"member key is empty"}},
		"a short key":  {modify: func(o *SandboxdOptions) { o.WarmKeyFile = tempFile(t, "short", key[:40]) }, want: []string{"member key"}},
		"padded key":   {modify: func(o *SandboxdOptions) { o.WarmKeyFile = tempFile(t, "padded", key+"=") }, want: []string{"member key"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewSandboxdOptions()
			o.Workspace = workspace
			o.WarmKeyFile = keyFile
			if tc.modify != nil {
				tc.modify(o)
			}
			errs := o.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, want := range tc.want {
				if msg := errs[i].Error(); !strings.HasPrefix(msg, "invalid value for --warm-key-file: ") || !strings.Contains(msg, want) {
					t.Errorf("error %q: want --warm-key-file and %q", msg, want)
				}
			}
		})
	}
	// The key itself never appears in an error.
	o := NewSandboxdOptions()
	o.Workspace = workspace
	o.WarmKeyFile = tempFile(t, "long", key+key)
	if errs := o.Validate(); len(errs) != 1 || strings.Contains(errs[0].Error(), key) {
		t.Errorf("errors %v: want one, without the key", errs)
	}
}

func TestSandboxdUnknownToolsAreNamed(t *testing.T) {
	o := NewSandboxdOptions()
	o.Workspace = t.TempDir()
	o.AllowedTools = []string{"Read", "WebFetch", "Task"}
	errs := o.Validate()
	want := `invalid value for --allowed-tools: unknown tools "WebFetch", "Task" (known: Read, Write, Edit, Glob, Grep, Bash, BashOutput, KillShell, run_tests, run_lint, run_typecheck, MultiEdit, LS, snapshot_create, snapshot_list, snapshot_restore, snapshot_diff, run_failing_tests, last_test_failures, find_definition, find_references, rename_symbol, change_function_signature, edit_function_body, insert_after_method, tests_covering, run_script, search_code)`
	if len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("errors %v, want exactly %q", errs, want)
	}
}

// TestToolNamesAreTheSpecs pins the names --allowed-tools accepts to SPEC section 6 (and the
// v1alpha1.ToolName enum).
func TestToolNamesAreTheSpecs(t *testing.T) {
	want := []string{"Read", "Write", "Edit", "Glob", "Grep", "Bash", "BashOutput", "KillShell", "run_tests", "run_lint", "run_typecheck",
		"MultiEdit", "LS", "snapshot_create", "snapshot_list", "snapshot_restore", "snapshot_diff", "run_failing_tests", "last_test_failures",
		"find_definition", "find_references", "rename_symbol", "change_function_signature", "edit_function_body", "insert_after_method",
		"tests_covering", "run_script", "search_code"}
	if diff := cmp.Diff(want, toolnames.All()); diff != "" {
		t.Errorf("toolnames.All() (-SPEC +got):\n%s", diff)
	}
}

func TestSandboxdConfig(t *testing.T) {
	o := NewSandboxdOptions()
	cmd := newSandboxdCommand(o)
	if err := cmd.ParseFlags([]string{"--listen=127.0.0.1:9090", "--workspace=/ws", "--readonly", "--allowed-tools=Read,Grep", "--auth-token-file=/run/token", "--warm-key-file=/run/warm/key", "--state-dir=/sandbox-cache/state", "--shutdown-grace=3s"}); err != nil {
		t.Fatal(err)
	}
	want := sandboxd.Config{
		Listen:        "127.0.0.1:9090",
		Workspace:     "/ws",
		ReadOnly:      true,
		AllowedTools:  []string{"Read", "Grep"},
		AuthTokenFile: "/run/token",
		WarmKeyFile:   "/run/warm/key",
		StateDir:      "/sandbox-cache/state",
		ShutdownGrace: 3 * time.Second,
	}
	if diff := cmp.Diff(want, o.Config()); diff != "" {
		t.Errorf("Config() (-want +got):\n%s", diff)
	}
	if d := NewSandboxdOptions(); d.Listen != ":8080" || d.Workspace != "/workspace" || d.ShutdownGrace != 10*time.Second || d.ReadOnly || d.AllowedTools != nil || d.AuthTokenFile != "" || d.WarmKeyFile != "" {
		t.Errorf("defaults: %+v", d)
	}
}

func TestSyncValidate(t *testing.T) {
	root := t.TempDir()
	file := tempFile(t, "file", "x")

	tests := map[string]struct {
		modify   func(o *SyncOptions)
		wantFlag string
	}{
		"valid":                             {},
		"missing content root":              {modify: func(o *SyncOptions) { o.ContentRoot = "/nonexistent/content" }, wantFlag: "content-root"},
		"content root is a file":            {modify: func(o *SyncOptions) { o.ContentRoot = file }, wantFlag: "content-root"},
		"empty content root":                {modify: func(o *SyncOptions) { o.ContentRoot = "" }, wantFlag: "content-root"},
		"from missing":                      {modify: func(o *SyncOptions) { o.From = "" }, wantFlag: "from"},
		"from absolute":                     {modify: func(o *SyncOptions) { o.From = "/content/ns/ws" }, wantFlag: "from"},
		"from with ..":                      {modify: func(o *SyncOptions) { o.From = "ns/../../etc" }, wantFlag: "from"},
		"from unclean":                      {modify: func(o *SyncOptions) { o.From = "ns/./ws" }, wantFlag: "from"},
		"from is the root":                  {modify: func(o *SyncOptions) { o.From = "." }, wantFlag: "from"},
		"to missing":                        {modify: func(o *SyncOptions) { o.To = "" }, wantFlag: "to"},
		"to absolute":                       {modify: func(o *SyncOptions) { o.To = "/etc" }, wantFlag: "to"},
		"to with ..":                        {modify: func(o *SyncOptions) { o.To = ".." }, wantFlag: "to"},
		"to with a trailing slash":          {modify: func(o *SyncOptions) { o.To = "ns/projects/" }, wantFlag: "to"},
		"to is from":                        {modify: func(o *SyncOptions) { o.To = o.From }, wantFlag: "to"},
		"to inside from":                    {modify: func(o *SyncOptions) { o.To = o.From + "/out" }, wantFlag: "to"},
		"from inside to":                    {modify: func(o *SyncOptions) { o.To = "ns" }, wantFlag: "to"},
		"to a sibling with a common prefix": {modify: func(o *SyncOptions) { o.To = o.From + "-copy" }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewSyncOptions()
			o.ContentRoot, o.From, o.To = root, "ns/sandboxes/c1", "ns/projects/web"
			if tc.modify != nil {
				tc.modify(o)
			}
			errs := o.Validate()
			if tc.wantFlag == "" {
				if len(errs) != 0 {
					t.Fatalf("valid options rejected: %v", errs)
				}
				return
			}
			checkOneErrorFor(t, errs, tc.wantFlag)
		})
	}
	if d := NewSyncOptions(); d.ContentRoot != "/content" || d.From != "" || d.To != "" || d.RemoveSource || d.RemoveOnly || d.SandboxesDir != "" {
		t.Errorf("defaults: %+v", d)
	}
}

// TestSyncValidateRemoval: --remove-source and --remove-only remove only a workspace of
// --sandboxes-dir (<ns>/sandboxes/<name> or <ns>/sandboxes/sessions/<name>), and say so.
func TestSyncValidateRemoval(t *testing.T) {
	root := t.TempDir()
	removeSource := func(o *SyncOptions) { o.RemoveSource, o.SandboxesDir = true, "ns/sandboxes" }
	removeOnly := func(o *SyncOptions) { o.RemoveOnly, o.SandboxesDir, o.To = true, "ns/sandboxes", "" }
	tests := map[string]struct {
		modify   func(o *SyncOptions)
		wantFlag string
	}{
		"remove-source":                       {modify: removeSource},
		"remove-only":                         {modify: removeOnly},
		"remove-only, a session's workspace":  {modify: func(o *SyncOptions) { removeOnly(o); o.From = "ns/sandboxes/sessions/ab12" }},
		"remove-source without sandboxes-dir": {modify: func(o *SyncOptions) { removeSource(o); o.SandboxesDir = "" }, wantFlag: "sandboxes-dir"},
		"remove-only without sandboxes-dir":   {modify: func(o *SyncOptions) { removeOnly(o); o.SandboxesDir = "" }, wantFlag: "sandboxes-dir"},
		"sandboxes-dir without a removal":     {modify: func(o *SyncOptions) { o.SandboxesDir = "ns/sandboxes" }, wantFlag: "sandboxes-dir"},
		"sandboxes-dir not .../sandboxes":     {modify: func(o *SyncOptions) { removeSource(o); o.SandboxesDir = "ns" }, wantFlag: "sandboxes-dir"},
		"sandboxes-dir absolute":              {modify: func(o *SyncOptions) { removeSource(o); o.SandboxesDir = "/ns/sandboxes" }, wantFlag: "sandboxes-dir"},
		"from outside sandboxes-dir":          {modify: func(o *SyncOptions) { removeOnly(o); o.From = "ns/projects/web" }, wantFlag: "from"},
		"from in another namespace":           {modify: func(o *SyncOptions) { removeSource(o); o.From = "other/sandboxes/c1" }, wantFlag: "from"},
		"from is sandboxes-dir":               {modify: func(o *SyncOptions) { removeOnly(o); o.From = "ns/sandboxes" }, wantFlag: "from"},
		"from is the sessions directory":      {modify: func(o *SyncOptions) { removeOnly(o); o.From = "ns/sandboxes/sessions" }, wantFlag: "from"},
		"from inside a workspace":             {modify: func(o *SyncOptions) { removeOnly(o); o.From = "ns/sandboxes/c1/src" }, wantFlag: "from"},
		"remove-only with to":                 {modify: func(o *SyncOptions) { removeOnly(o); o.To = "ns/projects/web" }, wantFlag: "to"},
		"remove-only and remove-source":       {modify: func(o *SyncOptions) { removeOnly(o); o.RemoveSource = true }, wantFlag: "remove-only"},
		"remove-source without to":            {modify: func(o *SyncOptions) { removeSource(o); o.To = "" }, wantFlag: "to"},
		"keep 12 versions":                    {modify: func(o *SyncOptions) { o.KeepVersions = 12 }},
		"keep no version":                     {modify: func(o *SyncOptions) { o.KeepVersions = 0 }, wantFlag: "keep-versions"},
		"keep too many versions":              {modify: func(o *SyncOptions) { o.KeepVersions = 1001 }, wantFlag: "keep-versions"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewSyncOptions()
			o.ContentRoot, o.From, o.To = root, "ns/sandboxes/c1", "ns/projects/web"
			tc.modify(o)
			errs := o.Validate()
			if tc.wantFlag == "" {
				if len(errs) != 0 {
					t.Fatalf("valid options rejected: %v", errs)
				}
				return
			}
			checkOneErrorFor(t, errs, tc.wantFlag)
		})
	}
}

// TestSandboxdEmptyAllowedToolsFlag: `--allowed-tools=` on the command line names no tool and is
// refused; it never reads as "every tool", which is what omitting the flag means.
func TestSandboxdEmptyAllowedToolsFlag(t *testing.T) {
	o := NewSandboxdOptions()
	o.Workspace = t.TempDir()
	cmd := newSandboxdCommand(o)
	if err := cmd.ParseFlags([]string{"--allowed-tools="}); err != nil {
		t.Fatal(err)
	}
	checkOneErrorFor(t, o.Validate(), "allowed-tools")
}

// TestOperatorConfigClients: the controllers, the events, the Sandbox API's TokenReviews and the
// lease each get a client with a rate limiter of its own, so that none queues behind another's
// requests; the event and review clients have the controllers' QPS and burst.
func TestOperatorConfigClients(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := newOperatorOptions(func(string) string { return "" })
	o.KubeClient.Kubeconfig = kubeconfig
	o.KubeClient.QPS, o.KubeClient.Burst = 7, 9
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	kube := cfg.KubeClient.CoreV1().RESTClient().GetRateLimiter()
	events := cfg.EventClient.CoreV1().RESTClient().GetRateLimiter()
	reviews := cfg.ReviewClient.AuthenticationV1().RESTClient().GetRateLimiter()
	lease := cfg.LeaderElectionClient.CoreV1().RESTClient().GetRateLimiter()
	limiters := map[string]any{"kube": kube, "events": events, "reviews": reviews, "lease": lease}
	for a, la := range limiters {
		for b, lb := range limiters {
			if a < b && la == lb {
				t.Errorf("the %s and %s clients share a rate limiter", a, b)
			}
		}
	}
	if kube.QPS() != 7 || events.QPS() != 7 || reviews.QPS() != 7 {
		t.Errorf("QPS kube %v events %v reviews %v, want --kube-api-qps for each", kube.QPS(), events.QPS(), reviews.QPS())
	}
}

// TestDisabledBindAddressIsTheOperators checks that validateBindAddress,
// which the sandbox images' build has without the operator package, accepts
// the operator's own "disabled" address.
func TestDisabledBindAddressIsTheOperators(t *testing.T) {
	if disabledBindAddress != operator.DisabledBindAddress {
		t.Errorf("disabledBindAddress %q, operator.DisabledBindAddress %q", disabledBindAddress, operator.DisabledBindAddress)
	}
}

// TestEgressCAConfig: --manage-egress-ca gives the controller the bundle's name and the roots of
// --egress-ca-roots-file (a file that holds no certificate is an error naming the flag); without
// the flag, nothing is kept.
func TestEgressCAConfig(t *testing.T) {
	dir := t.TempDir()
	roots := filepath.Join(dir, "roots.pem")
	ca, err := newTestRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(roots, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	o := ControllerOptions{EgressGatewayService: "a/b:3128", EgressCABundleConfigMap: "airlock-egress-ca"}
	if cfg, err := o.egressCA(); err != nil || cfg != nil {
		t.Fatalf("without --manage-egress-ca: %+v, %v", cfg, err)
	}
	o.ManageEgressCA, o.EgressCARootsFile = true, roots
	cfg, err := o.egressCA()
	if err != nil || cfg.ConfigMapName != "airlock-egress-ca" || string(cfg.Roots) != string(ca) || cfg.Policy.Validate() != nil {
		t.Fatalf("with roots: %+v, %v", cfg, err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.EgressCARootsFile = notPEM
	_, err = o.egressCA()
	checkOneErrorFor(t, []error{err}, "egress-ca-roots-file")
}

func newTestRoot() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
