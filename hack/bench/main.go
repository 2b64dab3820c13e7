// Command bench measures airlock's claim admission and binding under load: open-loop acquires
// through the Sandbox API with real ServiceAccount tokens, on a plane hack/bench.sh brings up (its
// state dir holds the components' pid files and the API server's audit log). It prints a table
// per scenario and writes every figure to a JSON file. It is not part of bin/airlock.
//
// usage: hack/bench.sh (make bench); the flags below are what the script passes.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

// idleWindow is how long the plane's idle CPU is measured before the first scenario.
const idleWindow = 5 * time.Second

type options struct {
	// product is what is measured: airlock or agent-sandbox (product.go).
	product string

	kubeconfig, stateDir, apiURL, operatorMetricsURL, operatorUser string
	// apiCAFile and apiServerName verify the Sandbox API's certificate.
	apiCAFile, apiServerName                  string
	scenarios                                 string
	sizes                                     sizes
	acquireTimeout, fillStall                 time.Duration
	operatorFlags, planeNotes, output, commit string
	operatorHistograms, passMetric            string
	// baseline is the committed baseline (baseline.go); writeBaseline replaces its figures with
	// the run's.
	baseline      string
	writeBaseline bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "compare" {
		os.Exit(compareMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "day-trace" {
		os.Exit(dayTraceMain(os.Args[2:], os.Stderr))
	}
	var o options
	flag.StringVar(&o.product, "product", productAirlock, "What is measured: "+productAirlock+" (through its Sandbox API) or "+productPeer+" (the peer, through SandboxClaims; peer.go).")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "Admin kubeconfig of the bench plane.")
	flag.StringVar(&o.stateDir, "state-dir", "", "The plane's state dir: <component>.pid files and audit.log.")
	flag.StringVar(&o.apiURL, "api-url", "", "The operator's Sandbox API (airlock only).")
	flag.StringVar(&o.apiCAFile, "api-ca-file", "", "The CA bundle that verifies the Sandbox API (https:// URLs).")
	flag.StringVar(&o.apiServerName, "api-server-name", "", "The name the Sandbox API's certificate is for, when not the URL's host.")
	flag.StringVar(&o.operatorMetricsURL, "operator-metrics-url", "", "The product's controller's /metrics (plain HTTP).")
	flag.StringVar(&o.operatorUser, "operator-user", "", "The API user the product's controller runs as (its writes are told apart in the audit log by it).")
	flag.StringVar(&o.scenarios, "scenarios", "rate10,rate20,rate40,burst60,warm20", "Comma list of "+strings.Join(scenarioNames(), ", ")+".")
	flag.IntVar(&o.sizes.Claims, "claims", 200, "Acquires of each rate scenario.")
	flag.IntVar(&o.sizes.ScaleAcquires, "scale-acquires", 100, "Acquires at 10/s on top of the scale runs' live claims.")
	flag.IntVar(&o.sizes.ScaleOne, "scale-one", 2000, "Live claims of scale2000, in one namespace.")
	flag.IntVar(&o.sizes.ScalePerNamespace, "scale-per-namespace", 500, "Live claims of scale10x500 in each of its 10 namespaces.")
	flag.Float64Var(&o.sizes.DaySpeedUp, "day-speedup", defaultDaySpeedUp, "How many times faster than the day warm-day replays its trace (96: 24 h in 15 min).")
	flag.DurationVar(&o.acquireTimeout, "acquire-timeout", 5*time.Minute, "How long one acquire may wait for Bound.")
	flag.DurationVar(&o.fillStall, "fill-stall", 3*time.Minute, "The scale runs give up when no claim of the fill has become Bound (or Refused, Failed) for this long.")
	flag.StringVar(&o.operatorFlags, "operator-flags", "", "The operator's extra flags (recorded in the output).")
	flag.StringVar(&o.planeNotes, "plane-notes", "", "What is special about the plane (recorded in the output).")
	flag.StringVar(&o.output, "output", "", "The JSON file to write.")
	flag.StringVar(&o.commit, "commit", "", "The commit the operator was built from (recorded in the output).")
	flag.StringVar(&o.operatorHistograms, "operator-histograms", `^(airlock_.*_seconds|rest_client_rate_limiter_duration_seconds|rest_client_request_duration_seconds|workqueue_(queue|work)_duration_seconds)$`,
		"Histograms of the operator's /metrics whose change over each window is reported (regexp).")
	flag.StringVar(&o.passMetric, "pass-metric", `^airlock_.*(pass|decision).*_seconds$`,
		"The operator's histogram of one admission decision pass, when it has one (regexp; the first match is shown in the table).")
	flag.StringVar(&o.baseline, "baseline", "", "The committed baseline (hack/bench/baseline.json): printed beside each figure, and a scenario more than 25% slower is said so.")
	flag.BoolVar(&o.writeBaseline, "write-baseline", false, "Write the run's figures into --baseline (make bench-baseline: on purpose, on a quiet machine).")
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	if o.product != productAirlock && o.product != productPeer {
		return fmt.Errorf("unknown --product %q (known: %s, %s)", o.product, productAirlock, productPeer)
	}
	required := map[string]string{"kubeconfig": o.kubeconfig, "state-dir": o.stateDir,
		"operator-metrics-url": o.operatorMetricsURL, "operator-user": o.operatorUser, "output": o.output}
	if o.product == productAirlock {
		required["api-url"] = o.apiURL
	}
	var missing []string
	for name, v := range required {
		if v == "" {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("missing %s (hack/bench.sh passes them; run `make bench`)", strings.Join(missing, ", "))
	}
	if o.acquireTimeout <= 0 || o.fillStall <= 0 {
		return fmt.Errorf("--acquire-timeout and --fill-stall must be positive")
	}
	if o.writeBaseline && o.baseline == "" {
		return fmt.Errorf("--write-baseline needs --baseline")
	}
	scenarios, err := parseScenarios(o.scenarios, o.sizes)
	if err != nil {
		return err
	}
	for _, s := range scenarios {
		if (s.FillNamespaces > 0 || s.WarmPolicy != nil) && o.product != productAirlock {
			return fmt.Errorf("scenario %s: airlock's only (the scale runs fill through its Sandbox API; warm-demand and warm-day size their pool by demand); %s runs %s only", s.Name, o.product, strings.Join(peerScenarios(), ", "))
		}
	}
	for _, re := range []string{o.operatorHistograms, o.passMetric} {
		if _, err := regexp.Compile(re); err != nil {
			return fmt.Errorf("bad regexp %q: %w", re, err)
		}
	}
	return nil
}

func run(ctx context.Context, o options) error {
	scenarios, _ := parseScenarios(o.scenarios, o.sizes)
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", o.kubeconfig, err)
	}
	// The bench's own requests (setup, watches, scrapes) must not wait on a client rate limit.
	cfg.QPS, cfg.Burst = 1000, 2000
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	airlock, err := airlockclientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	apiTLS, err := apiTLSConfig(o.apiCAFile, o.apiServerName)
	if err != nil {
		return err
	}
	k := kube{core: core, airlock: airlock, dynamic: dyn}
	prod, err := newProduct(o, k, &http.Client{Transport: &http.Transport{
		MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, IdleConnTimeout: 90 * time.Second,
		TLSClientConfig: apiTLS,
	}})
	if err != nil {
		return err
	}
	r := &runner{
		o:       o,
		clock:   clock.RealClock{},
		kube:    k,
		product: prod,
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, IdleConnTimeout: 90 * time.Second,
		}},
		histograms: regexp.MustCompile(o.operatorHistograms),
		pass:       regexp.MustCompile(o.passMetric),
	}
	if err := prod.prepare(ctx); err != nil {
		return err
	}
	report := newReport(o)
	if report.Baseline, err = readBaseline(o.baseline); err != nil {
		return fmt.Errorf("reading the baseline: %w", err)
	}
	if report.IdleCPUMsPerSec, err = r.idleCPU(ctx, idleWindow); err != nil {
		return fmt.Errorf("measuring idle CPU: %w", err)
	}
	report.print(os.Stdout)
	for i, s := range scenarios {
		res, err := r.runScenario(ctx, s, i == len(scenarios)-1)
		if res != nil {
			report.Results = append(report.Results, *res)
			res.print(os.Stdout)
		}
		if werr := report.write(o.output); werr != nil {
			return werr
		}
		if err != nil {
			return fmt.Errorf("scenario %s: %w", s.Name, err)
		}
	}
	report.printSummary(os.Stdout)
	fmt.Printf("\nwritten: %s\n", o.output)
	if o.writeBaseline {
		if err := report.Baseline.withRun(report, time.Now()).write(o.baseline); err != nil {
			return fmt.Errorf("writing the baseline: %w", err)
		}
		fmt.Printf("baseline written: %s (commit it on purpose)\n", o.baseline)
	}
	return nil
}

// apiTLSConfig verifies the Sandbox API with the CA bundle in caFile (none: the system's roots),
// for serverName when it is set.
func apiTLSConfig(caFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--api-ca-file: %w", err)
	}
	cfg.RootCAs = x509.NewCertPool()
	if !cfg.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--api-ca-file=%s holds no PEM certificate", caFile)
	}
	return cfg, nil
}
