package policy

import (
	"net/netip"
)

// AddressClass is why an address is not globally reachable; ClassPublic for one that is.
type AddressClass int

const (
	ClassPublic AddressClass = iota
	// ClassPrivate: RFC 1918, ULA, CGNAT and the other special-purpose ranges that are not
	// globally reachable (IANA's registries); a rule's AllowPrivate admits them.
	ClassPrivate
	// ClassCluster: one of the cluster's pod or Service ranges (Config.ClusterCIDRs); a rule's
	// AllowPrivate admits them.
	ClassCluster
	// ClassLocal: loopback, link-local (the metadata address 169.254.169.254 among them),
	// unspecified, multicast and broadcast: never admitted.
	ClassLocal
)

// Prefixes of the IANA IPv4 and IPv6 special-purpose address registries whose addresses are
// not globally reachable, beside those that netip's predicates already name.
var (
	localPrefixes = mustPrefixes(
		"0.0.0.0/8",          // "this network"
		"255.255.255.255/32", // limited broadcast
		"fec0::/10",          // deprecated site-local
	)
	privatePrefixes = mustPrefixes(
		"100.64.0.0/10",   // CGNAT shared address space
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // TEST-NET-1
		"192.88.99.0/24",  // deprecated 6to4 relay anycast
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // TEST-NET-2
		"203.0.113.0/24",  // TEST-NET-3
		"240.0.0.0/4",     // reserved
		"::/96",           // deprecated IPv4-compatible
		"64:ff9b:1::/48",  // local-use NAT64
		"100::/64",        // discard-only
		"2001::/23",       // IETF protocol assignments (Teredo among them)
		"2001:db8::/32",   // documentation
	)
	// Prefixes that embed an IPv4 address, which is checked too.
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

func mustPrefixes(texts ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(texts))
	for _, t := range texts {
		out = append(out, netip.MustParsePrefix(t))
	}
	return out
}

// Classify returns the most restrictive class of addr, with the IPv4 address that an
// IPv4-mapped, NAT64 or 6to4 address embeds classified too.
func Classify(addr netip.Addr, cluster []netip.Prefix) AddressClass {
	addr = addr.WithZone("")
	class := classifyOne(addr.Unmap(), cluster)
	if addr.Is6() && !addr.Is4In6() {
		a16 := addr.As16()
		var embedded netip.Addr
		switch {
		case nat64Prefix.Contains(addr):
			embedded = netip.AddrFrom4([4]byte(a16[12:16]))
		case sixToFour.Contains(addr):
			embedded = netip.AddrFrom4([4]byte(a16[2:6]))
		}
		if embedded.IsValid() {
			class = max(class, classifyOne(embedded, cluster))
		}
	}
	return class
}

func classifyOne(addr netip.Addr, cluster []netip.Prefix) AddressClass {
	if !addr.IsValid() || addr.IsLoopback() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || addr.IsUnspecified() || inAny(addr, localPrefixes) {
		return ClassLocal
	}
	if inAny(addr, cluster) {
		return ClassCluster
	}
	if addr.IsPrivate() || inAny(addr, privatePrefixes) {
		return ClassPrivate
	}
	return ClassPublic
}

func inAny(addr netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
