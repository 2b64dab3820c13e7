// Package evidence gathers sandboxd's isolation evidence (pkg/isolation, docs/isolation.md
// "Evidence"): once, at start, before any tool is served. Every source is a field of Sources, so
// that tests choose what the kernel, /proc and the network say.
package evidence

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/pkg/isolation"
)

// The probes' fixed addresses (the others come from the pod's environment and resolv.conf).
const (
	// KubeletPort is the node probe's port: the kubelet's API.
	KubeletPort = "10250"
	// MetadataAddress is the cloud instance metadata service.
	MetadataAddress = "169.254.169.254:80"
	// DNSPort is the kube-dns probe's port (TCP).
	DNSPort = "53"
)

// DefaultTimeout bounds each probe's connection. The probes run side by side, so gathering takes
// about this long when a NetworkPolicy drops packets (kube-network-policies does), and sandboxd
// is not ready before: it is on every cold start's path. A connection the policy lets through
// to these addresses (the API server's Service, the node, the metadata service, kube-dns: one
// hop from the pod) is established in about a millisecond, so 300 ms says "not reached" with a
// wide margin and costs a cold start 300 ms, not a second (issue 40's budget).
const DefaultTimeout = 300 * time.Millisecond

// Sources are where the evidence is read from.
type Sources struct {
	// Uname returns the kernel's release and version (uname -r, uname -v).
	Uname func() (release, version string, err error)
	// Status returns /proc/self/status.
	Status func() ([]byte, error)
	// Getenv reads the environment (KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT,
	// isolation.NodeIPEnv).
	Getenv func(string) string
	// ResolvConf returns /etc/resolv.conf.
	ResolvConf func() ([]byte, error)
	// Dial opens a connection, as net.Dialer.DialContext does.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Timeout bounds each probe (DefaultTimeout when 0).
	Timeout time.Duration
}

// Host returns the sources of the process's own kernel, /proc, environment and network.
func Host() *Sources {
	var d net.Dialer
	return &Sources{
		Uname:      uname,
		Status:     func() ([]byte, error) { return os.ReadFile("/proc/self/status") },
		Getenv:     os.Getenv,
		ResolvConf: func() ([]byte, error) { return os.ReadFile("/etc/resolv.conf") },
		Dial:       d.DialContext,
	}
}

func uname() (release, version string, err error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Version[:]), nil
}

// Gather reads the kernel and the process's status and runs the probes, side by side, each
// bounded by the timeout and all by ctx. An error says that the kernel or the status could not
// be read (no evidence); a probe that cannot run (no address) is in the evidence, with why.
func Gather(ctx context.Context, src *Sources) (isolation.Evidence, error) {
	release, version, err := src.Uname()
	if err != nil {
		return isolation.Evidence{}, err
	}
	status, err := src.Status()
	if err != nil {
		return isolation.Evidence{}, fmt.Errorf("reading the process's status: %w", err)
	}
	ev := isolation.Evidence{
		Version:       isolation.Version,
		KernelRelease: clean(release),
		KernelVersion: clean(version),
	}
	ev.Runtime = isolation.DetectRuntime(ev.KernelRelease, ev.KernelVersion)
	if err := readStatus(status, &ev); err != nil {
		return isolation.Evidence{}, fmt.Errorf("reading the process's status: %w", err)
	}
	ev.Probes = probe(ctx, src, targets(src))
	return ev, nil
}

// target is a probe to run: its address, or why there is none.
type target struct {
	name, address, missing string
}

// targets are the probes' addresses, in the order of isolation.ProbeNames.
func targets(src *Sources) []target {
	api := target{name: isolation.ProbeAPIServer}
	if host, port := src.Getenv("KUBERNETES_SERVICE_HOST"), src.Getenv("KUBERNETES_SERVICE_PORT"); host == "" || port == "" {
		api.missing = "KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set"
	} else {
		api.address = net.JoinHostPort(host, port)
	}
	node := target{name: isolation.ProbeNode}
	if ip := src.Getenv(isolation.NodeIPEnv); ip == "" {
		node.missing = isolation.NodeIPEnv + " is not set"
	} else {
		node.address = net.JoinHostPort(ip, KubeletPort)
	}
	dns := target{name: isolation.ProbeKubeDNS}
	if ns, err := firstNameserver(src.ResolvConf); err != nil {
		dns.missing = err.Error()
	} else {
		dns.address = net.JoinHostPort(ns, DNSPort)
	}
	return []target{api, node, {name: isolation.ProbeMetadata, address: MetadataAddress}, dns}
}

// probe tries every target's TCP connection at once, each within the timeout, and returns a
// probe of each, in targets' order. An established connection is closed at once.
func probe(ctx context.Context, src *Sources, ts []target) []isolation.Probe {
	timeout := src.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	out := make([]isolation.Probe, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		out[i] = isolation.Probe{Name: t.name, Address: t.address}
		if t.address == "" {
			out[i].Error = clean(t.missing)
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			conn, err := src.Dial(pctx, "tcp", t.address)
			if err != nil {
				out[i].Error = clean(dialError(err, timeout))
				return
			}
			_ = conn.Close()
			out[i].Reached = true
		})
	}
	wg.Wait()
	return out
}

// dialError says why a connection was not made; a deadline is said with the timeout.
func dialError(err error, timeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
		return fmt.Sprintf("no connection within %s: %v", timeout, err)
	}
	return err.Error()
}

// firstNameserver is the address of the first nameserver line of resolv.conf.
func firstNameserver(read func() ([]byte, error)) (string, error) {
	data, err := read()
	if err != nil {
		return "", fmt.Errorf("reading resolv.conf: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			// An IPv6 address may carry a zone (fe80::1%eth0); JoinHostPort keeps it.
			return fields[1], nil
		}
	}
	return "", errors.New("resolv.conf names no nameserver")
}

// readStatus fills the identity and privileges of ev from /proc/self/status.
func readStatus(status []byte, ev *isolation.Evidence) error {
	fields := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	var err error
	if ev.UID, err = lowestID(fields, "Uid"); err != nil {
		return err
	}
	if ev.GID, err = lowestID(fields, "Gid"); err != nil {
		return err
	}
	for _, f := range []struct {
		key string
		to  *string
	}{{"CapEff", &ev.CapEff}, {"CapPrm", &ev.CapPrm}} {
		v, ok := fields[f.key]
		if !ok {
			return fmt.Errorf("no %s line", f.key)
		}
		*f.to = clean(v)
	}
	nnp, err := number(fields, "NoNewPrivs")
	if err != nil {
		return err
	}
	ev.NoNewPrivs = nnp == 1
	seccomp, err := number(fields, "Seccomp")
	if err != nil {
		return err
	}
	ev.Seccomp = int(seccomp)
	return nil
}

// lowestID is the lowest of the real, effective, saved and filesystem ids of a Uid or Gid line.
func lowestID(fields map[string]string, key string) (int64, error) {
	ids := strings.Fields(fields[key])
	if len(ids) != 4 {
		return 0, fmt.Errorf("the %s line %q does not hold four ids", key, fields[key])
	}
	var lowest int64 = -1
	for _, s := range ids {
		id, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("the %s line %q: %w", key, fields[key], err)
		}
		if lowest < 0 || int64(id) < lowest {
			lowest = int64(id)
		}
	}
	return lowest, nil
}

// number reads a small number line.
func number(fields map[string]string, key string) (int64, error) {
	v, ok := fields[key]
	if !ok {
		return 0, fmt.Errorf("no %s line", key)
	}
	n, err := strconv.ParseInt(v, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("the %s line %q: %w", key, v, err)
	}
	return n, nil
}

// clean makes s a string the evidence may hold: printable ASCII (anything else is '?'), at most
// isolation.MaxString bytes, without surrounding spaces (isolation.Validate refuses others).
func clean(s string) string {
	s = strings.TrimSpace(s)
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	if len(b) > isolation.MaxString {
		b = append(b[:isolation.MaxString-3], "..."...)
	}
	return string(b)
}
