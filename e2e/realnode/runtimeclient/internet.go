package main

// The egress suite's stand-in internet (e2e/realnode_egress_test.go, docs/egress.md "The
// real-node bypass suite"): HTTPS and HTTP servers for a few test names, a test Go module proxy,
// the TLS front of a test git server, and a DNS server the gateway is pointed at (--dns-server)
// that answers the test names from a table and logs every question it is asked.

import (
	"archive/zip"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// InternetPlan is what `internet` serves.
type InternetPlan struct {
	// CertPEM and KeyPEM are the serving certificate of the test names (signed by the test CA
	// that the gateway trusts for upstreams and the sandboxes' bundle holds).
	CertPEM string `json:"certPEM"`
	KeyPEM  string `json:"keyPEM"`
	// Credential is the Authorization value that the credentialed hosts expect (the gateway
	// injects it; the sandbox never has it).
	Credential string `json:"credential"`
	// Names is the DNS table: a name (lower case, no trailing dot) and its A records.
	Names map[string][]string `json:"names"`
	// GitBackend is the git server's base URL (busybox httpd with git http-backend as CGI at
	// /cgi-bin/git), fronted for the host git.internet.test.
	GitBackend string `json:"gitBackend"`
}

// The test module the module proxy serves.
const (
	testModule        = "example.test/hello"
	testModuleVersion = "v1.0.0"
	testModuleGoMod   = "module example.test/hello\n\ngo 1.21\n"
)

func runInternet(p InternetPlan) error {
	cert, err := tls.X509KeyPair([]byte(p.CertPEM), []byte(p.KeyPEM))
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	zipBytes, err := testModuleZip()
	if err != nil {
		return err
	}
	h := &internetHandler{plan: p, zip: zipBytes}
	if p.GitBackend != "" {
		u, err := url.Parse(p.GitBackend)
		if err != nil {
			return fmt.Errorf("gitBackend: %w", err)
		}
		h.git = httputil.NewSingleHostReverseProxy(u)
	}
	errs := make(chan error, 3)
	go func() {
		srv := &http.Server{Addr: ":8443", Handler: h, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}}
		errs <- srv.ListenAndServeTLS("", "")
	}()
	go func() {
		srv := &http.Server{Addr: ":8080", Handler: h, ReadHeaderTimeout: 10 * time.Second}
		errs <- srv.ListenAndServe()
	}()
	go func() { errs <- serveDNS(":5353", p.Names) }()
	say("internet: serving :8443 (TLS), :8080 (HTTP), :5353/udp (DNS, %d names)", len(p.Names))
	return <-errs
}

type internetHandler struct {
	plan InternetPlan
	zip  []byte
	git  *httputil.ReverseProxy
}

func (h *internetHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(r.Host)
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	say("internet: %s %s %s tls=%v", host, r.Method, r.URL.Path, r.TLS != nil)
	switch host {
	case "goproxy.internet.test":
		h.moduleProxy(w, r)
	case "creds.internet.test":
		// Never echoes the header's value: the sandbox reads this answer.
		fmt.Fprintf(w, "auth=%s %s %s\n", h.authState(r), r.Method, r.URL.Path)
	case "git.internet.test":
		push := r.URL.Query().Get("service") == "git-receive-pack" || strings.HasSuffix(r.URL.Path, "/git-receive-pack")
		if push && h.authState(r) != "ok" {
			w.Header().Set("WWW-Authenticate", `Basic realm="e2e-git"`)
			http.Error(w, "push needs the credential", http.StatusUnauthorized)
			return
		}
		if h.git == nil {
			http.Error(w, "no git backend", http.StatusBadGateway)
			return
		}
		r.URL.Path = "/cgi-bin/git" + r.URL.Path
		r.URL.RawPath = ""
		h.git.ServeHTTP(w, r)
	default:
		fmt.Fprintf(w, "ok %s %s\n", host, r.URL.Path)
	}
}

// authState says whether the request carries the expected credential: ok, missing or other.
func (h *internetHandler) authState(r *http.Request) string {
	switch got := r.Header.Get("Authorization"); {
	case got == "":
		return "missing"
	case h.plan.Credential != "" && got == h.plan.Credential:
		return "ok"
	default:
		return "other"
	}
}

// moduleProxy serves the GOPROXY protocol for the one test module.
func (h *internetHandler) moduleProxy(w http.ResponseWriter, r *http.Request) {
	prefix := "/" + testModule + "/@v/"
	switch r.URL.Path {
	case prefix + "list":
		fmt.Fprintln(w, testModuleVersion)
	case prefix + testModuleVersion + ".info":
		fmt.Fprintf(w, `{"Version":%q,"Time":"2026-01-01T00:00:00Z"}`+"\n", testModuleVersion)
	case prefix + testModuleVersion + ".mod":
		fmt.Fprint(w, testModuleGoMod)
	case prefix + testModuleVersion + ".zip":
		w.Header().Set("Content-Type", "application/zip")
		_, _ = w.Write(h.zip)
	default:
		http.NotFound(w, r)
	}
}

// testModuleZip is the test module's zip, as a module proxy serves it.
func testModuleZip() ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	files := map[string]string{
		"go.mod":   testModuleGoMod,
		"hello.go": "package hello\n\n// Hello greets.\nfunc Hello() string { return \"hello from the stand-in internet\" }\n",
	}
	for _, name := range []string{"go.mod", "hello.go"} {
		f, err := zw.Create(testModule + "@" + testModuleVersion + "/" + name)
		if err != nil {
			return nil, err
		}
		if _, err := f.Write([]byte(files[name])); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// serveDNS answers UDP questions from names: A records of a name in the table, an empty answer
// for its other types, NXDOMAIN for any other name. Every question is logged ("DNS question"),
// so that the test can tell which names the gateway asked for.
func serveDNS(addr string, names map[string][]string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		resp, err := dnsAnswer(buf[:n], names)
		if err != nil {
			say("internet: DNS: bad query from %s: %v", from, err)
			continue
		}
		_, _ = pc.WriteTo(resp, from)
	}
}

func dnsAnswer(query []byte, names map[string][]string) ([]byte, error) {
	var p dnsmessage.Parser
	hdr, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	say("DNS question %s %s", name, q.Type)
	addrs, known := names[name]
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true, RecursionDesired: hdr.RecursionDesired, RCode: rcode})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if q.Type == dnsmessage.TypeA {
		for _, a := range addrs {
			ip := net.ParseIP(a).To4()
			if ip == nil {
				continue
			}
			rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5}
			if err := b.AResource(rh, dnsmessage.AResource{A: [4]byte(ip)}); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}

// copySelf writes this very binary to path (mode 0755): the egress suite puts it into a
// sandbox's workspace through the content volume, where it runs as the probe.
func copySelf(path string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o755)
}
