//go:build e2e && realnode

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestRealNodeUnknownPodAddressUnreachable: a pod cannot open a connection to an address of the
// node's pod CIDR that no pod known to the node's network policy has: such an address is a pod
// the apiserver has not published yet (a new sandbox among them), whose ingress policy is not
// known, and a connection opened then outlives the policy's arrival (docs/isolation.md, "What the
// evidence found on the local node"). The address is held by a network namespace of the test's
// on the pod bridge, with a listener that the node itself reaches (the control); a pod with no
// NetworkPolicy of its own reaches kube-dns (the other control) and not the listener.
func TestRealNodeUnknownPodAddressUnreachable(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	cidr, bridge, gateway := podBridge(t)
	addr := freePodAddress(t, cidr, gateway)
	const netns, hostEnd, nsEnd = "airlock-e2e-unknown", "ae2e-h", "ae2e-p"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", netns).Run() // a previous run's, if any
	_ = exec.Command("ip", "link", "del", hostEnd).Run()
	ip("netns", "add", netns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostEnd).Run()
		_ = exec.Command("ip", "netns", "del", netns).Run()
	})
	ones, _ := cidr.Mask.Size()
	ip("link", "add", hostEnd, "type", "veth", "peer", "name", nsEnd)
	ip("link", "set", nsEnd, "netns", netns)
	ip("link", "set", hostEnd, "master", bridge, "up")
	ip("-n", netns, "addr", "add", fmt.Sprintf("%s/%d", addr, ones), "dev", nsEnd)
	ip("-n", netns, "link", "set", nsEnd, "up")
	ip("-n", netns, "link", "set", "lo", "up")
	ip("-n", netns, "route", "add", "default", "via", gateway.String())

	ln := listenInNetns(t, "/var/run/netns/"+netns, net.JoinHostPort(addr.String(), "8099"))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "unknown pod") }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	target := net.JoinHostPort(addr.String(), "8099")
	// The control: the node reaches it (its connections are not judged as a pod's).
	eventually(t, 30*time.Second, "the listener at "+target+" from the node", func(ctx context.Context) (bool, error) {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", target)
		if err == nil {
			conn.Close()
		}
		return err == nil, nil
	})

	dns := net.JoinHostPort(serviceIP(t, "kube-system", "kube-dns"), "53")
	ns := newNamespace(t, "airlock-rn-unknown")
	plan, err := json.Marshal(map[string]any{"api": "http://127.0.0.1:1", "plainHTTP": true, "namespace": ns, "runtime": "none", "session": "none", "handle": "none/none", "probes": []string{dns, target}})
	if err != nil {
		t.Fatal(err)
	}
	pod := restrictedPod("prober", map[string]string{"app": "prober"}, realnodeClientImage(), []string{"session", "-plan", string(plan)})
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	_, logs, err := runPodToEnd(ctx, ns, pod, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var res rnSession
	for _, line := range strings.Split(string(logs), "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			if err := json.Unmarshal([]byte(rest), &res); err != nil {
				t.Fatalf("the prober printed %q: %v", rest, err)
			}
		}
	}
	if res.Probes[dns] != "OPEN" {
		t.Fatalf("control: the prober reached kube-dns (%s): %q, want OPEN; logs:\n%s", dns, res.Probes[dns], logs)
	}
	if got := res.Probes[target]; got != "BLOCKED" {
		t.Errorf("a pod connected to %s, an address of the pod CIDR no known pod has: %q, want BLOCKED", target, got)
	}
	pods, err := kubeClient.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "status.podIP=" + addr.String()})
	if err == nil && len(pods.Items) > 0 {
		t.Fatalf("pod %s/%s got the test's address %s meanwhile: the result says nothing", pods.Items[0].Namespace, pods.Items[0].Name, addr)
	}
}

// podBridge is the node's pod network: the interface that holds the gateway address of a running
// pod's network (the bridge the CNI plugin attaches pods to), its prefix and that address.
func podBridge(t *testing.T) (*net.IPNet, string, net.IP) {
	t.Helper()
	pods, err := kubeClient.CoreV1().Pods(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		podIP := net.ParseIP(p.Status.PodIP)
		if p.Spec.HostNetwork || podIP == nil {
			continue
		}
		for _, iface := range ifaces {
			addrs, _ := iface.Addrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && !n.IP.Equal(podIP) && n.Contains(podIP) && n.IP.To4() != nil {
					return &net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}, iface.Name, n.IP
				}
			}
		}
	}
	t.Fatal("no interface of the node holds the gateway of a running pod's network")
	return nil, "", nil
}

// freePodAddress is the highest address of cidr that no pod and not the gateway has (the node's
// IPAM gives out the lowest free ones first).
func freePodAddress(t *testing.T, cidr *net.IPNet, gateway net.IP) net.IP {
	t.Helper()
	pods, err := kubeClient.CoreV1().Pods(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var taken []string
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			taken = append(taken, p.Status.PodIP)
		}
	}
	base := cidr.IP.To4()
	ones, bits := cidr.Mask.Size()
	for i := (1 << (bits - ones)) - 2; i > 1; i-- { // not the broadcast, not the network
		a := net.IPv4(base[0], base[1], base[2], base[3]).To4()
		a[2] += byte(i >> 8)
		a[3] += byte(i)
		if !a.Equal(gateway) && !slices.Contains(taken, a.String()) {
			return a
		}
	}
	t.Fatalf("no free address in %s", cidr)
	return nil
}

// listenInNetns listens on addr in the network namespace at path: the socket is made on a thread
// moved into it, which is moved back after.
func listenInNetns(t *testing.T, path, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	target, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("setns %s: %v", path, err)
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		panic(fmt.Sprintf("setns back: %v", err)) // the thread is in the wrong namespace: end it all
	}
	if lerr != nil {
		t.Fatalf("listening on %s in %s: %v", addr, path, lerr)
	}
	return ln
}
