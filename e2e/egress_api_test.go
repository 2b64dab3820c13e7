//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestEgressClassValidation: the API server refuses bad SandboxClass.spec.egress entries with the
// schema's own messages, and accepts good ones (server-side dry runs: nothing is stored).
func TestEgressClassValidation(t *testing.T) {
	ctx := context.Background()
	host := func(h string, ports ...airlockv1alpha1.EgressPort) airlockv1alpha1.EgressHost {
		return airlockv1alpha1.EgressHost{Host: h, Ports: ports}
	}
	cred := func(h, header string) airlockv1alpha1.EgressCredential {
		return airlockv1alpha1.EgressCredential{Host: h, Header: header, SecretName: "github-token"}
	}
	paths := func(h airlockv1alpha1.EgressHost, p ...airlockv1alpha1.EgressPathPrefix) airlockv1alpha1.EgressHost {
		h.PathPrefixes = p
		return h
	}
	tests := []struct {
		name    string
		egress  airlockv1alpha1.SandboxEgress
		wantMsg string // "" for accepted
	}{
		{"exact, wildcard, paths, methods and a credential", airlockv1alpha1.SandboxEgress{
			Hosts: []airlockv1alpha1.EgressHost{host("proxy.golang.org", 443), host("*.githubusercontent.com", 443),
				{Host: "api.example.com", Ports: []airlockv1alpha1.EgressPort{80}, Methods: []airlockv1alpha1.EgressMethod{"GET"}, PathPrefixes: []airlockv1alpha1.EgressPathPrefix{"/v1/", "/"}}},
			Credentials: []airlockv1alpha1.EgressCredential{cred("github.com", "Authorization")},
		}, ""},
		{"nothing listed", airlockv1alpha1.SandboxEgress{}, "egress must list at least one host or credential"},
		{"upper case", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("Proxy.golang.org", 443)}}, "host must be a lower-case DNS name"},
		{"trailing dot", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("proxy.golang.org.", 443)}}, "host must be a lower-case DNS name"},
		{"non-ASCII", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("аllowed.example", 443)}}, "host must be a lower-case DNS name"},
		{"wildcard of a TLD", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("*.com", 443)}}, "a wildcard needs a suffix of two labels or more"},
		{"bare star", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("*", 443)}}, "host must be a lower-case DNS name"},
		{"IPv4 address", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("10.0.0.1", 443)}}, "host must be a name, not an IP address"},
		{"IPv6 address", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("::1", 443)}}, "host must be a lower-case DNS name"},
		{"hex address", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("0x7f000001", 443)}}, "host must be a name, not an IP address"},
		{"no port", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("proxy.golang.org")}}, "spec.egress.hosts[0].ports"},
		{"port 0", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("proxy.golang.org", 0)}}, "should be greater than or equal to 1"},
		{"port too big", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("proxy.golang.org", 65536)}}, "should be less than or equal to 65535"},
		{"CONNECT as a method", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{{Host: "a.example", Ports: []airlockv1alpha1.EgressPort{80}, Methods: []airlockv1alpha1.EgressMethod{"CONNECT"}}}}, "Unsupported value: \"CONNECT\""},
		{"relative path", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{paths(host("a.example", 80), "v1")}}, "a path prefix starts with /"},
		{"dot segment", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{paths(host("a.example", 80), "/v1/../admin")}}, "no dot segments and no empty segments"},
		{"empty segment", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{paths(host("a.example", 80), "/v1//x")}}, "no dot segments and no empty segments"},
		{"escape", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{paths(host("a.example", 80), "/v1%2F")}}, "no %-escapes, backslashes"},
		{"backslash", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{paths(host("a.example", 80), `/v1\x`)}}, "no %-escapes, backslashes"},
		{"credential for a wildcard", airlockv1alpha1.SandboxEgress{Credentials: []airlockv1alpha1.EgressCredential{cred("*.github.com", "Authorization")}}, "no wildcard"},
		{"credential as Host", airlockv1alpha1.SandboxEgress{Credentials: []airlockv1alpha1.EgressCredential{cred("github.com", "Host")}}, "header may not be Host nor a hop-by-hop header"},
		{"credential as Proxy-Authorization", airlockv1alpha1.SandboxEgress{Credentials: []airlockv1alpha1.EgressCredential{cred("github.com", "proxy-authorization")}}, "header may not be Host nor a hop-by-hop header"},
		{"credential header with a space", airlockv1alpha1.SandboxEgress{Credentials: []airlockv1alpha1.EgressCredential{cred("github.com", "X Token")}}, "header must be an HTTP header name"},
		{"credential host also in hosts", airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{host("github.com", 443)}, Credentials: []airlockv1alpha1.EgressCredential{cred("github.com", "Authorization")}}, "must not also be listed in hosts"},
		{"two credentials for one host", airlockv1alpha1.SandboxEgress{Credentials: []airlockv1alpha1.EgressCredential{cred("github.com", "Authorization"), cred("github.com", "X-Token")}}, "at most one credential per host and port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			class := validClass("e2e-egress-dry-run")
			class.Spec.Egress = &tc.egress
			_, err := airlockClient.AirlockV1alpha1().SandboxClasses().Create(ctx, class, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tc.wantMsg == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tc.wantMsg)):
				t.Errorf("error %v, want one with %q", err, tc.wantMsg)
			}
		})
	}
}
