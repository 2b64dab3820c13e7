package claimtoken

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
)

const testUID types.UID = "6f1c2a3e-9b1d-4c55-8f0e-2d7a9c1b3e4f"

// testMemberKey is the key of member warm-0 of team-a under testKey.
func testMemberKey(t testing.TB, member string) []byte {
	t.Helper()
	k, err := MemberKey(testKey, "team-a", member)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// mint builds an adoption token for any payload bytes, following the documented format, so that
// the tests can MAC payloads AdoptionToken would never write.
func mint(memberKey, payload []byte) string {
	mac := hmac.New(sha256.New, memberKey)
	mac.Write([]byte("airlock.dev/warm-adoption/v1\x00"))
	mac.Write(payload)
	return "aw1." + base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func TestMemberKey(t *testing.T) {
	a, err := MemberKey(testKey, "team-a", "warm-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 32 {
		t.Fatalf("member key of %d bytes, want 32", len(a))
	}
	// The documented derivation.
	mac := hmac.New(sha256.New, testKey)
	mac.Write([]byte("airlock.dev/warm-member-key/v1\x00team-a/warm-0"))
	if !bytes.Equal(a, mac.Sum(nil)) {
		t.Error("the member key is not HMAC-SHA256(key, domain NUL namespace/member)")
	}
	if again, _ := MemberKey(testKey, "team-a", "warm-0"); !bytes.Equal(again, a) {
		t.Error("the derivation is not deterministic")
	}
	otherKey := bytes.Repeat([]byte{8}, KeyBytes)
	for name, derive := range map[string]func() ([]byte, error){
		"another member":    func() ([]byte, error) { return MemberKey(testKey, "team-a", "warm-1") },
		"another namespace": func() ([]byte, error) { return MemberKey(testKey, "team-b", "warm-0") },
		"another key":       func() ([]byte, error) { return MemberKey(otherKey, "team-a", "warm-0") },
	} {
		got, err := derive()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if bytes.Equal(got, a) {
			t.Errorf("%s: same member key", name)
		}
	}
	for name, key := range map[string][]byte{"no key": nil, "short key": testKey[:16]} {
		if k, err := MemberKey(key, "team-a", "warm-0"); !errors.Is(err, ErrNoKey) || k != nil {
			t.Errorf("%s: key %x, error %v; want ErrNoKey and no key", name, k, err)
		}
	}
	for name, nsMember := range map[string][2]string{
		"no namespace":      {"", "warm-0"},
		"no member":         {"team-a", ""},
		"slash in the name": {"team-a", "x/warm-0"},
		"slash in the ns":   {"team/a", "warm-0"},
		"NUL":               {"team-a", "warm\x000"},
	} {
		if k, err := MemberKey(testKey, nsMember[0], nsMember[1]); err == nil || k != nil {
			t.Errorf("%s: key %x, error %v; want an error", name, k, err)
		}
	}
}

func TestMemberKeyText(t *testing.T) {
	k := testMemberKey(t, "warm-0")
	text := EncodeMemberKey(k)
	if len(text) != 43 || strings.ContainsAny(text, "=+/") {
		t.Fatalf("text form %q: want 43 characters of base64url without padding", text)
	}
	for _, s := range []string{text, text + "\n", "  " + text + " \r\n"} {
		got, err := DecodeMemberKey(s)
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("DecodeMemberKey(%q) = %x, %v; want the key", s, got, err)
		}
	}
	// The last character carries 2 bits that base64url of 32 bytes leaves at zero: with one of
	// them set, lenient decoders read the same key from another text. Only one text is accepted.
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", text[42])
	nonCanonical := text[:42] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last|1])
	bad := map[string]string{
		"empty":              "",
		"blank":              " \n",
		"31 bytes":           base64.RawURLEncoding.EncodeToString(k[:31]),
		"33 bytes":           base64.RawURLEncoding.EncodeToString(append(slices.Clone(k), 1)),
		"padded":             base64.URLEncoding.EncodeToString(k),
		"standard alphabet":  strings.NewReplacer("-", "+", "_", "/").Replace(base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff}, 16))),
		"space inside":       text[:20] + " " + text[21:],
		"non-canonical bits": nonCanonical,
		"hex":                strings.Repeat("ab", 32),
	}
	for name, s := range bad {
		if name == "non-canonical bits" && s == text {
			t.Fatal("the test did not change the text")
		}
		got, err := DecodeMemberKey(s)
		if err == nil {
			t.Errorf("%s: DecodeMemberKey(%q) = %x, want an error", name, s, got)
		} else if s := strings.TrimSpace(s); len(s) > 8 && strings.Contains(err.Error(), s) {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
}

func TestAdoptionTokenRoundTrip(t *testing.T) {
	mk := testMemberKey(t, "warm-0")
	tok, err := AdoptionToken(mk, testUID, []string{"Read", "Grep", "run_tests", "Read"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "aw1.") || len(tok) > 4096 {
		t.Errorf("token %q: want the prefix aw1. and at most 4 KiB", tok)
	}
	// The documented format: the canonical payload, MACed.
	if want := mint(mk, []byte(`{"c":"`+string(testUID)+`","t":["Grep","Read","run_tests"]}`)); tok != want {
		t.Errorf("token\n%s\nwant\n%s", tok, want)
	}
	got, err := VerifyAdoption(mk, tok)
	if err != nil {
		t.Fatal(err)
	}
	want := Adoption{ClaimUID: testUID, Tools: []string{"Grep", "Read", "run_tests"}}
	if got.ClaimUID != want.ClaimUID || !slices.Equal(got.Tools, want.Tools) {
		t.Errorf("VerifyAdoption = %+v, want %+v", got, want)
	}
	// Deterministic, and independent of the order and repetition of the tools.
	for _, tools := range [][]string{{"Read", "Grep", "run_tests"}, {"run_tests", "Read", "Grep", "Grep"}} {
		if again, err := AdoptionToken(mk, testUID, tools); err != nil || again != tok {
			t.Errorf("AdoptionToken(%v) = %q, %v; want the same token", tools, again, err)
		}
	}
	// Any other input, another token.
	others := map[string]func() (string, error){
		"another claim": func() (string, error) { return AdoptionToken(mk, "other-uid", []string{"Grep", "Read", "run_tests"}) },
		"fewer tools":   func() (string, error) { return AdoptionToken(mk, testUID, []string{"Grep", "Read"}) },
		"more tools": func() (string, error) {
			return AdoptionToken(mk, testUID, []string{"Bash", "Grep", "Read", "run_tests"})
		},
		"another member": func() (string, error) {
			return AdoptionToken(testMemberKey(t, "warm-1"), testUID, []string{"Grep", "Read", "run_tests"})
		},
	}
	for name, other := range others {
		o, err := other()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o == tok {
			t.Errorf("%s: same token", name)
		}
	}
}

func TestAdoptionTokenOfAnotherMember(t *testing.T) {
	a, b := testMemberKey(t, "warm-0"), testMemberKey(t, "warm-1")
	tok, err := AdoptionToken(a, testUID, []string{"Read"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := VerifyAdoption(b, tok); err == nil {
		t.Fatalf("member warm-1 accepted warm-0's token: %+v", got)
	}
	if _, err := VerifyAdoption(a, tok); err != nil {
		t.Fatalf("member warm-0 refused its own token: %v", err)
	}
}

func TestAdoptionTokenRefusesBadInput(t *testing.T) {
	mk := testMemberKey(t, "warm-0")
	many := make([]string, 33)
	for i := range many {
		many[i] = "tool_" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	tests := map[string]struct {
		key   []byte
		uid   types.UID
		tools []string
	}{
		"no UID":              {key: mk, uid: "", tools: []string{"Read"}},
		"UID with a quote":    {key: mk, uid: `a"b`, tools: []string{"Read"}},
		"UID with a slash":    {key: mk, uid: "a/b", tools: []string{"Read"}},
		"UID too long":        {key: mk, uid: types.UID(strings.Repeat("a", 129)), tools: []string{"Read"}},
		"no tools":            {key: mk, uid: testUID, tools: nil},
		"empty tool list":     {key: mk, uid: testUID, tools: []string{}},
		"empty tool name":     {key: mk, uid: testUID, tools: []string{"Read", ""}},
		"tool name with dash": {key: mk, uid: testUID, tools: []string{"run-tests"}},
		"tool name with dot":  {key: mk, uid: testUID, tools: []string{"a.b"}},
		"tool name non-ASCII": {key: mk, uid: testUID, tools: []string{"Réad"}},
		"tool name too long":  {key: mk, uid: testUID, tools: []string{strings.Repeat("a", 65)}},
		"33 tools":            {key: mk, uid: testUID, tools: many},
		"no key":              {key: nil, uid: testUID, tools: []string{"Read"}},
		"short key":           {key: mk[:31], uid: testUID, tools: []string{"Read"}},
		"long key":            {key: append(slices.Clone(mk), 0), uid: testUID, tools: []string{"Read"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if tok, err := AdoptionToken(tt.key, tt.uid, tt.tools); err == nil || tok != "" {
				t.Errorf("AdoptionToken = %q, %v; want an error and no token", tok, err)
			}
		})
	}
	// 32 distinct tools of the longest names and the longest UID stay within the bound.
	longest := make([]string, 32)
	for i := range longest {
		longest[i] = strings.Repeat("x", 62) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	tok, err := AdoptionToken(mk, types.UID(strings.Repeat("u", 128)), longest)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) > 4096 {
		t.Errorf("the largest token has %d characters, more than 4 KiB", len(tok))
	}
	if _, err := VerifyAdoption(mk, tok); err != nil {
		t.Errorf("the largest token does not verify: %v", err)
	}
}

func TestVerifyAdoptionRefuses(t *testing.T) {
	mk := testMemberKey(t, "warm-0")
	tok, err := AdoptionToken(mk, testUID, []string{"Grep", "Read"})
	if err != nil {
		t.Fatal(err)
	}
	encPayload, encMAC, _ := strings.Cut(strings.TrimPrefix(tok, "aw1."), ".")
	flip := func(s string, i int) string {
		c := byte('A')
		if s[i] == 'A' {
			c = 'B'
		}
		return s[:i] + string(c) + s[i+1:]
	}
	uid := string(testUID)
	tests := map[string]string{
		"empty":              "",
		"bearer garbage":     "s3cret-token",
		"wrong prefix":       "aw2." + encPayload + "." + encMAC,
		"no prefix":          encPayload + "." + encMAC,
		"prefix only":        "aw1.",
		"no MAC":             "aw1." + encPayload,
		"empty MAC":          "aw1." + encPayload + ".",
		"extra part":         tok + ".x",
		"tampered payload":   "aw1." + flip(encPayload, 5) + "." + encMAC,
		"tampered MAC":       "aw1." + encPayload + "." + flip(encMAC, 5),
		"truncated":          tok[:len(tok)-1],
		"truncated payload":  "aw1." + encPayload[:len(encPayload)-4] + "." + encMAC,
		"short MAC":          "aw1." + encPayload + "." + encMAC[:22],
		"padded MAC":         "aw1." + encPayload + "." + encMAC + "=",
		"oversized":          "aw1." + strings.Repeat("A", 5000) + "." + encMAC,
		"space around":       " " + tok,
		"another key's MAC":  mint(testMemberKey(t, "warm-1"), []byte(`{"c":"`+uid+`","t":["Grep","Read"]}`)),
		"fields swapped":     mint(mk, []byte(`{"t":["Grep","Read"],"c":"`+uid+`"}`)),
		"spaces":             mint(mk, []byte(`{"c": "`+uid+`", "t": ["Grep", "Read"]}`)),
		"trailing newline":   mint(mk, []byte(`{"c":"`+uid+`","t":["Grep","Read"]}`+"\n")),
		"trailing data":      mint(mk, []byte(`{"c":"`+uid+`","t":["Grep","Read"]}{}`)),
		"unsorted tools":     mint(mk, []byte(`{"c":"`+uid+`","t":["Read","Grep"]}`)),
		"duplicate tools":    mint(mk, []byte(`{"c":"`+uid+`","t":["Grep","Grep","Read"]}`)),
		"unknown field":      mint(mk, []byte(`{"c":"`+uid+`","t":["Grep","Read"],"x":1}`)),
		"duplicate key":      mint(mk, []byte(`{"c":"other","c":"`+uid+`","t":["Grep","Read"]}`)),
		"upper-case key":     mint(mk, []byte(`{"C":"`+uid+`","t":["Grep","Read"]}`)),
		"escaped tool":       mint(mk, []byte(`{"c":"`+uid+`","t":["Grep","\u0052ead"]}`)),
		"null tools":         mint(mk, []byte(`{"c":"`+uid+`","t":null}`)),
		"no tools":           mint(mk, []byte(`{"c":"`+uid+`","t":[]}`)),
		"no UID":             mint(mk, []byte(`{"c":"","t":["Read"]}`)),
		"missing UID":        mint(mk, []byte(`{"t":["Read"]}`)),
		"bad tool name":      mint(mk, []byte(`{"c":"`+uid+`","t":["Re ad"]}`)),
		"numeric UID":        mint(mk, []byte(`{"c":5,"t":["Read"]}`)),
		"not JSON":           mint(mk, []byte(`c=x;t=Read`)),
		"empty payload":      mint(mk, nil),
		"JSON array":         mint(mk, []byte(`["`+uid+`",["Read"]]`)),
		"canonical, too big": mint(mk, []byte(`{"c":"`+uid+`","t":["`+strings.Repeat("a", 3500)+`"]}`)),
	}
	for name, token := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := VerifyAdoption(mk, token)
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			if len(token) > 8 && strings.Contains(err.Error(), token) {
				t.Errorf("the error quotes the token: %v", err)
			}
		})
	}
	// The key's length is checked before anything else.
	if _, err := VerifyAdoption(mk[:16], tok); err == nil {
		t.Error("a short member key verified a token")
	}
}

// TestSourceAdoptionToken: the Source derives the member key from its key and MACs with it.
func TestSourceAdoptionToken(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	src := NewSource(k8sfake.NewClientset(), ns)
	key, err := src.Key(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mk, err := src.MemberKey(ctx, "team-a", "warm-0")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := MemberKey(key, "team-a", "warm-0"); !bytes.Equal(mk, want) {
		t.Fatal("Source.MemberKey is not MemberKey of the Source's key")
	}
	tok, err := src.AdoptionToken(ctx, "team-a", "warm-0", testUID, []string{"Read", "Bash"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyAdoption(mk, tok)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClaimUID != testUID || !slices.Equal(got.Tools, []string{"Bash", "Read"}) {
		t.Errorf("VerifyAdoption = %+v", got)
	}
	if _, err := src.AdoptionToken(ctx, "team-a", "", testUID, []string{"Read"}); err == nil {
		t.Error("no member: want an error")
	}
}

// TestEvidenceToken: a member's evidence token is the documented MAC in a domain of its own,
// one per member; it is no adoption token, and no adoption token, other member's token or
// malformed text is taken for it.
func TestEvidenceToken(t *testing.T) {
	mk := testMemberKey(t, "warm-0")
	tok, err := EvidenceToken(mk)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, mk)
	mac.Write([]byte("airlock.dev/warm-evidence-read/v1"))
	if want := "awe1." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)); tok != want {
		t.Fatalf("EvidenceToken = %q, want the documented %q", tok, want)
	}
	if !warmtoken.IsEvidenceToken(mk, tok) {
		t.Fatal("the member's own evidence token is not taken")
	}
	if _, err := VerifyAdoption(mk, tok); err == nil {
		t.Error("an evidence token verifies as an adoption token: it would adopt the member")
	}
	adoption, err := AdoptionToken(mk, testUID, []string{"Read"})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := EvidenceToken(testMemberKey(t, "warm-1"))
	for name, bad := range map[string]string{
		"another member's":   other,
		"an adoption token":  adoption,
		"empty":              "",
		"the prefix alone":   "awe1.",
		"cut":                tok[:len(tok)-1],
		"longer":             tok + "A",
		"padded":             tok + "=",
		"another version":    "awe2." + strings.TrimPrefix(tok, "awe1."),
		"the MAC, no prefix": strings.TrimPrefix(tok, "awe1."),
	} {
		if warmtoken.IsEvidenceToken(mk, bad) {
			t.Errorf("%s is taken for the member's evidence token", name)
		}
	}
	if warmtoken.IsEvidenceToken(mk[:31], tok) {
		t.Error("a short member key takes a token")
	}
}

// TestMemberEvidenceKey: the seal key is the documented one-way derivation, in a domain of its
// own: neither a member key nor the proxy key.
func TestMemberEvidenceKey(t *testing.T) {
	k, err := MemberEvidenceKey(testKey)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, testKey)
	mac.Write([]byte("airlock.dev/warm-evidence-seal/v1"))
	if !bytes.Equal(k, mac.Sum(nil)) {
		t.Error("the seal key is not HMAC-SHA256(key, \"airlock.dev/warm-evidence-seal/v1\")")
	}
	proxy, err := ProxyKey(testKey)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(k, proxy) || bytes.Equal(k, testMemberKey(t, "warm-0")) {
		t.Error("the seal key equals another derivation of the operator's key")
	}
	if _, err := MemberEvidenceKey(testKey[:KeyBytes-1]); !errors.Is(err, ErrNoKey) {
		t.Errorf("a short key: %v, want ErrNoKey", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	src := NewSource(k8sfake.NewClientset(), ns)
	key, err := src.Key(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.MemberEvidenceKey(ctx)
	if want, _ := MemberEvidenceKey(key); err != nil || !bytes.Equal(got, want) {
		t.Errorf("Source.MemberEvidenceKey = %x, %v; want MemberEvidenceKey of the Source's key", got, err)
	}
	tok, err := src.EvidenceToken(ctx, "team-a", "warm-0")
	mk, _ := src.MemberKey(ctx, "team-a", "warm-0")
	if want, _ := EvidenceToken(mk); err != nil || tok != want {
		t.Errorf("Source.EvidenceToken = %q, %v; want the member's", tok, err)
	}
}

// FuzzVerifyAdoption: VerifyAdoption never panics, and whatever it accepts is the token
// AdoptionToken writes for what it returned. The fuzzer cannot forge a MAC, so besides the raw
// token it also tries its bytes as a payload MACed with the right key, which reaches the JSON
// checks.
func FuzzVerifyAdoption(f *testing.F) {
	mk := testMemberKey(f, "warm-0")
	tok, err := AdoptionToken(mk, testUID, []string{"Grep", "Read"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok)
	f.Add(`{"c":"` + string(testUID) + `","t":["Grep","Read"]}`)
	f.Add(`{"c":"x","t":["Read","Grep"]}`)
	f.Add(`{"c":"x","t":["Read"],"x":null}`)
	f.Add(`{"t":["Read"],"c":"x"}`)
	f.Add("aw1..")
	f.Add("aw1.e30.AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		for _, token := range []string{s, mint(mk, []byte(s))} {
			got, err := VerifyAdoption(mk, token)
			if err != nil {
				continue
			}
			again, err := AdoptionToken(mk, got.ClaimUID, got.Tools)
			if err != nil {
				t.Fatalf("VerifyAdoption accepted %q as %+v, which AdoptionToken refuses: %v", token, got, err)
			}
			if again != token {
				t.Fatalf("VerifyAdoption accepted %q as %+v, whose token is %q", token, got, again)
			}
		}
	})
}
