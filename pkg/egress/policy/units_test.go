package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	tests := map[string]struct {
		in       string
		want     string
		wantIP   bool
		wantFail bool
	}{
		"lower case":          {in: "Example.COM", want: "example.com"},
		"one trailing dot":    {in: "example.com.", want: "example.com"},
		"two trailing dots":   {in: "example.com..", wantFail: true},
		"full-width":          {in: "ｅｘａｍｐｌｅ.com", want: "example.com"},
		"ideographic dot":     {in: "example\u3002com", want: "example.com"},
		"unicode to A-label":  {in: "bücher.example", want: "xn--bcher-kva.example"},
		"homograph stays":     {in: "\u0430pple.com", want: "xn--pple-43d.com"},
		"IPv4":                {in: "1.2.3.4", want: "1.2.3.4", wantIP: true},
		"IPv6 canonical":      {in: "2001:DB8:0::1", want: "2001:db8::1", wantIP: true},
		"full-width address":  {in: "１２７.０.０.１", want: "127.0.0.1", wantIP: true},
		"decimal IPv4":        {in: "2130706433", wantFail: true},
		"octal IPv4":          {in: "0177.0.0.1", wantFail: true},
		"hex IPv4":            {in: "0x7f.0.0.1", wantFail: true},
		"short IPv4":          {in: "127.1", wantFail: true},
		"numeric last label":  {in: "example.123", wantFail: true},
		"underscore":          {in: "_acme.example.com", wantFail: true},
		"userinfo":            {in: "a@b.com", wantFail: true},
		"percent":             {in: "a%2eb.com", wantFail: true},
		"space":               {in: "a b.com", wantFail: true},
		"backslash":           {in: `a\b.com`, wantFail: true},
		"empty label":         {in: "a..com", wantFail: true},
		"too long label":      {in: strings.Repeat("a", 64) + ".com", wantFail: true},
		"too long name":       {in: strings.Repeat("a.", 127) + "com", wantFail: true},
		"leading hyphen":      {in: "-a.com", wantFail: true},
		"bad punycode":        {in: "xn--a.com", wantFail: true},
		"zone":                {in: "fe80::1%eth0", wantFail: true},
		"empty":               {in: "", wantFail: true},
		"zero-width joiner":   {in: "ex\u200dample.com", wantFail: true},
		"right-to-left mixed": {in: "a\u05d0.com", wantFail: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, addr, err := NormalizeHost(tc.in)
			if tc.wantFail {
				if err == nil {
					t.Fatalf("NormalizeHost(%q) = %q, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want || addr.IsValid() != tc.wantIP {
				t.Errorf("NormalizeHost(%q) = %q, %v, %v; want %q (address %v)", tc.in, got, addr, err, tc.want, tc.wantIP)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("34.118.224.0/20")}
	tests := map[string]AddressClass{
		"8.8.8.8": ClassPublic, "2606:4700::1111": ClassPublic, "64:ff9b::808:808": ClassPublic,
		"127.0.0.1": ClassLocal, "::1": ClassLocal, "169.254.169.254": ClassLocal, "fe80::1": ClassLocal,
		"0.0.0.0": ClassLocal, "::": ClassLocal, "224.0.0.1": ClassLocal, "ff02::1": ClassLocal,
		"255.255.255.255": ClassLocal, "::ffff:127.0.0.1": ClassLocal, "::ffff:169.254.169.254": ClassLocal,
		"64:ff9b::7f00:1": ClassLocal, "2002:7f00:1::": ClassLocal, "fec0::1": ClassLocal,
		"10.0.0.1": ClassPrivate, "172.16.0.1": ClassPrivate, "192.168.1.1": ClassPrivate,
		"100.64.0.1": ClassPrivate, "fd00::1": ClassPrivate, "::ffff:10.0.0.1": ClassPrivate,
		"198.18.0.1": ClassPrivate, "240.0.0.1": ClassPrivate, "2001:db8::1": ClassPrivate,
		"2002:a00:1::": ClassPrivate, "::10.0.0.1": ClassPrivate,
		"34.118.224.10": ClassCluster,
	}
	for text, want := range tests {
		if got := Classify(netip.MustParseAddr(text), cluster); got != want {
			t.Errorf("Classify(%s) = %d, want %d", text, got, want)
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	tests := map[string]Rule{
		"no ports":              {Host: "a.example"},
		"port 0":                {Host: "a.example", Ports: []uint16{0}},
		"upper case host":       {Host: "A.example", Ports: []uint16{443}},
		"trailing dot":          {Host: "a.example.", Ports: []uint16{443}},
		"unicode host":          {Host: "bücher.example", Ports: []uint16{443}},
		"bare wildcard":         {Host: "*", Ports: []uint16{443}},
		"wildcard of a TLD":     {Host: "*.com", Ports: []uint16{443}},
		"wildcard of an IP":     {Host: "*.1.2.3.4", Ports: []uint16{443}},
		"inner wildcard":        {Host: "a.*.example", Ports: []uint16{443}},
		"lower-case method":     {Host: "a.example", Ports: []uint16{443}, Methods: []string{"get"}},
		"CONNECT as a method":   {Host: "a.example", Ports: []uint16{443}, Methods: []string{"CONNECT"}},
		"relative path prefix":  {Host: "a.example", Ports: []uint16{443}, PathPrefixes: []string{"v1"}},
		"dot segment in prefix": {Host: "a.example", Ports: []uint16{443}, PathPrefixes: []string{"/v1/../x"}},
		"escape in prefix":      {Host: "a.example", Ports: []uint16{443}, PathPrefixes: []string{"/v1%2F"}},
		"decimal address":       {Host: "2130706433", Ports: []uint16{443}},
		"inject on a wildcard":  {Host: "*.a.example", Ports: []uint16{443}, Inject: &Injection{Header: "Authorization", Secret: "s"}},
		"inject on an address":  {Host: "1.2.3.4", Ports: []uint16{443}, Inject: &Injection{Header: "Authorization", Secret: "s"}},
		"inject hop-by-hop":     {Host: "a.example", Ports: []uint16{443}, Inject: &Injection{Header: "Proxy-Authorization", Secret: "s"}},
		"inject Host":           {Host: "a.example", Ports: []uint16{443}, Inject: &Injection{Header: "host", Secret: "s"}},
		"inject no secret":      {Host: "a.example", Ports: []uint16{443}, Inject: &Injection{Header: "Authorization"}},
		"inject bad header":     {Host: "a.example", Ports: []uint16{443}, Inject: &Injection{Header: "Bad Header", Secret: "s"}},
	}
	for name, r := range tests {
		if _, err := Compile(Policy{Rules: []Rule{{Host: "ok.example", Ports: []uint16{443}}, r}}); err == nil {
			t.Errorf("%s: %+v compiled, want an error", name, r)
		}
	}
	if _, err := Compile(Policy{Rules: []Rule{{Host: "*.example.com", Ports: []uint16{443}}, {Host: "2001:db8::1", Ports: []uint16{22}}}}); err != nil {
		t.Errorf("a valid policy: %v", err)
	}
}

func TestPathPrefix(t *testing.T) {
	r := CompiledRule{Rule: Rule{PathPrefixes: []string{"/v1", "/dl/"}}}
	for path, want := range map[string]bool{
		"/v1": true, "/v1/": true, "/v1/a/b": true, "/v1beta": false, "/v2": false, "/dl/x": true, "/dl": false,
		"/v1/../admin": false, "/v1/./a": false, "/v1//a": false, "/v1/%2e%2e/admin": false, `/v1\..\admin`: false, "": false,
	} {
		if got := r.AllowsRequest("GET", path); got != want {
			t.Errorf("path %q: allowed %v, want %v", path, got, want)
		}
	}
}

// TestCredentialRuleMethods: a credential rule without methods allows GET and HEAD only; one that
// lists TRACE is refused.
func TestCredentialRuleMethods(t *testing.T) {
	cp, err := Compile(Policy{Rules: []Rule{{Host: "cred.example", Ports: []uint16{443}, Inject: &Injection{Header: "Authorization", Secret: "s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := cp.Candidates(Target{Host: "cred.example", Port: 443})
	if len(rules) != 1 {
		t.Fatalf("rules %v", rules)
	}
	for method, want := range map[string]bool{"GET": true, "HEAD": true, "POST": false, "TRACE": false, "DELETE": false, "OPTIONS": false} {
		if got := rules[0].AllowsRequest(method, "/x"); got != want {
			t.Errorf("%s: %v, want %v", method, got, want)
		}
	}
	if _, err := Compile(Policy{Rules: []Rule{{Host: "cred.example", Ports: []uint16{443}, Methods: []string{"GET", "TRACE"},
		Inject: &Injection{Header: "Authorization", Secret: "s"}}}}); err == nil {
		t.Error("a credential rule with TRACE compiled")
	}
}
