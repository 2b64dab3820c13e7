//go:build e2e && realnode

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxrecord"
)

// kubeletSummary is the part of the kubelet's /stats/summary this test reads.
type kubeletSummary struct {
	Pods []struct {
		PodRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"podRef"`
		Containers []struct {
			Name string `json:"name"`
			CPU  *struct {
				Time                 time.Time `json:"time"`
				UsageCoreNanoSeconds *uint64   `json:"usageCoreNanoSeconds"`
			} `json:"cpu"`
		} `json:"containers"`
	} `json:"pods"`
}

// kubeletCPU is the kubelet's cumulative CPU time of the pod's container, and when it was
// measured, read from its /stats/summary through the API server's node proxy.
func kubeletCPU(ctx context.Context, node, ns, pod, container string) (time.Duration, time.Time, error) {
	body, err := kubeClient.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return 0, time.Time{}, err
	}
	var s kubeletSummary
	if err := json.Unmarshal(body, &s); err != nil {
		return 0, time.Time{}, err
	}
	for _, p := range s.Pods {
		if p.PodRef.Namespace != ns || p.PodRef.Name != pod {
			continue
		}
		for _, c := range p.Containers {
			if c.Name == container && c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil {
				return time.Duration(*c.CPU.UsageCoreNanoSeconds), c.CPU.Time, nil
			}
		}
	}
	return 0, time.Time{}, fmt.Errorf("no CPU figure for container %s of pod %s/%s in node %s's summary", container, ns, pod, node)
}

// lastUsage reads the sandbox's GET /record with the claim's token, from a pod of the runtime's
// namespace (the one its NetworkPolicy admits, as the metrics test scrapes it), and returns the
// last usage entry.
func lastUsage(t *testing.T, ctx context.Context, ns, name, sandboxURL, token string) (record.Entry, bool) {
	t.Helper()
	u := sandboxURL + sandboxrecord.Path
	res, err := runScraper(ctx, ns, name, []string{u}, map[string]string{u: token}, 30, u)
	if err != nil {
		t.Fatalf("reading the record: %v", err)
	}
	r := res[u]
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s answered %d: %s", u, r.Status, r.Error)
	}
	var last record.Entry
	found := false
	sc := bufio.NewScanner(strings.NewReader(r.Body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("a line of the record is not an entry: %q: %v", sc.Text(), err)
		}
		if e.Kind == record.KindUsage && e.Usage != nil {
			last, found = e, true
		}
	}
	return last, found
}

// TestRealNodeUsageCPUAgreesWithTheKubelet (issue 42, item 3): a session burns CPU in Bash; the
// CPU-seconds of sandboxd's usage entry (read from its GET /record with the claim's token) agree
// within 5% with the kubelet's figure for the sandbox's container (/stats/summary through the
// API server's node proxy), both read after the burn, once each has caught up with it: the
// entry appended at least 15 s after the burn ended, the kubelet's figure measured after it.
func TestRealNodeUsageCPUAgreesWithTheKubelet(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	e := newRealnodeEnv(t, "airlock-rn-usage", realnodeOptions{maxConcurrent: 2, maxPerSession: 2, maxInstances: 2})
	const burn = 20 // seconds of one busy core
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "usage", "handle": "codegen/default",
		"steps": []map[string]any{step("burn", "Bash", map[string]any{
			"command": fmt.Sprintf("timeout %d bash -c 'while :; do :; done'; echo burned", burn), "timeout": 120})}}
	var res rnSession
	e.runClient(t, "runtime-usage", "session", plan, 4*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("runtime session: phase %q error %q", res.Phase, res.Error)
	}
	if c := res.call(t, "burn"); c.Err != "" || !strings.Contains(c.Text, "burned") {
		t.Fatalf("the burn: %q %s", c.Err, c.Text)
	}
	burnEnded := time.Now()
	claim, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, res.Claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := sandboxToken(t, ctx, e.ns, res.Claim)

	// sandboxd appends a usage entry each minute: wait for one made 15 s or more after the burn
	// (the burn's CPU is in it, and in the kubelet's next housekeeping).
	var entry record.Entry
	reads := 0
	err = wait.PollUntilContextTimeout(ctx, 15*time.Second, 4*time.Minute, false, func(ctx context.Context) (bool, error) {
		reads++
		u, ok := lastUsage(t, ctx, e.ns, fmt.Sprintf("read-record-%d", reads), res.URL, token)
		if !ok {
			return false, nil
		}
		at, err := time.Parse(time.RFC3339Nano, u.Time)
		if err != nil {
			return false, err
		}
		entry = u
		return at.After(burnEnded.Add(15 * time.Second)), nil
	})
	if err != nil {
		t.Fatalf("waiting for a usage entry made after the burn (the last read: %+v): %v", entry, err)
	}
	var kubelet time.Duration
	var measured time.Time
	eventually(t, 2*time.Minute, "the kubelet's CPU figure measured after the burn", func(ctx context.Context) (bool, error) {
		var err error
		kubelet, measured, err = kubeletCPU(ctx, pod.Spec.NodeName, e.ns, pod.Name, sandboxpod.ContainerName)
		if err != nil {
			t.Logf("kubelet summary: %v", err)
			return false, nil
		}
		return measured.After(burnEnded.Add(15 * time.Second)), nil
	})
	sandboxd := time.Duration(entry.Usage.CPUMillis) * time.Millisecond
	diff := math.Abs(sandboxd.Seconds()-kubelet.Seconds()) / kubelet.Seconds()
	t.Logf("CPU of the sandbox's container: sandboxd's usage entry %v (at %s, %d tool calls, %d MiB-s), the kubelet's %v (at %s): %.2f%% apart",
		sandboxd, entry.Time, entry.Usage.ToolCalls, entry.Usage.MemoryMiBSeconds, kubelet, measured.Format(time.RFC3339), 100*diff)
	if entry.Message != "" {
		t.Errorf("the usage entry says %q: sandboxd could not measure everything", entry.Message)
	}
	if kubelet < time.Second {
		t.Fatalf("the kubelet counts %v of CPU for a %d s burn: nothing to compare", kubelet, burn)
	}
	if diff > 0.05 {
		t.Errorf("sandboxd's CPU figure %v and the kubelet's %v are %.2f%% apart, more than 5%%", sandboxd, kubelet, 100*diff)
	}
	if entry.Usage.ToolCalls < 1 {
		t.Errorf("the usage entry counts %d tool calls, want the burn's", entry.Usage.ToolCalls)
	}
}
