//go:build e2e && realnode

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// egressTechnique is one row of the bypass suite: what the probe in the sandbox tries (the
// fields of runtimeclient's Technique) and what must come of it.
type egressTechnique struct {
	Name      string           `json:"name"`
	Kind      string           `json:"kind,omitempty"`
	Auth      string           `json:"auth,omitempty"`
	Request   string           `json:"request,omitempty"`
	Responses int              `json:"responses,omitempty"`
	TLS       *egressTLSStep   `json:"tls,omitempty"`
	Raw       string           `json:"raw,omitempty"`
	Address   string           `json:"address,omitempty"`
	DNSName   string           `json:"dnsName,omitempty"`
	want      string           // the outcome, as egressOutcome writes it
	allowed   bool             // an allowed case (else a bypass that must fail)
	proof     string           // what stops it, for the table
	control   *egressTechnique // the same target from a pod without NetworkPolicy must answer
}

type egressTLSStep struct {
	ServerName string               `json:"serverName"`
	Requests   []egressInnerRequest `json:"requests,omitempty"`
}

type egressInnerRequest struct {
	Method string            `json:"method"`
	Host   string            `json:"host"`
	Path   string            `json:"path"`
	Header map[string]string `json:"header,omitempty"`
}

// egressProbeResult is runtimeclient's ProbeResult.
type egressProbeResult struct {
	Name     string   `json:"name"`
	Statuses []int    `json:"statuses"`
	Reasons  []string `json:"reasons"`
	TLS      string   `json:"tls"`
	Inner    []struct {
		Status int    `json:"status"`
		Reason string `json:"reason"`
		Body   string `json:"body"`
		Err    string `json:"err"`
	} `json:"inner"`
	Outcome string `json:"outcome"`
	Err     string `json:"err"`
}

// egressOutcome writes a result as the table compares it: the gateway's answers ("403
// host_not_allowed"), then the tunnel ("tls ok", "closed") and the answers in it, joined by ", ";
// a direct attempt's OPEN / BLOCKED / ANSWERED / NO ANSWER.
func egressOutcome(r egressProbeResult) string {
	if r.Err != "" {
		return "error: " + r.Err
	}
	if r.Outcome != "" && len(r.Statuses) == 0 {
		return r.Outcome
	}
	var parts []string
	for i, s := range r.Statuses {
		p := fmt.Sprint(s)
		if i < len(r.Reasons) && r.Reasons[i] != "" {
			p += " " + r.Reasons[i]
		}
		parts = append(parts, p)
	}
	if len(r.Reasons) > len(r.Statuses) {
		parts = append(parts, r.Reasons[len(r.Statuses):]...)
	}
	switch {
	case r.TLS == "ok":
		parts = append(parts, "tls ok")
	case r.TLS != "":
		parts = append(parts, "closed")
	case strings.HasPrefix(r.Outcome, "closed"):
		parts = append(parts, "closed")
	case r.Outcome != "":
		parts = append(parts, r.Outcome)
	}
	for _, in := range r.Inner {
		switch {
		case in.Err != "":
			parts = append(parts, "closed")
		case in.Reason != "":
			parts = append(parts, fmt.Sprintf("%d %s", in.Status, in.Reason))
		default:
			parts = append(parts, fmt.Sprintf("%d %s", in.Status, in.Body))
		}
	}
	return strings.Join(parts, ", ")
}

func connectReq(authority string) string {
	return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n{AUTH}\r\n"
}

func httpReq(target, host string, extra ...string) string {
	return "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + strings.Join(extra, "") + "{AUTH}\r\n"
}

func tunnelTo(sni string, reqs ...egressInnerRequest) *egressTLSStep {
	return &egressTLSStep{ServerName: sni, Requests: reqs}
}

func get(host, p string) egressInnerRequest {
	return egressInnerRequest{Method: "GET", Host: host, Path: p}
}

// egressTechniques is the published bypass suite (docs/egress.md, "The real-node bypass suite"),
// with the allowed cases the gateway must let through. other is claim B's credential
// (user:password), gatewayPodIP one of the gateway's pods, dnsIP kube-dns's cluster IP.
func egressTechniques(f *egressFixture, own, other, gatewayPodIP, dnsIP string) []egressTechnique {
	ownUser, _, _ := strings.Cut(own, ":")
	ext443, ext80 := net.JoinHostPort(internetAddress, "443"), net.JoinHostPort(internetAddress, "80")
	internetPod := net.JoinHostPort(f.internetIP, "8443")
	resolver := net.JoinHostPort(f.resolverIP, "53")
	kubeDNS := net.JoinHostPort(dnsIP, "53")
	api := net.JoinHostPort(f.apiServerIP, "443")
	np := "NetworkPolicy (the sandbox reaches only the gateway's proxy port)"
	tcp := func(addr string) *egressTechnique { return &egressTechnique{Kind: "tcp", Address: addr, want: "OPEN"} }
	dns := func(addr, name string) *egressTechnique {
		return &egressTechnique{Kind: "dns", Address: addr, DNSName: name, want: "ANSWERED"}
	}
	okAllowed := "200, tls ok, 200 ok allowed.internet.test /"
	return []egressTechnique{
		// Allowed.
		{Name: "allowed: CONNECT and TLS to an allowed name", Request: connectReq("allowed.internet.test:443"),
			TLS: tunnelTo("allowed.internet.test", get("allowed.internet.test", "/")), want: okAllowed, allowed: true, proof: "passthrough, the sandbox verifies the server"},
		{Name: "allowed: plain HTTP GET of an allowed name", Request: httpReq("http://plain.internet.test/", "plain.internet.test"), want: "200", allowed: true},
		{Name: "allowed: upper case and a trailing dot name the same host", Request: connectReq("ALLOWED.Internet.Test.:443"),
			TLS: tunnelTo("allowed.internet.test", get("allowed.internet.test", "/")), want: okAllowed, allowed: true, proof: "names normalised before matching"},
		{Name: "allowed: a credentialed host, GET in its prefix (the sandbox's own Authorization replaced)", Request: connectReq("creds.internet.test:443"),
			TLS:  tunnelTo("creds.internet.test", egressInnerRequest{Method: "GET", Host: "creds.internet.test", Path: "/allowed/x", Header: map[string]string{"Authorization": "Bearer the-sandbox-s-own"}}),
			want: "200, tls ok, 200 auth=ok GET /allowed/x", allowed: true, proof: "terminated with the gateway's CA, the credential injected"},
		// Around the gateway.
		{Name: "direct connection to the internet's address, bypassing the gateway", Kind: "tcp", Address: ext443, want: "BLOCKED", proof: np, control: tcp(ext443)},
		{Name: "direct plain HTTP to the internet's address", Kind: "tcp", Address: ext80, want: "BLOCKED", proof: np, control: tcp(ext80)},
		{Name: "direct connection to the internet's pod", Kind: "tcp", Address: internetPod, want: "BLOCKED", proof: np, control: tcp(internetPod)},
		{Name: "the API server directly (kubernetes Service)", Kind: "tcp", Address: api, want: "BLOCKED", proof: np, control: tcp(api)},
		{Name: "DNS to kube-dns", Kind: "dns", Address: kubeDNS, DNSName: "kubernetes.default.svc.cluster.local", want: "NO ANSWER",
			proof: "NetworkPolicy (a sandbox with egress still gets no DNS)", control: dns(kubeDNS, "kubernetes.default.svc.cluster.local")},
		{Name: "DNS to an outside resolver (the test resolver)", Kind: "dns", Address: resolver, DNSName: "allowed.internet.test", want: "NO ANSWER",
			proof: "NetworkPolicy", control: dns(resolver, "allowed.internet.test")},
		{Name: "the gateway's metrics port, directly", Kind: "tcp", Address: net.JoinHostPort(gatewayPodIP, "8080"), want: "BLOCKED",
			proof: "NetworkPolicy (the sandbox's opens only the proxy port; the gateway's admits metrics from monitoring only)"},
		{Name: "the gateway's health port, directly", Kind: "tcp", Address: net.JoinHostPort(gatewayPodIP, "8081"), want: "BLOCKED", proof: "NetworkPolicy"},
		// Who is asking.
		{Name: "no credential", Auth: "none", Request: connectReq("allowed.internet.test:443"), want: "407 no_credential"},
		{Name: "this claim's name with a wrong password", Auth: ownUser + ":not-the-credential", Request: connectReq("allowed.internet.test:443"), want: "407 bad_credential"},
		{Name: "another claim's proxy credential from this pod", Auth: other, Request: connectReq("allowed.internet.test:443"), want: "407 wrong_source"},
		// Names.
		{Name: "a name no rule lists", Request: connectReq("unlisted.internet.test:443"), want: "403 host_not_allowed"},
		{Name: "DNS-tunnel subdomain of an allowed name", Request: connectReq("c2VjcmV0.allowed.internet.test:443"), want: "403 host_not_allowed", proof: "never resolved (the resolver's log)"},
		{Name: "allowed.evil: an allowed name as a prefix", Request: connectReq("allowed.internet.test.evil.test:443"), want: "403 host_not_allowed"},
		{Name: "an allowed name as a suffix without a dot", Request: connectReq("notallowed.internet.test:443"), want: "403 host_not_allowed"},
		{Name: "IDN homograph (Cyrillic а in allowed)", Request: connectReq("\u0430llowed.internet.test:443"), want: "403 host_not_allowed"},
		{Name: "two trailing dots", Request: connectReq("allowed.internet.test..:443"), want: "400 invalid_host"},
		{Name: "userinfo in CONNECT (allowed@evil)", Request: connectReq("allowed.internet.test@evil.test:443"), want: "400 userinfo"},
		{Name: "userinfo in an absolute URI (allowed@evil)", Request: httpReq("http://plain.internet.test@evil.test/", "evil.test"), want: "400 userinfo"},
		// Addresses.
		{Name: "CONNECT to an IPv4 literal (the internet's address)", Request: connectReq(ext443), want: "403 ip_literal"},
		{Name: "CONNECT to an IPv6 literal", Request: connectReq("[2001:4860:4860::8888]:443"), want: "403 ip_literal"},
		{Name: "CONNECT to a decimal IPv4 (184549386)", Request: connectReq("184549386:443"), want: "400 invalid_host"},
		{Name: "the gateway's own metrics port, through it by address", Request: connectReq(net.JoinHostPort(gatewayPodIP, "8080")), want: "403 ip_literal"},
		{Name: "the gateway's own metrics port, through it by localhost", Request: connectReq("localhost:8080"), want: "403 host_not_allowed"},
		{Name: "an allowed name resolving to 127.0.0.1", Request: connectReq("loopback.internet.test:443"), want: "403 local_address"},
		{Name: "an allowed name resolving to 10.1.2.3", Request: connectReq("private.internet.test:443"), want: "403 private_address"},
		{Name: "an allowed name resolving to 169.254.169.254 (metadata)", Request: connectReq("metadata.internet.test:443"), want: "403 local_address"},
		{Name: "plain HTTP to the metadata address through an allowed name", Request: httpReq("http://metadata.internet.test/latest/meta-data/", "metadata.internet.test"), want: "403 local_address"},
		{Name: "an allowed name resolving to the API server's ClusterIP", Request: connectReq("apiserver.internet.test:443"), want: "403 cluster_address"},
		{Name: "an answer that mixes the internet's address and loopback", Request: connectReq("mixed.internet.test:443"), want: "403 local_address"},
		// Ports and schemes.
		{Name: "a disallowed port of an allowed name", Request: connectReq("allowed.internet.test:8443"), want: "403 port_not_allowed"},
		{Name: "plain HTTP on a disallowed port", Request: httpReq("http://plain.internet.test:8080/", "plain.internet.test:8080"), want: "403 port_not_allowed"},
		{Name: "an https:// absolute URI", Request: httpReq("https://allowed.internet.test/", "allowed.internet.test"), want: "403 scheme"},
		// What goes through.
		{Name: "SNI other than the CONNECT host", Request: connectReq("allowed.internet.test:443"), TLS: tunnelTo("unlisted.internet.test"), want: "200, closed", proof: "sni_mismatch (audit line)"},
		{Name: "no SNI in the ClientHello", Request: connectReq("allowed.internet.test:443"), TLS: tunnelTo(""), want: "200, closed", proof: "sni_mismatch (audit line)"},
		{Name: "plain text in a CONNECT tunnel", Request: connectReq("allowed.internet.test:443"), Raw: "GET / HTTP/1.1\r\nHost: unlisted.internet.test\r\n\r\n", want: "200, closed", proof: "not_tls (audit line)"},
		{Name: "a CONNECT Host header naming another host", Request: "CONNECT allowed.internet.test:443 HTTP/1.1\r\nHost: unlisted.internet.test:443\r\n{AUTH}\r\n", want: "400 host_mismatch"},
		{Name: "Host other than the target (plain HTTP)", Request: httpReq("http://plain.internet.test/", "unlisted.internet.test"), want: "400 host_mismatch"},
		{Name: "absolute-URI smuggling: a target not allowed behind an allowed Host", Request: httpReq("http://unlisted.internet.test/", "plain.internet.test"), want: "400 host_mismatch"},
		{Name: "a WebSocket upgrade to a disallowed host", Request: httpReq("http://unlisted.internet.test/", "unlisted.internet.test", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"), want: "403 host_not_allowed"},
		{Name: "a plain WebSocket upgrade to an allowed host", Request: httpReq("http://plain.internet.test/", "plain.internet.test", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"), want: "403 upgrade"},
		{Name: "request pipelining after an allowed request", Responses: 2,
			Request: httpReq("http://plain.internet.test/", "plain.internet.test") + httpReq("http://unlisted.internet.test/", "unlisted.internet.test"),
			want:    "200, 403 host_not_allowed"},
		// A credentialed host.
		{Name: "a credentialed host with a method it does not allow (POST)", Request: connectReq("creds.internet.test:443"),
			TLS: tunnelTo("creds.internet.test", egressInnerRequest{Method: "POST", Host: "creds.internet.test", Path: "/allowed/x"}), want: "200, tls ok, 403 method_or_path"},
		{Name: "a credentialed host with a path outside its prefix", Request: connectReq("creds.internet.test:443"),
			TLS: tunnelTo("creds.internet.test", get("creds.internet.test", "/admin")), want: "200, tls ok, 403 method_or_path"},
		{Name: "a credentialed host with a dot segment out of its prefix", Request: connectReq("creds.internet.test:443"),
			TLS: tunnelTo("creds.internet.test", get("creds.internet.test", "/allowed/../admin")), want: "200, tls ok, 403 method_or_path"},
		{Name: "a credentialed host, then another Host in its tunnel", Request: connectReq("creds.internet.test:443"),
			TLS:  tunnelTo("creds.internet.test", get("creds.internet.test", "/allowed/x"), get("unlisted.internet.test", "/allowed/x")),
			want: "200, tls ok, 200 auth=ok GET /allowed/x, 400 host_mismatch"},
		{Name: "a credentialed host over plain HTTP", Request: httpReq("http://creds.internet.test:443/allowed/x", "creds.internet.test:443"), want: "403 credential_needs_tls"},
	}
}

// TestRealNodeEgress (issue 25, item 7): the published bypass suite, run on the real node from
// inside a sandbox of a class with egress, through the gateway the Helm release installs
// (NetworkPolicy enforced). A stand-in internet inside the node (HTTPS and HTTP for test names,
// a test Go module proxy, a git server behind a TLS front, signed by a test CA the gateway trusts
// for upstreams) and a test resolver the gateway is pointed at (--dns-server) play the outside
// world. Every technique must be refused as its row says, and the allowed cases work: the probe's
// allowed rows, `go mod download` through the test module proxy, `git clone` and a credentialed
// `git push` to the test git server over HTTPS. Also: the resolver was never asked a name the
// policy does not allow; the gateway's audit lines name the refusals after 200; the injected
// credential is in neither the sandbox's pod spec nor its environment; and the gateway's
// monitored metrics are served to the monitoring namespace.
//
// Then the same suite again with the class under RuntimeClass gvisor (issue 38 item 2: the
// gateway's bypass suite from inside gVisor's own network stack), the class needing a kernel of
// its own, on the same gateway and stand-in internet.
func TestRealNodeEgress(t *testing.T) {
	requireRealNode(t)
	f := setUpEgress(t)
	runEgressSuite(t, f, "")
	t.Run("gVisor", func(t *testing.T) { runEgressSuite(t, f, "gvisor") })
}

// runEgressSuite is TestRealNodeEgress's suite in a namespace of its own, its class under
// runtimeClass (none: the node's default, runc; else with isolation.kernel Dedicated).
func runEgressSuite(t *testing.T, f *egressFixture, runtimeClass string) {
	ctx := context.Background()
	e := newEgressEnv(t, f, runtimeClass)
	const handle = "online/default"
	claimA := claimname.For("agent", "probe", handle)

	// The probe: this suite's runtimeclient, copied into claim A's workspace before it exists.
	workspaceA := e.claimWorkspace(t, claimA)
	e.mkdirContent(t, workspaceA)
	copier := restrictedPod("copy-probe", map[string]string{"app": "copier"}, realnodeClientImage(),
		[]string{"copyself", "-to", path.Join("/content", workspaceA, "egressprobe")})
	copier.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "content", MountPath: "/content"}}
	copier.Spec.Volumes = []corev1.Volume{{Name: "content", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-content"}}}}
	if phase, logs, err := runPodToEnd(ctx, e.ns, copier, 2*time.Minute); err != nil || phase != corev1.PodSucceeded {
		t.Fatalf("copying the probe into the workspace: %s %v\n%s", phase, err, logs)
	}

	// Claim B: another sandbox of the class, left Bound; its credential is tried from A's pod.
	var resB rnSession
	e.runClient(t, "runtime-other", "session", map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "other", "handle": handle}, 5*time.Minute, &resB)
	if resB.Error != "" || resB.Phase != "Bound" {
		t.Fatalf("claim B: %s %s", resB.Phase, resB.Error)
	}
	other := e.ns + "." + resB.Claim + ":" + proxyCredential(t, e.ns, resB.Claim)
	// Its CA bundle is the operator's: nothing of the suite's but the public roots it gave.
	checkEgressBundle(t, f, e.ns, resB.Claim)

	dnsIP := serviceIP(t, "kube-system", "kube-dns")
	gatewayPodIP := f.gatewayPods[0].Status.PodIP
	// Own: the probe reads its own credential from HTTPS_PROXY; the name is needed for a wrong password.
	techniques := egressTechniques(f, e.ns+"."+claimA+":", other, gatewayPodIP, dnsIP)
	controls := runEgressControls(t, e, techniques)

	plan, err := json.Marshal(map[string]any{"techniques": techniques})
	if err != nil {
		t.Fatal(err)
	}
	goMod := `export PATH=/usr/local/go/bin:$PATH GOPROXY=https://goproxy.internet.test GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPATH=/cache/home/go
cd /tmp && go mod download -json example.test/hello@v1.0.0 >/tmp/dl.json 2>&1; echo "exit=$?"; cat /tmp/dl.json | grep -E '"(Version|Error)"'; cat /cache/home/go/pkg/mod/example.test/hello@v1.0.0/hello.go | grep -o 'hello from the stand-in internet'`
	gitClone := `export GIT_TERMINAL_PROMPT=0 HOME=/cache/home; cd /tmp && rm -rf repo && git clone -q https://git.internet.test/repo.git repo 2>&1; echo "exit=$?"; cat repo/README`
	gitPush := `export GIT_TERMINAL_PROMPT=0 HOME=/cache/home; cd /tmp/repo && echo pushed-from-the-sandbox >> PUSHED && git add PUSHED && git -c user.email=agent@e2e -c user.name=agent commit -qm push && git push -q origin HEAD:main 2>&1; echo "exit=$?"; cd /tmp && rm -rf again && git clone -q https://git.internet.test/repo.git again 2>&1 && cat again/PUSHED`
	steps := []map[string]any{
		step("plan", "Write", map[string]any{"file_path": "egress-plan.json", "content": string(plan)}),
		step("probe", "Bash", map[string]any{"command": `./egressprobe egressprobe -plan "$(cat egress-plan.json)"`, "timeout": 600000}),
		step("gomod", "Bash", map[string]any{"command": goMod, "timeout": 300000}),
		step("clone", "Bash", map[string]any{"command": gitClone, "timeout": 300000}),
		step("push", "Bash", map[string]any{"command": gitPush, "timeout": 300000}),
		step("env", "Bash", map[string]any{"command": `env; echo ---; tr '\0' '\n' </proc/1/environ`}),
	}
	var res rnSession
	e.runClient(t, "runtime-probe", "session", map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "probe", "handle": handle, "steps": steps}, 15*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" || res.Claim != claimA {
		t.Fatalf("claim A: %s %s %s (want %s)", res.Claim, res.Phase, res.Error, claimA)
	}
	results := probeResults(t, res.call(t, "probe"))
	checkEgressTable(t, techniques, results, controls)

	// The allowed toolchains.
	for _, tc := range []struct{ step, want string }{
		{"gomod", "exit=0\n\t\"Version\": \"v1.0.0\",\nhello from the stand-in internet"},
		{"clone", "exit=0\nhello from the stand-in git server"},
		{"push", "exit=0\npushed-from-the-sandbox"},
	} {
		c := res.call(t, tc.step)
		t.Logf("%s: %q", tc.step, c.Text)
		if c.Err != "" || c.IsError || !strings.Contains(c.Text, tc.want) {
			t.Errorf("%s through the gateway: err %q isError %v: %q, want %q in it", tc.step, c.Err, c.IsError, c.Text, tc.want)
		}
	}
	checkDenialEvents(t, f, e.ns, claimA)
	checkNoCredentialInSandbox(t, e.ns, claimA, f.credential, res.call(t, "env").Text)
	checkResolverLog(t, f)
	checkEgressAudit(t, f, e.ns+"/"+claimA)
	checkEgressMetrics(t, f)
	checkEgressRecord(t, f, e.ns, claimA)
	if runtimeClass == "" {
		checkWarmEgress(t, f, e, handle, gitClone)
	}
}

// checkWarmEgress (docs/egress.md, "Warm members of a class with egress"): with one warm member
// kept for the class, a session adopts it, and the member's own credential (HTTPS_PROXY names
// <ns>.~<member>, its password from the member's key Secret) takes it through the gateway as the
// adopting claim: the clone of the credential host works, and the gateway's audit lines of that
// claim say allowed.
func checkWarmEgress(t *testing.T, f *egressFixture, e *realnodeEnv, handle, gitClone string) {
	t.Helper()
	ctx := context.Background()
	reg, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg.Spec.Sandboxes[0].Warm = 1
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Update(ctx, reg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ce := &claimEnv{ns: e.ns, runtime: &airlockv1alpha1.AgentRuntime{Spec: airlockv1alpha1.AgentRuntimeSpec{ToolRegistryRef: airlockv1alpha1.LocalObjectReference{Name: "tools"}}}}
	var member string
	for name := range ce.waitWarm(t, 1, 5*time.Minute) {
		member = name
	}
	steps := []map[string]any{
		step("clone", "Bash", map[string]any{"command": gitClone, "timeout": 300000}),
		step("env", "Bash", map[string]any{"command": `env | grep -i '^https_proxy='`}),
	}
	var res rnSession
	e.runClient(t, "runtime-warm", "session", map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "warm", "handle": handle, "steps": steps}, 5*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("warm claim: %s %s", res.Phase, res.Error)
	}
	claim, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, res.Claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Warm == nil || claim.Status.Warm.Member != member {
		// Why not: the member's pool key against the claim's record's, its evidence, and what the
		// operator logged (its pods are replaced when the suite ends).
		if m, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, member, metav1.GetOptions{}); err != nil {
			t.Logf("member %s: %v", member, err)
		} else {
			t.Logf("member %s: labels %v, evidence annotation %d bytes, deleting %v; the claim's record's pool key %s; claim reason %q: %s",
				member, m.Labels, len(m.Annotations[airlockv1alpha1.AnnotationIsolationEvidence]), m.DeletionTimestamp != nil,
				sandboxpod.PoolKey(reg.UID, reg.Spec.Sandboxes[0].Name, claim.Status.Frozen), claim.Status.Reason, claim.Status.Message)
		}
		logOperatorLines(t, e.ns, 100)
		t.Fatalf("claim %s warm %+v, want the member %s adopted", res.Claim, claim.Status.Warm, member)
	}
	if env := res.call(t, "env").Text; !strings.Contains(env, "HTTPS_PROXY=http://"+e.ns+".~"+member+":") {
		t.Errorf("the adopted member's proxy variables %q, want its own member username", env)
	}
	if c := res.call(t, "clone"); c.Err != "" || c.IsError || !strings.Contains(c.Text, "exit=0\nhello from the stand-in git server") {
		t.Errorf("clone through the gateway from the adopted member: err %q isError %v: %q", c.Err, c.IsError, c.Text)
	}
	var allowed int
	for _, p := range f.gatewayPods {
		logs, err := kubeClient.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(logs), "\n") {
			if strings.Contains(line, `"Egress"`) && strings.Contains(line, `claim="`+e.ns+"/"+res.Claim+`"`) && strings.Contains(line, ` reason="allowed"`) {
				allowed++
			}
		}
	}
	if allowed == 0 {
		t.Errorf("no audit line of the warm claim %s/%s allowed", e.ns, res.Claim)
	}
}

// proxyCredential is the claim's proxy credential, read (as the test's admin) from the token
// Secret its pod's environment refers to.
func proxyCredential(t *testing.T, ns, claim string) string {
	t.Helper()
	ctx := context.Background()
	pod, err := kubeClient.CoreV1().Pods(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pod.Spec.Containers {
		for _, env := range c.Env {
			if env.Name == "AIRLOCK_EGRESS_CREDENTIAL" && env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil {
				s, err := kubeClient.CoreV1().Secrets(ns).Get(ctx, env.ValueFrom.SecretKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return string(s.Data[env.ValueFrom.SecretKeyRef.Key])
			}
		}
	}
	t.Fatalf("pod %s/%s has no AIRLOCK_EGRESS_CREDENTIAL from a Secret", ns, claim)
	return ""
}

// runEgressControls runs the probe in a pod of the sandboxes' namespace that no NetworkPolicy
// selects, for the techniques that have a control: their targets must answer there, so that
// BLOCKED in the sandbox means the policy, not a dead target.
func runEgressControls(t *testing.T, e *realnodeEnv, techniques []egressTechnique) map[string]string {
	t.Helper()
	var list []egressTechnique
	for _, tc := range techniques {
		if tc.control != nil {
			c := *tc.control
			c.Name = tc.Name
			list = append(list, c)
		}
	}
	plan, err := json.Marshal(map[string]any{"techniques": list})
	if err != nil {
		t.Fatal(err)
	}
	pod := restrictedPod("egress-controls", map[string]string{"app": "controls"}, realnodeClientImage(), []string{"egressprobe", "-plan", string(plan)})
	phase, logs, err := runPodToEnd(context.Background(), e.ns, pod, 3*time.Minute)
	if err != nil || phase != corev1.PodSucceeded {
		t.Fatalf("controls: %s %v\n%s", phase, err, logs)
	}
	out := map[string]string{}
	for _, r := range parseProbeLine(t, string(logs)) {
		out[r.Name] = egressOutcome(r)
	}
	return out
}

func probeResults(t *testing.T, c rnCall) []egressProbeResult {
	t.Helper()
	if c.Err != "" {
		t.Fatalf("probe: %s", c.Err)
	}
	return parseProbeLine(t, c.Text)
}

func parseProbeLine(t *testing.T, text string) []egressProbeResult {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			var out []egressProbeResult
			if err := json.Unmarshal([]byte(rest), &out); err != nil {
				t.Fatalf("probe printed %q: %v", rest, err)
			}
			return out
		}
	}
	t.Fatalf("no RESULT line from the probe:\n%s", text)
	return nil
}

// checkEgressTable compares every technique's outcome with its row and logs the table.
func checkEgressTable(t *testing.T, techniques []egressTechnique, results []egressProbeResult, controls map[string]string) {
	t.Helper()
	got := map[string]egressProbeResult{}
	for _, r := range results {
		got[r.Name] = r
	}
	var table []string
	bypasses := 0
	for _, tc := range techniques {
		r, ok := got[tc.Name]
		outcome := "no result"
		if ok {
			outcome = egressOutcome(r)
		}
		verdict := "ok"
		if outcome != tc.want {
			verdict = "FAIL"
			t.Errorf("technique %q: got %q, want %q", tc.Name, outcome, tc.want)
		}
		if tc.control != nil {
			if c := controls[tc.Name]; c != tc.control.want {
				verdict = "FAIL (control)"
				t.Errorf("technique %q: its control (the same target from a pod without NetworkPolicy) got %q, want %q", tc.Name, c, tc.control.want)
			}
		}
		if !tc.allowed {
			bypasses++
		}
		table = append(table, fmt.Sprintf("| %s | %s | %s | %s |", tc.Name, outcome, tc.proof, verdict))
	}
	if bypasses < 25 {
		t.Errorf("%d bypass techniques, the suite promises 25 or more", bypasses)
	}
	t.Logf("bypass suite from the sandbox (%d techniques refused, %d allowed cases):\n| technique | outcome | by | verdict |\n|---|---|---|---|\n%s",
		bypasses, len(techniques)-bypasses, strings.Join(table, "\n"))
}

// checkNoCredentialInSandbox: the credential the gateway injects is in neither the sandbox's pod
// spec nor its environment (Bash's `env`, and sandboxd's own).
func checkNoCredentialInSandbox(t *testing.T, ns, claim, credential, envText string) {
	t.Helper()
	pod, err := kubeClient.CoreV1().Pods(ns).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimPrefix(credential, "Bearer ")
	if strings.Contains(string(spec), secret) {
		t.Errorf("the sandbox's pod holds the injected credential")
	}
	if !strings.Contains(envText, "HTTPS_PROXY=") {
		t.Errorf("the sandbox's env has no HTTPS_PROXY: %q", envText)
	}
	if strings.Contains(envText, secret) {
		t.Errorf("the sandbox's environment holds the injected credential")
	}
}

// checkResolverLog: the test resolver (the gateway's --dns-server) was asked the allowed names
// the techniques dialed, and never a name the policy does not allow.
func checkResolverLog(t *testing.T, f *egressFixture) {
	t.Helper()
	logs, err := kubeClient.CoreV1().Pods(f.internetNS).GetLogs(f.internetPod, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	asked := map[string]bool{}
	for _, line := range strings.Split(string(logs), "\n") {
		if rest, ok := strings.CutPrefix(line, "DNS question "); ok {
			name, _, _ := strings.Cut(rest, " ")
			asked[name] = true
		}
	}
	allowed := map[string]bool{}
	for _, h := range egressClassSpec().Hosts {
		allowed[h.Host] = true
	}
	for _, c := range egressClassSpec().Credentials {
		allowed[c.Host] = true
	}
	names := make([]string, 0, len(asked))
	for n := range asked {
		names = append(names, n)
		if !allowed[n] {
			t.Errorf("the gateway asked its resolver for %q, which the policy does not allow", n)
		}
	}
	sort.Strings(names)
	for _, n := range []string{"allowed.internet.test", "loopback.internet.test", "goproxy.internet.test"} {
		if !asked[n] {
			t.Errorf("the resolver was never asked for %q: is the gateway using it? (asked: %v)", n, names)
		}
	}
	t.Logf("names the gateway resolved: %s", strings.Join(names, ", "))
}

// checkEgressAudit: the gateway's audit lines name the refusals that only the audit can show
// (after a CONNECT's 200) for claim A.
func checkEgressAudit(t *testing.T, f *egressFixture, claim string) {
	t.Helper()
	var all strings.Builder
	for _, p := range f.gatewayPods {
		logs, err := kubeClient.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		all.Write(logs)
	}
	// A refusal of who is asking names no claim: its line has the source, A's pod's address.
	ns, name, _ := strings.Cut(claim, "/")
	pod, err := kubeClient.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reasons, anonymous := map[string]int{}, map[string]int{}
	for _, line := range strings.Split(all.String(), "\n") {
		if !strings.Contains(line, `"Egress"`) {
			continue
		}
		i := strings.Index(line, ` reason="`)
		if i < 0 {
			continue
		}
		r := line[i+len(` reason="`):]
		r = r[:strings.IndexByte(r, '"')]
		switch {
		case strings.Contains(line, `claim="`+claim+`"`):
			reasons[r]++
		case strings.Contains(line, `source="`+pod.Status.PodIP+`"`) && !strings.Contains(line, ` claim=`):
			anonymous[r]++
		}
	}
	t.Logf("audit lines of %s by reason: %v; from its pod without a claim: %v", claim, reasons, anonymous)
	for _, want := range []string{"sni_mismatch", "not_tls", "host_not_allowed", "local_address", "allowed"} {
		if reasons[want] == 0 {
			t.Errorf("no audit line of %s with reason %s", claim, want)
		}
	}
	for _, want := range []string{"no_credential", "bad_credential", "wrong_source"} {
		if anonymous[want] == 0 {
			t.Errorf("no audit line from %s's pod with reason %s", claim, want)
		}
	}
}

// checkEgressMetrics: every gateway family the alerts use (e2e/monitoring/monitored-metrics.txt,
// exporter egress) is served by the running gateway's replicas, scraped from the namespace
// monitoring as a ServiceMonitor would (the gateway's NetworkPolicy admits metrics from there).
func checkEgressMetrics(t *testing.T, f *egressFixture) {
	t.Helper()
	mon := monitoringNamespace(t)
	var urls []string
	for _, p := range f.gatewayPods {
		urls = append(urls, fmt.Sprintf("http://%s/metrics", net.JoinHostPort(p.Status.PodIP, "8080")))
	}
	scrapes, err := runScraper(context.Background(), mon, fmt.Sprintf("scrape-egress-%d", scrapesTaken.Add(1)), urls, nil, 60)
	if err != nil {
		t.Fatal(err)
	}
	served := servedFamilies(t, "gateway replica", scrapes, urls...)
	n := 0
	for _, fam := range readMonitoredFamilies(t) {
		if fam.exporter != "egress" {
			continue
		}
		n++
		if got, ok := served[fam.name]; !ok {
			t.Errorf("%s (%s) is used by the alerts, but the gateway does not serve it", fam.name, fam.kind)
		} else if fam.kind != "custom" && got != fam.kind {
			t.Errorf("%s is served by the gateway as a %s, the list says %s", fam.name, got, fam.kind)
		}
	}
	if n == 0 {
		t.Errorf("monitored-metrics.txt lists no family of the gateway (exporter egress)")
	}
	t.Logf("gateway families scraped from %s: %d monitored, all served", mon, n)
}

// checkDenialEvents (issue 25, item 6): claim A has Warning events EgressDenied for the hosts
// the gateway refused, one per host however often the host was tried and however many gateway
// replicas refused it (unlisted.internet.test was tried by several techniques, on two ports):
// the replicas write one event under one name (egress.EventName).
func checkDenialEvents(t *testing.T, f *egressFixture, ns, claim string) {
	t.Helper()
	count := func(ctx context.Context, host string) (int32, []string, error) {
		events, err := kubeClient.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim + ",reason=EgressDenied"})
		if err != nil {
			return 0, nil, err
		}
		var n int32
		var msgs []string
		for _, ev := range events.Items {
			msgs = append(msgs, ev.Message)
			if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "SandboxClaim" {
				t.Errorf("event %s: type %s about a %s, want a Warning about the SandboxClaim", ev.Name, ev.Type, ev.InvolvedObject.Kind)
			}
			if strings.HasPrefix(ev.Message, "(combined from similar events)") {
				t.Errorf("event %s folds several hosts into one: %q", ev.Name, ev.Message)
			}
			if !strings.HasPrefix(ev.Name, "airlock-egress-denied-") || ev.ReportingController != "airlock-egress" {
				t.Errorf("event %s reported by %q: want the gateway's shared name and controller", ev.Name, ev.ReportingController)
			}
			if strings.Contains(ev.Message, " "+host+":") {
				n += max(ev.Count, 1)
			}
		}
		return n, msgs, nil
	}
	var msgs []string
	eventually(t, time.Minute, "an EgressDenied event of "+claim+" for unlisted.internet.test", func(ctx context.Context) (bool, error) {
		n, m, err := count(ctx, "unlisted.internet.test")
		msgs = m
		return n > 0, err
	})
	for _, host := range []string{"unlisted.internet.test", "loopback.internet.test", "allowed.internet.test"} {
		n, _, err := count(context.Background(), host)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%d EgressDenied events of %s for %s, want 1 (one across the %d gateway replicas)", n, claim, host, len(f.gatewayPods))
		}
	}
	t.Logf("EgressDenied events of %s (%d):\n  %s", claim, len(msgs), strings.Join(msgs, "\n  "))
}
