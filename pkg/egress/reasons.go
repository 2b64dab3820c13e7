package egress

import "net/http"

// Reason is why the gateway refused (or allowed) a request: a bounded set, used as a metric
// label and in the audit line, and sent to the client in the X-Airlock-Egress-Reason header of
// the refusal.
type Reason string

const (
	// ReasonAllowed: the request was allowed.
	ReasonAllowed Reason = "allowed"

	// Who is asking.
	ReasonNotSynced      Reason = "not_synced"       // the claim source has not synced: everything is refused
	ReasonNoCredential   Reason = "no_credential"    // no Proxy-Authorization, or not Basic
	ReasonBadCredential  Reason = "bad_credential"   // a credential that names no claim, or the wrong secret
	ReasonWrongSource    Reason = "wrong_source"     // a claim's credential from another address than its pod's
	ReasonLookupFailed   Reason = "lookup_failed"    // the claim source failed
	ReasonPolicyInvalid  Reason = "policy_invalid"   // the claim's policy does not compile: nothing is allowed
	ReasonNotProxyReq    Reason = "not_proxy"        // an origin-form request: the gateway is no web server
	ReasonBadRequest     Reason = "bad_request"      // a request that does not parse
	ReasonHeaderTooLarge Reason = "header_too_large" // a request head over the limit

	// What is asked for.
	ReasonInvalidHost     Reason = "invalid_host"        // a target that is neither a name nor an address
	ReasonUserinfo        Reason = "userinfo"            // a target with user@ in it
	ReasonScheme          Reason = "scheme"              // an absolute URI that is not http://
	ReasonIPLiteral       Reason = "ip_literal"          // an IP address that no rule lists
	ReasonNotAllowed      Reason = "host_not_allowed"    // a name no rule lists
	ReasonPortNotAllowed  Reason = "port_not_allowed"    // a listed host on a port its rules do not list
	ReasonInspection      Reason = "inspection_required" // CONNECT to a host whose rules restrict methods or paths
	ReasonMethodOrPath    Reason = "method_or_path"      // plain HTTP with a method or path no rule allows
	ReasonHostMismatch    Reason = "host_mismatch"       // a Host header that is not the request's target
	ReasonUpgrade         Reason = "upgrade"             // a plain HTTP Upgrade (WebSocket, h2c): tunnel with CONNECT
	ReasonUnexpectedBody  Reason = "unexpected_body"     // a body with a method that has none (only POST, PUT and PATCH carry one)
	ReasonAmbiguousLength Reason = "ambiguous_length"    // a body with both Content-Length and Transfer-Encoding, or two Content-Lengths

	// Terminated tunnels and credentials (terminate.go).
	ReasonCredentialNeedsTLS Reason = "credential_needs_tls"   // plain HTTP to a host only a credential-injecting rule allows
	ReasonNoCredentialValue  Reason = "credential_unavailable" // the credential to inject is not available: refused, not sent bare
	ReasonUpstreamTLS        Reason = "upstream_tls"           // a terminated tunnel's upstream did not verify

	// Where it is.
	ReasonResolveFailed  Reason = "resolve_failed"  // the allowed name does not resolve
	ReasonLocalAddress   Reason = "local_address"   // an answer in loopback, link-local (metadata), unspecified, multicast
	ReasonPrivateAddress Reason = "private_address" // an answer in a private or reserved range
	ReasonClusterAddress Reason = "cluster_address" // an answer in the cluster's pod or Service ranges
	ReasonDialFailed     Reason = "dial_failed"     // no checked address answered

	// What is sent.
	ReasonNotTLS      Reason = "not_tls"      // a CONNECT tunnel that does not start with a TLS ClientHello
	ReasonSNIMismatch Reason = "sni_mismatch" // a ClientHello whose SNI is not the CONNECT host (or is absent)

	// Ending.
	ReasonShutdown Reason = "shutdown" // the gateway stopped while the connection was open
)

// status is the HTTP status of a refusal.
func (r Reason) status() int {
	switch r {
	case ReasonNoCredential, ReasonBadCredential, ReasonWrongSource:
		return http.StatusProxyAuthRequired
	case ReasonNotSynced, ReasonLookupFailed, ReasonShutdown, ReasonNoCredentialValue:
		return http.StatusServiceUnavailable
	case ReasonBadRequest, ReasonInvalidHost, ReasonUserinfo, ReasonNotProxyReq, ReasonHostMismatch, ReasonUnexpectedBody, ReasonAmbiguousLength:
		return http.StatusBadRequest
	case ReasonHeaderTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case ReasonResolveFailed, ReasonDialFailed, ReasonUpstreamTLS:
		return http.StatusBadGateway
	}
	return http.StatusForbidden
}
