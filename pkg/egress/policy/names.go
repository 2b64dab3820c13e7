package policy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// maxNameLength is the longest DNS name, in its ASCII form without the trailing dot.
const maxNameLength = 253

// idnaProfile maps a name as browsers do before a lookup (UTS #46: case folding, width mapping,
// NFC) and checks it (STD3 letters, digits and hyphens; bidi and joiner rules; punycode that
// decodes), so that every spelling of one name compares equal in its ASCII form and a homograph
// of an allowed name stays another name.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.ValidateLabels(true),
	idna.StrictDomainName(true),
	idna.CheckHyphens(true),
	idna.CheckJoiners(true),
	idna.Transitional(false),
)

// ErrInvalidHost is the error of a target that is not a host name nor an IP address.
var ErrInvalidHost = errors.New("invalid host")

// ErrUserinfo is the error of a target with userinfo (user@host).
var ErrUserinfo = errors.New("userinfo in the target")

// Target is a normalised request target: a lower-case ASCII host name without a trailing dot, or
// an IP address, and a port.
type Target struct {
	// Host is the normalised name, or the address's text for an IP literal.
	Host string
	// Addr is set for an IP literal.
	Addr netip.Addr
	Port uint16
}

func (t Target) IsIP() bool { return t.Addr.IsValid() }

// HostPort is the target as host:port, with brackets for IPv6.
func (t Target) HostPort() string {
	return net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port)))
}

// NormalizeHost returns the normalised form of a host as a client wrote it (CONNECT authority,
// URL host, Host header or SNI, without port): an IP address in its canonical text, or a name in
// lower-case ASCII (IDNA A-labels) without its one trailing dot. It refuses what is neither, and
// every spelling that some resolver or library would read as an address but netip does not
// (127.1, 0x7f.0.0.1, 2130706433, 0177.0.0.1): a name's last label must not be numeric.
func NormalizeHost(raw string) (string, netip.Addr, error) {
	if raw == "" {
		return "", netip.Addr{}, fmt.Errorf("%w: empty", ErrInvalidHost)
	}
	for _, r := range raw {
		if r < 0x21 || r == 0x7f || strings.ContainsRune(`@%/\?#[]"'<>^`+"`{|}", r) {
			return "", netip.Addr{}, fmt.Errorf("%w: %q has the character %q", ErrInvalidHost, raw, r)
		}
	}
	if addr, err := netip.ParseAddr(raw); err == nil {
		return addr.String(), addr, nil
	}
	name, err := idnaProfile.ToASCII(raw)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("%w: %q: %v", ErrInvalidHost, raw, err)
	}
	name = strings.TrimSuffix(name, ".")
	// The mapping can turn full-width digits and dots into an address.
	if addr, err := netip.ParseAddr(name); err == nil {
		return addr.String(), addr, nil
	}
	if err := checkName(name); err != nil {
		return "", netip.Addr{}, fmt.Errorf("%w: %q: %v", ErrInvalidHost, raw, err)
	}
	return name, netip.Addr{}, nil
}

// checkName checks an ASCII name's length and labels, and that its last label is not numeric
// (nor hexadecimal like 0x7f), so that it cannot be read as an IPv4 address in any notation.
func checkName(name string) error {
	if name == "" || len(name) > maxNameLength {
		return fmt.Errorf("a name has 1 to %d characters", maxNameLength)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return errors.New("every label has 1 to 63 characters")
		}
	}
	last := labels[len(labels)-1]
	if numeric(last) || (len(last) > 2 && (last[:2] == "0x") && hex(last[2:])) {
		return errors.New("the last label is numeric: an IPv4 address in some notation")
	}
	return nil
}

func numeric(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func hex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// ParseAuthority parses host:port (the CONNECT request target, a URL's host or a Host header)
// into a normalised target. defaultPort is used when the port is absent (0: the port is
// required).
func ParseAuthority(authority string, defaultPort uint16) (Target, error) {
	if authority == "" {
		return Target{}, fmt.Errorf("%w: empty", ErrInvalidHost)
	}
	if strings.Contains(authority, "@") {
		return Target{}, fmt.Errorf("%w: %q has userinfo", ErrUserinfo, authority)
	}
	host, portText, err := net.SplitHostPort(authority)
	if err != nil {
		if defaultPort == 0 || !missingPort(err) {
			return Target{}, fmt.Errorf("%w: %q: %v", ErrInvalidHost, authority, err)
		}
		host, portText = authority, strconv.Itoa(int(defaultPort))
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 || !numeric(portText) {
		return Target{}, fmt.Errorf("%w: %q: the port must be a number from 1 to 65535", ErrInvalidHost, authority)
	}
	name, addr, err := NormalizeHost(host)
	if err != nil {
		return Target{}, err
	}
	if addr.Zone() != "" {
		return Target{}, fmt.Errorf("%w: %q has an IPv6 zone", ErrInvalidHost, authority)
	}
	return Target{Host: name, Addr: addr, Port: uint16(port)}, nil
}

func missingPort(err error) bool {
	var ae *net.AddrError
	return errors.As(err, &ae) && ae.Err == "missing port in address"
}
