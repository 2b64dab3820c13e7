//go:build e2e && realnode

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// monitoredFamily is one line of e2e/monitoring/monitored-metrics.txt: a metric family that the
// alerts or the dashboard use, its type and the process that exports it.
type monitoredFamily struct {
	name, kind, exporter string
}

// readMonitoredFamilies reads the list that e2e/monitoring generates from the rules and the
// dashboard (with the PromQL parser, which airlock's module does not link).
func readMonitoredFamilies(t *testing.T) []monitoredFamily {
	t.Helper()
	path := filepath.Join(repoRoot, "e2e", "monitoring", "monitored-metrics.txt")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []monitoredFamily
	for i, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("%s:%d: %q, want: name type exporter", path, i+1, line)
		}
		out = append(out, monitoredFamily{name: f[0], kind: f[1], exporter: f[2]})
	}
	if len(out) == 0 {
		t.Fatalf("%s lists no family", path)
	}
	return out
}

// scrapeResult is runtimeclient's answer for one URL of `scrape`.
type scrapeResult struct {
	Status   int `json:"status"`
	Families map[string]struct {
		Type           string             `json:"type"`
		Samples        int                `json:"samples"`
		HistogramSum   float64            `json:"histogramSum"`
		HistogramCount float64            `json:"histogramCount"`
		Counters       map[string]float64 `json:"counters"`
		Buckets        map[string]float64 `json:"histogramBuckets"`
	} `json:"families"`
	Error string `json:"error"`
	Body  string `json:"body"` // the answer of a raw URL, as it came
}

// runScraper runs runtimeclient's `scrape` in a pod of namespace ns, with no ServiceAccount token
// (Prometheus needs none for the operator's and the gateway's /metrics), and returns its answer
// by URL. bearer maps a URL to the token its scrape sends (a sandbox's /metrics needs its claim's).
func runScraper(ctx context.Context, ns, name string, urls []string, bearer map[string]string, seconds int, raw ...string) (map[string]scrapeResult, error) {
	plan, err := json.Marshal(map[string]any{"urls": urls, "bearer": bearer, "scrapeSeconds": seconds, "raw": raw})
	if err != nil {
		return nil, err
	}
	pod := restrictedPod(name, map[string]string{"app": "scraper"}, realnodeClientImage(), []string{"scrape", "-plan", string(plan)})
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	phase, logs, err := runPodToEnd(ctx, ns, pod, 3*time.Minute)
	if err != nil {
		return nil, err
	}
	var result string
	for _, line := range strings.Split(string(logs), "\n") {
		if strings.HasPrefix(line, "RESULT ") {
			result = strings.TrimPrefix(line, "RESULT ")
		}
	}
	if phase != corev1.PodSucceeded || result == "" {
		return nil, fmt.Errorf("scraper pod %s/%s ended %s; logs:\n%s", ns, name, phase, logs)
	}
	out := map[string]scrapeResult{}
	if err := json.Unmarshal([]byte(result), &out); err != nil {
		return nil, fmt.Errorf("scraper pod %s printed %q: %w", name, result, err)
	}
	return out, nil
}

// monitoringNamespace makes the namespace `monitoring`, from which the operator's NetworkPolicy
// admits scrapes (networkPolicy.metricsNamespaces), unless it exists; one made here is removed
// when the test ends. A previous run's, still being deleted, is waited for and made again.
func monitoringNamespace(t *testing.T) string {
	t.Helper()
	const name = "monitoring"
	var created bool
	eventually(t, 2*time.Minute, "namespace "+name+" to be Active", func(ctx context.Context) (bool, error) {
		n, err := kubeClient.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = kubeClient.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "airlock.dev/e2e": "true"},
			}}, metav1.CreateOptions{})
			created = created || err == nil
			return false, err
		}
		return err == nil && n.Status.Phase == corev1.NamespaceActive, err
	})
	if created {
		t.Cleanup(func() {
			_ = kubeClient.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	return name
}

// TestRealNodeMetricsScraped (issue 27, item 2): every metric family the alerts and the
// dashboard use (e2e/monitoring/monitored-metrics.txt) is in what the running operator and a
// sandbox's sandboxd serve on /metrics, with the type the list says. The test first makes the
// events after which the labelled families have a series at all: an acquire that adopts a warm
// member (or misses), tool calls and renewals, a session closed and synced back, a claim left
// Bound (the claims-by-phase gauge counts live claims). The operator's replicas are scraped as
// the chart's ServiceMonitor does, each at its pod IP on the metrics port, from a pod in the
// namespace `monitoring` (the one the operator's NetworkPolicy admits); a scrape from the
// runtimes' namespace is refused by that policy. sandboxd is scraped from the runtime's
// namespace, the only one its NetworkPolicy admits, with the claim's bearer token (as /mcp is
// called); the same scrape without the token gets 401 and no metric (issue 39).
func TestRealNodeMetricsScraped(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	monitored := readMonitoredFamilies(t)
	mon := monitoringNamespace(t)
	e := newRealnodeEnv(t, "airlock-rn-metrics", realnodeOptions{
		maxConcurrent: 5, maxPerSession: 3, maxInstances: 5, targetPath: "results/metrics", warm: 1,
	})
	kept := e.metricsEvents(t)

	pods := operatorPods(t, ctx)
	var operatorURLs []string
	for _, p := range pods {
		operatorURLs = append(operatorURLs, fmt.Sprintf("http://%s:8080/metrics", p.Status.PodIP))
	}
	sort.Strings(operatorURLs)
	sandboxURL := kept.URL + "/metrics"
	noTokenURL := sandboxURL + "?without-token" // the same endpoint: the query is ignored
	token := sandboxToken(t, ctx, e.ns, kept.Claim)

	var opScrape, rtScrape map[string]scrapeResult
	var opErr, rtErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		opScrape, opErr = runScraper(ctx, mon, "scrape-operator", operatorURLs, nil, 60)
	}()
	// From the runtimes' namespace: the sandbox answers; the operator's metrics port does not
	// (10 s without an answer counts as refused; the sandbox answers at once).
	rtScrape, rtErr = runScraper(ctx, e.ns, "scrape-sandbox", []string{sandboxURL, noTokenURL, operatorURLs[0]}, map[string]string{sandboxURL: token}, 10)
	wg.Wait()
	if opErr != nil || rtErr != nil {
		t.Fatalf("scraper pods: %v / %v", opErr, rtErr)
	}

	served := map[string]map[string]string{ // exporter -> family -> type
		"operator": servedFamilies(t, "operator replica", opScrape, operatorURLs...),
		"sandboxd": servedFamilies(t, "sandboxd", rtScrape, sandboxURL),
	}
	if r := rtScrape[noTokenURL]; r.Status != http.StatusUnauthorized || len(r.Families) != 0 {
		t.Errorf("scrape of the sandbox's /metrics without the claim's token answered %d (%d families), want 401 and none", r.Status, len(r.Families))
	}
	if r := rtScrape[operatorURLs[0]]; r.Status != 0 || r.Error == "" {
		t.Errorf("scrape of the operator's metrics port from the runtime's namespace %s answered %d (%d families): the NetworkPolicy admits only %s", e.ns, r.Status, len(r.Families), mon)
	}

	var report []string
	for _, f := range monitored {
		if f.exporter == "prometheus" {
			report = append(report, fmt.Sprintf("  %-62s made by Prometheus itself, not scraped", f.name))
			continue
		}
		if f.exporter == "egress" {
			report = append(report, fmt.Sprintf("  %-62s the egress gateway's: scraped by TestRealNodeEgress", f.name))
			continue
		}
		got, ok := served[f.exporter][f.name]
		switch {
		case !ok:
			t.Errorf("%s (%s) is used by the alerts or the dashboard, but %s does not serve it", f.name, f.kind, f.exporter)
		case f.kind != "custom" && got != f.kind:
			t.Errorf("%s is served by %s as a %s, the list says %s", f.name, f.exporter, got, f.kind)
		default:
			report = append(report, fmt.Sprintf("  %-62s %-9s served by %s", f.name, got, f.exporter))
		}
	}
	t.Logf("monitored families in the scrapes (%d operator replicas, one sandbox):\n%s", len(operatorURLs), strings.Join(report, "\n"))
}

// metricsEvents makes the events after which the monitored labelled families have a series: two
// sessions of the codegen sandbox (warm adoptions, acquires, admission, binding, a tool call and a
// renewal each), one closed and synced back (reaping, sync-back), one left Bound (the
// claims-by-phase gauge). It returns the session left Bound.
func (e *realnodeEnv) metricsEvents(t *testing.T) rnSession {
	t.Helper()
	write := []map[string]any{step("write", "Write", map[string]any{"file_path": "metrics.txt", "content": "scraped\n"})}
	kept := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "kept", "handle": "codegen/default", "steps": write}
	closed := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "closed", "handle": "codegen/default", "steps": write, "close": true}
	var keptRes, closedRes rnSession
	var closedErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		closedErr = e.runClientErr("runtime-closed", "session", closed, 4*time.Minute, &closedRes)
	}()
	keptErr := e.runClientErr("runtime-kept", "session", kept, 4*time.Minute, &keptRes)
	wg.Wait()
	if keptErr != nil || closedErr != nil {
		t.Fatalf("runtime pods: %v / %v", keptErr, closedErr)
	}
	for _, r := range []*rnSession{&keptRes, &closedRes} {
		if r.Error != "" || r.Phase != "Bound" {
			t.Fatalf("runtime session: phase %q error %q", r.Phase, r.Error)
		}
		if c := r.call(t, "write"); c.Err != "" || c.IsError {
			t.Fatalf("Write in %s: %q %s", r.Claim, c.Err, c.Text)
		}
	}
	eventually(t, 3*time.Minute, "claim "+closedRes.Claim+" to be synced back and deleted", func(ctx context.Context) (bool, error) {
		_, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, closedRes.Claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	return keptRes
}

// servedFamilies checks that each of urls answered a scrape with 200 and returns the union of
// the families with samples that they serve, with their types.
func servedFamilies(t *testing.T, what string, scrapes map[string]scrapeResult, urls ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, u := range urls {
		r := scrapes[u]
		if r.Status != 200 || r.Error != "" || len(r.Families) == 0 {
			t.Errorf("scrape of %s %s: status %d, %d families, error %q", what, u, r.Status, len(r.Families), r.Error)
		}
		for name, f := range r.Families {
			if f.Samples > 0 {
				out[name] = f.Type
			}
		}
	}
	return out
}

// sandboxToken is the bearer token of the claim's sandbox: the claim's own (its token Secret),
// or, for a claim that adopted a warm member, the adoption token the Sandbox API hands its
// runtime (derived from the operator's key, which the suite's administrator may read). Which of
// two concurrent sessions adopts the one warm member is theirs to race.
func sandboxToken(t *testing.T, ctx context.Context, ns, claimName string) string {
	t.Helper()
	c, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Warm == nil {
		return string(claimSecret(t, ctx, ns, claimName).Data[sandboxpod.TokenKey])
	}
	var tools []string
	if c.Status.Frozen != nil {
		for _, tool := range c.Status.Frozen.AllowedTools {
			tools = append(tools, string(tool))
		}
	}
	token, err := claimtoken.NewSource(kubeClient, operatorNamespace).AdoptionToken(ctx, ns, c.Status.Warm.Member, c.UID, tools)
	if err != nil {
		t.Fatalf("the warm claim %s's adoption token: %v", claimName, err)
	}
	return token
}
