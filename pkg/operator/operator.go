package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go, workqueue and leader election metrics
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/controller/claim"
	"github.com/airlock-dev/airlock/pkg/controller/egressca"
	"github.com/airlock-dev/airlock/pkg/controller/isolationkey"
	airlockscheme "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/scheme"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/servingcert"
	"github.com/airlock-dev/airlock/pkg/usage"
	"github.com/airlock-dev/airlock/pkg/version"
)

// Run runs the operator until ctx is done, then shuts it down in order: the controllers stop and
// are waited for, the lease is released, the HTTP servers drain, the informers stop. It returns
// nil after a requested shutdown, and an error when the operator cannot start or must not go on
// (for one, when it lost the lease it held).
func Run(ctx context.Context, cfg *Config) error {
	o, err := newOperator(ctx, cfg)
	if err != nil {
		return err
	}
	if err := o.listen(); err != nil {
		return err
	}
	return o.run(ctx)
}

// operator is one running `airlock operator`.
type operator struct {
	cfg *Config

	airlockInformers airlockinformers.SharedInformerFactory
	// serviceInformers caches every Service of the cluster, stripped to selector and ports
	// (claim.StripService): the claim controller opens NetworkPolicies to the allowed ones.
	serviceInformers kubeinformers.SharedInformerFactory
	// keptInformers caches the kept workspaces' records (Jobs labelled as records) on every
	// replica: the Sandbox API reads a legacy record from the API server only when it may exist
	// (sandboxapi.Config.KeptRecordCache).
	keptInformers kubeinformers.SharedInformerFactory
	readiness     *readiness
	// tokens holds the claim token key (a Secret in the operator's namespace).
	tokens *claimtoken.Source
	// secretInformers caches the one Secret of the self-signed serving certificate, and issuer
	// keeps it current; both nil in other TLS modes. issuer runs on every replica.
	secretInformers kubeinformers.SharedInformerFactory
	issuer          *servingcert.Issuer
	issuing         sync.WaitGroup
	// stopIssuer stops the issuer and waits for it (set by run).
	stopIssuer func()
	// caBundle is what the leader publishes for runtimes (nil: nothing to publish).
	caBundle cabundle.Source
	watchdog *leaderelection.HealthzAdaptor
	servers  []*httpServer
	// stopServing ends the context of the requests in flight when shutdown begins.
	stopServing context.CancelFunc
	// controllers are what the leader runs: a test seam, newControllerDescriptors() otherwise.
	controllers []controllerDescriptor
}

// newOperator builds the operator's parts; nothing runs yet.
func newOperator(ctx context.Context, cfg *Config) (*operator, error) {
	o := &operator{
		cfg: cfg,
		// Managed fields are never read: the caches drop them, as kube-controller-manager's do
		// (an update without them leaves the server's as they are).
		airlockInformers: airlockinformers.NewSharedInformerFactoryWithOptions(cfg.AirlockClient, 0,
			airlockinformers.WithTransform(sandboxpod.StripManagedFields)),
		serviceInformers: kubeinformers.NewSharedInformerFactoryWithOptions(cfg.KubeClient, 0,
			kubeinformers.WithTransform(sandboxpod.StripService)),
		keptInformers: newKeptRecordInformers(cfg.KubeClient),
		watchdog:      leaderelection.NewLeaderHealthzAdaptor(leaderHealthzTimeout),
		controllers:   newControllerDescriptors(),
		tokens:        claimtoken.NewSource(cfg.KubeClient, cfg.Namespace),
	}

	// Every replica keeps these caches: the Sandbox API answers from them, and the leader's
	// controllers share them.
	airlock := o.airlockInformers.Airlock().V1alpha1()
	o.readiness = &readiness{informers: []namedInformer{
		{name: "sandboxclasses", informer: airlock.SandboxClasses().Informer()},
		{name: "toolregistries", informer: airlock.ToolRegistries().Informer()},
		{name: "agentruntimes", informer: airlock.AgentRuntimes().Informer()},
		{name: "sandboxclaims", informer: airlock.SandboxClaims().Informer()},
		{name: "allowedservices", informer: o.serviceInformers.Core().V1().Services().Informer()},
		{name: "keptworkspaces", informer: o.keptInformers.Batch().V1().Jobs().Informer()},
	}}
	api, err := newSandboxAPI(ctx, cfg, o.airlockInformers, o.keptInformers.Batch().V1().Jobs(), o.tokens)
	if err != nil {
		return nil, err
	}

	healthChecks := []checker{pingCheck{}}
	if cfg.LeaderElection.LeaderElect {
		healthChecks = append(healthChecks, o.watchdog)
	}
	healthz := checkHandler("healthz", http.StatusInternalServerError, healthChecks...)
	var metrics http.Handler
	if cfg.MetricsBindAddress != DisabledBindAddress {
		metrics = legacyregistry.Handler()
	}

	apiTLS, readyChecks, err := o.newServingTLS(ctx)
	if err != nil {
		return nil, err
	}

	readyz := checkHandler("readyz", http.StatusServiceUnavailable, append([]checker{o.readiness, tokenKeyCheck{o.tokens}}, readyChecks...)...)

	servingCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	o.stopServing = stopServing
	probes := http.NewServeMux()
	probes.Handle("GET /healthz", healthz)
	probes.Handle("GET /readyz", readyz)
	o.servers = append(o.servers,
		newHTTPServer("health probes", "--health-probe-bind-address", cfg.HealthProbeBindAddress, probes, nil, servingCtx),
		newHTTPServer("Sandbox API", "--api-bind-address", cfg.APIBindAddress, newAPIHandler(healthz, readyz, api), apiTLS, servingCtx),
	)
	if metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics)
		if cfg.Profiling {
			mux.HandleFunc("GET /debug/pprof/", pprof.Index)
			mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		}
		o.servers = append(o.servers, newHTTPServer("metrics", "--metrics-bind-address", cfg.MetricsBindAddress, mux, nil, servingCtx))
	}
	return o, nil
}

// newServingTLS returns the Sandbox API's TLS configuration for cfg.TLSMode (nil for plain
// HTTP) and the readiness checks it adds, and sets up the issuer and the bundle to publish.
func (o *operator) newServingTLS(ctx context.Context) (*tls.Config, []checker, error) {
	cfg := o.cfg
	switch cfg.TLSMode {
	case TLSModeSelfSigned:
		store := servingcert.NewStore()
		o.secretInformers = servingcert.NewSecretInformerFactory(cfg.KubeClient, cfg.Namespace)
		issuer, err := servingcert.NewIssuer(cfg.KubeClient, cfg.Namespace, o.secretInformers.Core().V1().Secrets(), servingcert.DefaultPolicy(cfg.TLSSANs), store)
		if err != nil {
			return nil, nil, fmt.Errorf("the Sandbox API's serving certificate (--tls-sans): %w", err)
		}
		o.issuer, o.caBundle = issuer, store
		return &tls.Config{GetCertificate: store.GetCertificate, MinVersion: tls.VersionTLS12}, []checker{store}, nil
	case TLSModeFiles:
		src, err := servingcert.NewFileSource(klog.FromContext(ctx), cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("loading the Sandbox API's certificate: %w", err)
		}
		if cfg.TLSCAFile != "" {
			o.caBundle = src
		}
		return &tls.Config{GetCertificate: src.GetCertificate, MinVersion: tls.VersionTLS12}, nil, nil
	case TLSModeNone:
		return nil, nil, nil
	default:
		return nil, nil, fmt.Errorf("unknown TLS mode %q (--tls-mode)", cfg.TLSMode)
	}
}

// listen binds every server's address.
func (o *operator) listen() error {
	for i, s := range o.servers {
		if err := s.listen(); err != nil {
			for _, bound := range o.servers[:i] {
				bound.close()
			}
			return err
		}
	}
	return nil
}

// run runs the bound operator until ctx is done; see Run.
func (o *operator) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting airlock operator", "version", version.Get().String(), "identity", o.cfg.Identity)
	switch o.cfg.TLSMode {
	case TLSModeNone:
		logger.Info("Warning: --tls-mode=none, so the Sandbox API serves plain HTTP: runtimes' ServiceAccount tokens and the sandboxes' bearer tokens cross the network in clear")
	case TLSModeFiles:
		if o.cfg.TLSCAFile == "" {
			logger.Info("No --tls-ca-file: the operator publishes no CA bundle for runtimes (distribute the CA that verifies --tls-cert-file yourself)")
		}
	}
	if len(o.cfg.TokenAudiences) == 0 {
		logger.Info("Warning: --token-audiences is empty, so the Sandbox API accepts tokens for the Kubernetes API server's audience: whoever sees one can replay it against the API server")
	}

	// The broadcaster outlives ctx: the lease's "stopped leading" event is recorded after it ends.
	broadcaster := record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: o.eventClient().CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(newScheme(), corev1.EventSource{Component: ComponentName})

	// Serve first, so that probes answer while the operator starts and on standby replicas.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		serving   sync.WaitGroup
		mu        sync.Mutex
		serveErrs []error
	)
	for _, s := range o.servers {
		serving.Go(func() {
			if err := s.serve(ctx); err != nil {
				mu.Lock()
				serveErrs = append(serveErrs, err)
				mu.Unlock()
				cancel()
			}
		})
	}

	informersCtx, stopInformers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopInformers()
	issuerCtx, cancelIssuer := context.WithCancel(informersCtx)
	o.stopIssuer = func() {
		cancelIssuer()
		o.issuing.Wait()
	}
	defer o.stopIssuer()
	runErr := o.runInformersAndControllers(ctx, issuerCtx, informersCtx.Done(), recorder)

	// Shut down: the controllers have returned and the lease is released. Fail readiness first,
	// then drain the servers, then stop the informers the controllers no longer read.
	logger.Info("Shutting down")
	o.readiness.shuttingDown.Store(true)
	o.stopServing()
	shutdownCtx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), o.cfg.ShutdownTimeout)
	defer cancelShutdown()
	for _, s := range o.servers {
		if err := s.server.Shutdown(shutdownCtx); err != nil {
			logger.Error(err, "Failed to shut a server down gracefully", "server", s.name)
			_ = s.server.Close()
		}
	}
	serving.Wait()
	o.stopIssuer()
	stopInformers()
	o.airlockInformers.Shutdown()
	o.serviceInformers.Shutdown()
	o.keptInformers.Shutdown()
	if o.secretInformers != nil {
		o.secretInformers.Shutdown()
	}
	logger.Info("Stopped airlock operator")

	mu.Lock()
	defer mu.Unlock()
	return errors.Join(append([]error{runErr}, serveErrs...)...)
}

// runInformersAndControllers waits for the API server, starts the informers every replica keeps,
// and runs the controllers, under leader election when it is enabled, until ctx is done.
func (o *operator) runInformersAndControllers(ctx, issuerCtx context.Context, informersDone <-chan struct{}, recorder record.EventRecorder) error {
	logger := klog.FromContext(ctx)
	if err := waitForAPIServer(ctx, o.cfg.KubeClient, o.cfg.APIServerTimeout); err != nil {
		if ctx.Err() != nil {
			return nil // shutdown requested while waiting
		}
		return err
	}
	o.airlockInformers.Start(informersDone)
	if o.issuer != nil {
		// Every replica, leader or not: the API serves with the Secret's certificate.
		o.secretInformers.Start(informersDone)
		o.issuing.Go(func() {
			if err := o.issuer.Run(issuerCtx); err != nil && issuerCtx.Err() == nil {
				logger.Error(err, "The serving certificate issuer stopped")
			}
		})
	}
	// The key, before the controllers need it; a failure is retried by readyz and every use.
	if _, err := o.tokens.Key(ctx); err != nil {
		logger.Error(err, "Cannot read or create the claim token key yet: the Sandbox API answers 503 until it can", "secret", klog.KRef(o.cfg.Namespace, claimtoken.SecretName))
	}
	if o.cfg.EgressGateway != nil {
		// The gateway's proxy key, derived from the token key (the gateway never reads that one);
		// every replica writes the same value, retried until it is written.
		o.issuing.Go(func() { o.ensureProxyKey(issuerCtx) })
	}
	o.serviceInformers.Start(informersDone) // allowed Services: ready on every replica, for the next leader
	o.keptInformers.Start(informersDone)    // kept workspaces' records: the Sandbox API's

	cc := ControllerContext{
		KubeClient:            o.cfg.KubeClient,
		EventClient:           o.eventClient(),
		AirlockClient:         o.cfg.AirlockClient,
		AirlockInformers:      o.airlockInformers,
		AllowedServices:       o.serviceInformers.Core().V1().Services(),
		EventRecorder:         recorder,
		Workers:               o.cfg.Workers,
		SyncImage:             o.cfg.SyncImage,
		TracerProvider:        o.cfg.TracerProvider,
		Tokens:                o.tokens,
		CABundle:              o.caBundle,
		PoolKubeClient:        o.cfg.PoolKubeClient,
		PoolAirlockClient:     o.cfg.PoolAirlockClient,
		WarmRefillRate:        o.cfg.WarmRefillRate,
		EgressGateway:         o.cfg.EgressGateway,
		OperatorPeer:          o.cfg.OperatorPeer,
		ReadIsolationEvidence: o.cfg.ReadIsolationEvidence,
		EgressCA:              o.egressCA(),
		Namespace:             o.cfg.Namespace,
		RecordSigning:         newRecordSigning(o.tokens),
		RecordAirlockClient:   o.cfg.RecordAirlockClient,
	}
	// Each term caches the claims' children in informers of its own, stopped (after the
	// controllers have returned) when the term ends: a replica that lost the lease keeps no
	// leader-only cache, and the next term starts from a fresh list.
	lead := func(ctx context.Context) error {
		term := cc
		term.KubeInformers = newChildInformers(o.cfg.KubeClient)
		term.CABundleConfigMaps = cabundle.NewConfigMapInformerFactory(o.cfg.KubeClient, cabundle.ConfigMapName, cabundle.LabelBundle)
		term.IsolationKeySecrets = isolationkey.NewSecretInformerFactory(o.cfg.KubeClient, o.cfg.Namespace)
		term.IsolationKeys = isolationkey.NewKeys(term.IsolationKeySecrets.Core().V1().Secrets(), o.cfg.Namespace)
		term.Records = &recordLink{}
		if o.cfg.EgressGateway != nil {
			// The gateway's pods (a handful, in its namespace): the record reads their decisions.
			term.GatewayPods = kubeinformers.NewSharedInformerFactoryWithOptions(o.cfg.KubeClient, 0,
				kubeinformers.WithNamespace(o.cfg.EgressGateway.Namespace), kubeinformers.WithTransform(sandboxpod.StripManagedFields))
			defer term.GatewayPods.Shutdown()
		}
		// A ledger per term: it starts from the runtimes' status.usage (docs/record.md §3).
		term.Usage = usage.NewLedger(usage.DefaultMetrics())
		term.RecordObservers = append(term.RecordObservers, usageObserver(term.Usage), spanObserver(ctx, o.cfg.RecordSpans))
		termDone := make(chan struct{})
		defer term.KubeInformers.Shutdown()
		defer term.CABundleConfigMaps.Shutdown()
		defer term.IsolationKeySecrets.Shutdown()
		defer close(termDone)
		return runControllers(ctx, o.controllers, term, termDone, informersDone)
	}
	if !o.cfg.LeaderElection.LeaderElect {
		logger.Info("Warning: leader election is disabled (--leader-elect=false), so every replica of the operator runs the controllers: run a single replica")
		return lead(ctx)
	}
	return runWithLeaderElection(ctx, o.cfg, o.watchdog, recorder, lead)
}

// egressCA is the egress CA controller's configuration in the operator's namespace, nil for none.
func (o *operator) egressCA() *egressca.Config {
	if o.cfg.EgressCA == nil {
		return nil
	}
	cfg := *o.cfg.EgressCA
	cfg.Namespace = o.cfg.Namespace
	return &cfg
}

// newChildInformers returns an informer factory that lists and watches only the objects labelled
// claim.LabelClaim: the claims' children and sandbox pods.
func newChildInformers(client kubernetes.Interface) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = claim.LabelClaim }),
		kubeinformers.WithTransform(childTransform))
}

// newKeptRecordInformers returns an informer factory that lists and watches only the kept
// workspaces' records (labelled airlock.dev/kept-workspace=true): a handful of Jobs at most.
func newKeptRecordInformers(client kubernetes.Interface) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = airlockv1alpha1.LabelKeptWorkspace + "=" + airlockv1alpha1.LabelValueKeptWorkspace
		}),
		kubeinformers.WithTransform(sandboxpod.StripManagedFields))
}

// childTransform is the transform of the claims' children's caches: sandbox pods are stripped to
// what the claim controller reads (claim.StripPod), the other children lose their managed fields.
func childTransform(obj any) (any, error) {
	if _, ok := obj.(*corev1.Pod); ok {
		return sandboxpod.StripPod(obj)
	}
	return sandboxpod.StripManagedFields(obj)
}

// waitForAPIServer waits until the API server answers and serves the airlock.dev API, so that a
// wrong kubeconfig or missing CRDs fail the start with a clear error rather than with informers
// retrying forever.
func waitForAPIServer(ctx context.Context, client kubernetes.Interface, timeout time.Duration) error {
	logger := klog.FromContext(ctx)
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		err := checkAPIServer(ctx, client)
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil && lastErr != nil {
			return false, nil // cut short by the timeout: the previous error says more
		}
		if lastErr == nil || lastErr.Error() != err.Error() {
			logger.Info("Waiting for the Kubernetes API server", "err", err)
		}
		lastErr = err
		return false, nil
	})
	if err != nil && lastErr != nil && ctx.Err() == nil {
		return lastErr
	}
	return err
}

// checkAPIServer checks that the API server answers and serves the airlock.dev API.
func checkAPIServer(ctx context.Context, client kubernetes.Interface) error {
	groupVersion := airlockv1alpha1.SchemeGroupVersion.String()
	if _, err := withContext(ctx, client.Discovery().ServerVersion); err != nil {
		return fmt.Errorf("cannot reach the Kubernetes API server: %w", err)
	}
	_, err := withContext(ctx, func() (*metav1.APIResourceList, error) {
		return client.Discovery().ServerResourcesForGroupVersion(groupVersion)
	})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the Kubernetes API server does not serve %s: install the airlock CRDs (kubectl apply -k manifests/)", groupVersion)
	case err != nil:
		return fmt.Errorf("discovering %s: %w", groupVersion, err)
	}
	return nil
}

// withContext returns f's result, or ctx's error as soon as ctx ends. The discovery calls of this
// client-go take no context (their own timeout is 32 s): this keeps a shutdown from waiting on them.
func withContext[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// newScheme knows the kinds the operator records events about.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(airlockscheme.AddToScheme(scheme))
	return scheme
}

// eventClient is the client events are recorded with: Config.EventClient, else KubeClient.
func (o *operator) eventClient() kubernetes.Interface {
	if o.cfg.EventClient != nil {
		return o.cfg.EventClient
	}
	return o.cfg.KubeClient
}

// ensureProxyKey writes the egress gateway's proxy key Secret (claimtoken.ProxySecretName),
// retrying with backoff until it is written or ctx ends: until then the gateway refuses every
// request (not_synced).
func (o *operator) ensureProxyKey(ctx context.Context) {
	logger := klog.FromContext(ctx)
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 2 * time.Minute}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		if err := o.tokens.EnsureProxyKey(ctx); err != nil {
			logger.Error(err, "Cannot write the egress gateway's proxy key yet: the gateway refuses every request until it can", "secret", klog.KRef(o.cfg.Namespace, claimtoken.ProxySecretName))
			return false, nil
		}
		return true, nil
	})
}
