package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestFromRecord: the frozen egress maps onto the gateway's rules field by field, host
// entries first, then one rule per credential; the result compiles.
func TestFromRecord(t *testing.T) {
	record := &airlockv1alpha1.FrozenEgress{
		Hosts: []airlockv1alpha1.EgressHost{
			{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}},
			{Host: "*.githubusercontent.com", Ports: []airlockv1alpha1.EgressPort{443, 80}},
			{Host: "api.example.com", Ports: []airlockv1alpha1.EgressPort{80}, Methods: []airlockv1alpha1.EgressMethod{"GET"}, PathPrefixes: []airlockv1alpha1.EgressPathPrefix{"/v1"}},
			{Host: "git.corp.example", Ports: []airlockv1alpha1.EgressPort{443}, AllowPrivate: true},
		},
		Credentials: []airlockv1alpha1.EgressCredential{{
			Host: "github.com", Port: 443, Methods: []airlockv1alpha1.EgressMethod{"GET", "POST"},
			PathPrefixes: []airlockv1alpha1.EgressPathPrefix{"/org/repo.git/"}, Header: "Authorization", SecretName: "github-token",
		}},
		Gateway: airlockv1alpha1.EgressGateway{Namespace: "airlock-system", Service: "airlock-egress"},
	}
	want := Policy{Rules: []Rule{
		{Host: "proxy.golang.org", Ports: []uint16{443}},
		{Host: "*.githubusercontent.com", Ports: []uint16{443, 80}},
		{Host: "api.example.com", Ports: []uint16{80}, Methods: []string{"GET"}, PathPrefixes: []string{"/v1"}},
		{Host: "git.corp.example", Ports: []uint16{443}, AllowPrivate: true},
		{Host: "github.com", Ports: []uint16{443}, Methods: []string{"GET", "POST"}, PathPrefixes: []string{"/org/repo.git/"},
			Inject: &Injection{Header: "Authorization", Secret: "github-token"}},
	}}
	got := FromRecord(record)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("policy (-want +got):\n%s", diff)
	}
	if _, err := Compile(got); err != nil {
		t.Fatalf("the converted policy does not compile: %v", err)
	}
}

// TestFromRecordFailsClosed: no record allows nothing; a record the schema should have
// refused converts into a policy that does not compile (never into a wider one).
func TestFromRecordFailsClosed(t *testing.T) {
	if got := FromRecord(nil); len(got.Rules) != 0 {
		t.Errorf("no record gave rules %+v", got.Rules)
	}
	bad := map[string]*airlockv1alpha1.FrozenEgress{
		"port out of range": {Hosts: []airlockv1alpha1.EgressHost{{Host: "example.com", Ports: []airlockv1alpha1.EgressPort{65536 + 443}}}},
		"no port":           {Hosts: []airlockv1alpha1.EgressHost{{Host: "example.com"}}},
		"upper-case host":   {Hosts: []airlockv1alpha1.EgressHost{{Host: "Example.com", Ports: []airlockv1alpha1.EgressPort{443}}}},
		"wildcard of a TLD": {Hosts: []airlockv1alpha1.EgressHost{{Host: "*.com", Ports: []airlockv1alpha1.EgressPort{443}}}},
		"dot segment path":  {Hosts: []airlockv1alpha1.EgressHost{{Host: "example.com", Ports: []airlockv1alpha1.EgressPort{80}, PathPrefixes: []airlockv1alpha1.EgressPathPrefix{"/a/../b"}}}},
		"hop-by-hop header": {Credentials: []airlockv1alpha1.EgressCredential{{Host: "example.com", Port: 443, Header: "Proxy-Authorization", SecretName: "s"}}},
		"credential port 0": {Credentials: []airlockv1alpha1.EgressCredential{{Host: "example.com", Header: "Authorization", SecretName: "s"}}},
		"invalid punycode":  {Hosts: []airlockv1alpha1.EgressHost{{Host: "xn--zz.example", Ports: []airlockv1alpha1.EgressPort{443}}}},
	}
	for name, record := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := Compile(FromRecord(record)); err == nil {
				t.Error("compiled")
			}
		})
	}
}

// TestFromRecordFields: a field added to the API's host or credential entries must be
// added to FromRecord (and to the test above): this names the fields it converts.
func TestFromRecordFields(t *testing.T) {
	converted := map[reflect.Type]string{
		reflect.TypeFor[airlockv1alpha1.EgressHost]():       "Host,Ports,Methods,PathPrefixes,AllowPrivate",
		reflect.TypeFor[airlockv1alpha1.EgressCredential](): "Host,Port,Methods,PathPrefixes,Header,SecretName",
		reflect.TypeFor[airlockv1alpha1.FrozenEgress]():     "Hosts,Credentials,Gateway",
	}
	for typ, want := range converted {
		var names []string
		for i := range typ.NumField() {
			names = append(names, typ.Field(i).Name)
		}
		if got := strings.Join(names, ","); got != want {
			t.Errorf("%s has fields %s; FromRecord converts %s", typ.Name(), got, want)
		}
	}
}

// TestCheckClass: a class's egress that the gateway would not compile is an error, so that
// admission refuses it (the schema should have; a class written before a rule existed is not);
// a valid one and none are not.
func TestCheckClass(t *testing.T) {
	for name, e := range map[string]*airlockv1alpha1.SandboxEgress{
		"wildcard of a TLD": {Hosts: []airlockv1alpha1.EgressHost{{Host: "*.com", Ports: []airlockv1alpha1.EgressPort{443}}}},
		"upper case":        {Hosts: []airlockv1alpha1.EgressHost{{Host: "Example.com", Ports: []airlockv1alpha1.EgressPort{443}}}},
		"no port":           {Hosts: []airlockv1alpha1.EgressHost{{Host: "example.com"}}},
		"an IP address":     {Hosts: []airlockv1alpha1.EgressHost{{Host: "*.10.0.0.1", Ports: []airlockv1alpha1.EgressPort{443}}}},
		"Host header":       {Credentials: []airlockv1alpha1.EgressCredential{{Host: "example.com", Port: 443, Header: "Host", SecretName: "s"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := CheckClass(e); err == nil {
				t.Error("compiled")
			}
		})
	}
	if err := CheckClass(&airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}}}); err != nil {
		t.Errorf("a valid host list: %v", err)
	}
	if err := CheckClass(nil); err != nil {
		t.Errorf("no egress: %v", err)
	}
}
