package main

// The egress suite's probe (e2e/realnode_egress_test.go): run inside a sandbox with egress (the
// test copies this binary into the sandbox's workspace), it tries each technique of its plan
// against the gateway named by HTTPS_PROXY (or directly: TCP and DNS) and reports what it saw.
// It judges nothing: the test holds the expectations.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// ProbePlan is what `egressprobe` tries.
type ProbePlan struct {
	// Proxy is the gateway's host:port; empty: HTTPS_PROXY's.
	Proxy string `json:"proxy,omitempty"`
	// CAFile verifies TLS servers; empty: SSL_CERT_FILE (the sandbox's mounted bundle).
	CAFile     string      `json:"caFile,omitempty"`
	Techniques []Technique `json:"techniques"`
}

// Technique is one attempt.
type Technique struct {
	Name string `json:"name"`
	// Kind: "proxy" (default: Request sent to the gateway), "tcp" (a direct connection to
	// Address), "dns" (a UDP question for DNSName to Address).
	Kind string `json:"kind,omitempty"`
	// Auth: "own" (default: HTTPS_PROXY's credential), "none", or "user:password".
	Auth string `json:"auth,omitempty"`
	// Request is the raw request head(s) sent to the gateway; "{AUTH}" is replaced by the
	// Proxy-Authorization line (with its CRLF), or by nothing.
	Request string `json:"request,omitempty"`
	// Responses is how many responses to read (pipelining; default 1).
	Responses int `json:"responses,omitempty"`
	// TLS, after a CONNECT's 200: a TLS handshake with this SNI, then its requests in order.
	TLS *TLSStep `json:"tls,omitempty"`
	// Raw, after a CONNECT's 200: bytes sent instead of a TLS ClientHello.
	Raw     string `json:"raw,omitempty"`
	Address string `json:"address,omitempty"`
	DNSName string `json:"dnsName,omitempty"`
}

// TLSStep is the inside of a tunnel.
type TLSStep struct {
	ServerName string         `json:"serverName"` // empty: no SNI (not verified then)
	Requests   []InnerRequest `json:"requests,omitempty"`
}

// InnerRequest is one request inside a tunnel.
type InnerRequest struct {
	Method string            `json:"method"`
	Host   string            `json:"host"`
	Path   string            `json:"path"`
	Header map[string]string `json:"header,omitempty"`
}

// ProbeResult is what one technique saw.
type ProbeResult struct {
	Name     string   `json:"name"`
	Statuses []int    `json:"statuses,omitempty"` // the gateway's answers, in order
	Reasons  []string `json:"reasons,omitempty"`  // their X-Airlock-Egress-Reason
	// TLS: "ok" (handshake done and verified), or what failed ("closed: ...").
	TLS string `json:"tls,omitempty"`
	// Inner are the answers to the tunnel's requests: status, reason and the first line of
	// the body.
	Inner []InnerResult `json:"inner,omitempty"`
	// Outcome of tcp (OPEN, BLOCKED) and dns (ANSWERED, NO ANSWER); of raw: what came back.
	Outcome string `json:"outcome,omitempty"`
	Err     string `json:"err,omitempty"`
}

// InnerResult is one answer inside a tunnel.
type InnerResult struct {
	Status int    `json:"status"`
	Reason string `json:"reason,omitempty"`
	Body   string `json:"body,omitempty"`
	Err    string `json:"err,omitempty"`
}

const probeTimeout = 10 * time.Second

func runEgressProbe(p ProbePlan) []ProbeResult {
	proxy, user, pass := p.Proxy, "", ""
	if u, err := url.Parse(os.Getenv("HTTPS_PROXY")); err == nil && u.Host != "" {
		if proxy == "" {
			proxy = u.Host
		}
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	caFile := p.CAFile
	if caFile == "" {
		caFile = os.Getenv("SSL_CERT_FILE")
	}
	roots := x509.NewCertPool()
	if b, err := os.ReadFile(caFile); err == nil {
		roots.AppendCertsFromPEM(b)
	}
	var out []ProbeResult
	for _, t := range p.Techniques {
		r := ProbeResult{Name: t.Name}
		switch t.Kind {
		case "tcp":
			r.Outcome = tcpOutcome(t.Address)
		case "dns":
			r.Outcome = dnsOutcome(t.Address, t.DNSName)
		case "", "proxy":
			auth := ""
			switch {
			case t.Auth == "" || t.Auth == "own":
				auth = basicAuth(user, pass)
			case t.Auth != "none":
				u, pw, _ := strings.Cut(t.Auth, ":")
				auth = basicAuth(u, pw)
			}
			if err := proxyAttempt(proxy, auth, roots, t, &r); err != nil {
				r.Err = err.Error()
			}
		default:
			r.Err = "unknown kind " + t.Kind
		}
		out = append(out, r)
	}
	return out
}

func basicAuth(user, pass string) string {
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + "\r\n"
}

func tcpOutcome(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "BLOCKED"
	}
	c.Close()
	return "OPEN"
}

// dnsOutcome sends one A question for name to the server at addr over UDP and waits 3 s.
func dnsOutcome(addr, name string) string {
	n, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return "bad name: " + err.Error()
	}
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: 4711, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	q, err := msg.Pack()
	if err != nil {
		return "pack: " + err.Error()
	}
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "NO ANSWER"
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(q); err != nil {
		return "NO ANSWER"
	}
	buf := make([]byte, 1500)
	if _, err := c.Read(buf); err != nil {
		return "NO ANSWER"
	}
	return "ANSWERED"
}

// proxyAttempt sends t's request to the gateway and reads its answers; after a CONNECT's 200 it
// goes on with t.TLS or t.Raw.
func proxyAttempt(proxy, auth string, roots *x509.CertPool, t Technique, r *ProbeResult) error {
	conn, err := net.DialTimeout("tcp", proxy, probeTimeout)
	if err != nil {
		return fmt.Errorf("dial gateway: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	req := strings.ReplaceAll(t.Request, "{AUTH}", auth)
	if _, err := io.WriteString(conn, req); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	n := max(t.Responses, 1)
	method, _, _ := strings.Cut(req, " ")
	for i := range n {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			if i == 0 {
				return fmt.Errorf("reading answer: %w", err)
			}
			r.Reasons = append(r.Reasons, "closed")
			return nil
		}
		r.Statuses = append(r.Statuses, resp.StatusCode)
		r.Reasons = append(r.Reasons, resp.Header.Get("X-Airlock-Egress-Reason"))
		if method == http.MethodConnect && resp.StatusCode == http.StatusOK {
			return inTunnel(&bufConn{Conn: conn, r: br}, roots, t, r)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	return nil
}

// inTunnel is the tunnel's side of a technique: a TLS session and its requests, or raw bytes.
func inTunnel(conn net.Conn, roots *x509.CertPool, t Technique, r *ProbeResult) error {
	if t.Raw != "" {
		if _, err := io.WriteString(conn, t.Raw); err != nil {
			r.Outcome = "closed: " + err.Error()
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(conn, 512))
		switch {
		case len(b) > 0:
			r.Outcome = "answered: " + firstLine(string(b))
		case err != nil:
			r.Outcome = "closed: " + err.Error()
		default:
			r.Outcome = "closed"
		}
		return nil
	}
	if t.TLS == nil {
		return nil
	}
	cfg := &tls.Config{ServerName: t.TLS.ServerName, RootCAs: roots, NextProtos: []string{"http/1.1"}}
	if t.TLS.ServerName == "" {
		cfg.InsecureSkipVerify = true // no SNI is sent without a name; nothing to verify against
	}
	tc := tls.Client(conn, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		r.TLS = "closed: " + err.Error()
		return nil
	}
	r.TLS = "ok"
	br := bufio.NewReader(tc)
	for _, ir := range t.TLS.Requests {
		res := InnerResult{}
		head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: airlock-e2e-probe\r\n", ir.Method, ir.Path, ir.Host)
		for k, v := range ir.Header {
			head += k + ": " + v + "\r\n"
		}
		if ir.Method == http.MethodPost || ir.Method == http.MethodPut {
			head += "Content-Length: 0\r\n"
		}
		if _, err := io.WriteString(tc, head+"\r\n"); err != nil {
			res.Err = err.Error()
			r.Inner = append(r.Inner, res)
			return nil
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: ir.Method})
		if err != nil {
			res.Err = "closed: " + err.Error()
			r.Inner = append(r.Inner, res)
			return nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		res.Status, res.Reason, res.Body = resp.StatusCode, resp.Header.Get("X-Airlock-Egress-Reason"), firstLine(string(body))
		r.Inner = append(r.Inner, res)
	}
	return nil
}

// bufConn reads through the reader that read the CONNECT's answer, in case it buffered more.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// runEgressMode runs `internet` (until it fails) or `egressprobe` (printing its RESULT line).
func runEgressMode(mode, planJSON string) {
	if mode == "internet" {
		var p InternetPlan
		if err := json.Unmarshal([]byte(planJSON), &p); err != nil {
			fmt.Fprintln(os.Stderr, "plan:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, runInternet(p))
		os.Exit(1)
	}
	var p ProbePlan
	if err := json.Unmarshal([]byte(planJSON), &p); err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		os.Exit(2)
	}
	b, _ := json.Marshal(runEgressProbe(p))
	fmt.Println("RESULT " + string(b))
}
