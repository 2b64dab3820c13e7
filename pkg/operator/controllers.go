package operator

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/controller/agentruntime"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/controller/claim"
	"github.com/airlock-dev/airlock/pkg/controller/defaultdeny"
	"github.com/airlock-dev/airlock/pkg/controller/egressca"
	"github.com/airlock-dev/airlock/pkg/controller/isolationkey"
	recordcontroller "github.com/airlock-dev/airlock/pkg/controller/record"
	"github.com/airlock-dev/airlock/pkg/controller/sandboxclass"
	"github.com/airlock-dev/airlock/pkg/controller/warmpool"
	"github.com/airlock-dev/airlock/pkg/controller/workspacegc"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// ControllerContext is what a controller is built from. The informer factories are shared by
// every controller (and, for airlock, by the Sandbox API): ask them for informers in a
// controllerInitFunc, and runControllers starts them. KubeInformers lists and watches only
// objects labelled claim.LabelClaim (the claims' children and sandbox pods), so that the
// operator does not cache the cluster's other objects; it is the leader's alone, made anew for
// each term and stopped when the term ends. AirlockInformers and AllowedServices run on every
// replica, for as long as the process.
type ControllerContext struct {
	KubeClient       kubernetes.Interface
	EventClient      kubernetes.Interface // events: a rate limiter of their own
	AirlockClient    airlockclientset.Interface
	KubeInformers    kubeinformers.SharedInformerFactory
	AirlockInformers airlockinformers.SharedInformerFactory
	// AllowedServices caches every Service, stripped to what a NetworkPolicy needs
	// (sandboxpod.StripService); it runs on every replica.
	AllowedServices coreinformers.ServiceInformer
	EventRecorder   record.EventRecorder

	// Workers is the number of workers each controller runs (--workers).
	Workers int
	// SyncImage is the image of sync-back Jobs (--sync-image).
	SyncImage string
	// Tokens derives the claims' tokens (and warm members' keys) from the operator's key.
	Tokens *claimtoken.Source
	// PoolKubeClient and PoolAirlockClient are the warm pool controller's own clients;
	// WarmRefillRate bounds its member creations per second.
	PoolKubeClient    kubernetes.Interface
	PoolAirlockClient airlockclientset.Interface
	WarmRefillRate    float64
	// EgressGateway is the egress gateway (--egress-gateway-service), nil for none.
	EgressGateway *sandboxpod.GatewayRef
	// OperatorPeer turns the operator's stop on (--operator-pod-labels), nil for off.
	OperatorPeer *sandboxpod.OperatorPeer
	// ReadIsolationEvidence, with OperatorPeer, reads sandboxes' isolation evidence before Bound.
	ReadIsolationEvidence bool
	// EgressCA is what the egress CA controller keeps (its Namespace the operator's) and the
	// distributor publishes, nil for nothing (--manage-egress-ca unset).
	EgressCA *egressca.Config
	// CABundle is the CA bundle the leader publishes for runtimes; nil when there is none to
	// publish (--tls-mode=none, or files without --tls-ca-file).
	CABundle cabundle.Source
	// CABundleConfigMaps lists and watches only the Sandbox API's bundle ConfigMaps
	// (cabundle.NewConfigMapInformerFactory of cabundle.ConfigMapName); like KubeInformers, the
	// term's own.
	CABundleConfigMaps kubeinformers.SharedInformerFactory
	// Namespace is the operator's.
	Namespace string
	// IsolationKeySecrets lists and watches only the isolation signing keys' Secret
	// (isolationkey.NewSecretInformerFactory), and IsolationKeys reads it: the claim controller
	// signs with them, the distributor publishes them, the isolation key controller keeps them.
	// Like KubeInformers, the term's own.
	IsolationKeySecrets kubeinformers.SharedInformerFactory
	IsolationKeys       *isolationkey.Keys
	// RecordAirlockClient is the record controller's own client (nil: AirlockClient).
	RecordAirlockClient airlockclientset.Interface
	// RecordSigning is the session record's signing key, derived from the token key; its
	// public half is published in airlock-ca (record-signing.pub).
	RecordSigning *recordSigning
	// Records links the claim controller to the term's record controller; the term's own.
	Records *recordLink
	// RecordObservers are told of every entry the record controller appends to a claim's
	// record, in order (recordcontroller.Observer: they must not block): the usage ledger's and
	// the trace export's feed.
	RecordObservers []recordcontroller.Observer
	// Usage sums the runtimes' usage (docs/record.md §3): the record controller feeds it
	// (Observe, for each entry it appends), the runtime controller writes status.usage from it.
	// Like KubeInformers, the term's own.
	Usage *usage.Ledger
	// GatewayPods caches the pods of the egress gateway's namespace, whose decisions the record
	// controller reads (nil without --egress-gateway-service). Like KubeInformers, the term's own.
	GatewayPods kubeinformers.SharedInformerFactory
	// TracerProvider is where the leader's spans go (the sync-backs'); nil: none.
	TracerProvider trace.TracerProvider
}

// A controllerInitFunc builds one controller and returns the function that runs it. It must not
// start anything itself: runControllers starts the informer factories once every controller has
// asked them for its informers, then calls each run function in its own goroutine. run must block
// until ctx is done and return only when all of the controller's goroutines have exited (the lease
// is released only after that); an error from run stops the operator.
type controllerInitFunc func(ctx context.Context, cc ControllerContext) (run func(ctx context.Context) error, err error)

// controllerDescriptor names a controller of the operator.
type controllerDescriptor struct {
	name string
	init controllerInitFunc
}

// newControllerDescriptors lists the controllers the leader runs.
func newControllerDescriptors() []controllerDescriptor {
	return []controllerDescriptor{
		{name: claim.ControllerName, init: startClaimController},
		{name: workspacegc.ControllerName, init: startWorkspaceGCController},
		{name: warmpool.ControllerName, init: startPoolController},
		{name: agentruntime.ControllerName, init: startRuntimeController},
		{name: cabundle.ControllerName, init: startCABundleController},
		{name: egressca.ControllerName, init: startEgressCAController},
		{name: sandboxclass.ControllerName, init: startClassController},
		{name: defaultdeny.ControllerName, init: startDefaultDenyController},
		{name: isolationkey.ControllerName, init: startIsolationKeyController},
		{name: recordcontroller.ControllerName, init: startRecordController},
	}
}

// startIsolationKeyController builds the controller of the isolation signing keys' Secret, on
// the term's informer of that Secret and the claims' informer.
func startIsolationKeyController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	c, err := isolationkey.NewController(cc.KubeClient, cc.Namespace, cc.IsolationKeySecrets.Core().V1().Secrets(),
		cc.AirlockInformers.Airlock().V1alpha1().SandboxClaims(), isolationkey.DefaultPolicy())
	if err != nil {
		return nil, err
	}
	// One Secret, written rarely: one worker.
	return func(ctx context.Context) error { return c.Run(ctx, 1) }, nil
}

// startDefaultDenyController builds the controller of the namespaces' standing default-deny
// NetworkPolicies, on the filtered NetworkPolicy informer (the policy carries LabelClaim).
func startDefaultDenyController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	airlock := cc.AirlockInformers.Airlock().V1alpha1()
	c, err := defaultdeny.NewController(ctx, cc.KubeClient, defaultdeny.Informers{
		NetworkPolicies: cc.KubeInformers.Networking().V1().NetworkPolicies(),
		Runtimes:        airlock.AgentRuntimes(),
		Registries:      airlock.ToolRegistries(),
	})
	if err != nil {
		return nil, err
	}
	// One policy per namespace, written rarely: one worker.
	return func(ctx context.Context) error { return c.Run(ctx, 1) }, nil
}

// startClassController builds the SandboxClass status controller.
func startClassController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	c, err := sandboxclass.NewController(ctx, cc.AirlockClient, cc.AirlockInformers.Airlock().V1alpha1().SandboxClasses())
	if err != nil {
		return nil, err
	}
	// Classes change rarely: one worker.
	return func(ctx context.Context) error { return c.Run(ctx, 1) }, nil
}

// startCABundleController builds the CA bundle distributor of the bundles there are: the Sandbox
// API's (cc.CABundle, on the term's CABundleConfigMaps) and the egress CA's (cc.EgressCA, on
// informers of its own: the one Secret, the bundle ConfigMaps; started and stopped with it);
// without either it only waits for the end of the term.
func startCABundleController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	airlock := cc.AirlockInformers.Airlock().V1alpha1()
	var bundles []cabundle.Bundle
	var own []kubeinformers.SharedInformerFactory
	if cc.CABundle != nil {
		// Beside the CA, the public keys that verify the operator's isolation attestations.
		var extras []cabundle.Extra
		if cc.IsolationKeys != nil {
			extras = append(extras, cabundle.Extra{Key: cabundle.IsolationKeysKey, Source: cc.IsolationKeys})
		}
		if cc.RecordSigning != nil {
			// And the public key that verifies the session records (airlock record).
			extras = append(extras, cabundle.Extra{Key: cabundle.RecordSigningKey, Source: cc.RecordSigning})
		}
		bundles = append(bundles, cabundle.SandboxAPIBundle(cc.CABundle, airlock.AgentRuntimes(), cc.CABundleConfigMaps.Core().V1().ConfigMaps(), extras...))
	}
	if cc.EgressCA != nil {
		secrets := egressca.NewSecretInformerFactory(cc.KubeClient, cc.EgressCA.Namespace)
		configMaps := cabundle.NewConfigMapInformerFactory(cc.KubeClient, cc.EgressCA.ConfigMapName, cabundle.EgressLabelBundle)
		source, err := egressca.NewBundleSource(secrets.Core().V1().Secrets(), cc.EgressCA.Namespace, cc.EgressCA.Roots)
		if err != nil {
			return nil, err
		}
		bundles = append(bundles, cabundle.EgressBundle(cc.EgressCA.ConfigMapName, source, source.HasSynced, airlock.SandboxClaims(),
			airlock.ToolRegistries(), airlock.SandboxClasses(), configMaps.Core().V1().ConfigMaps(), egressca.ControllerName))
		own = append(own, secrets, configMaps)
	}
	if len(bundles) == 0 {
		return func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		}, nil
	}
	c, err := cabundle.NewController(cc.KubeClient, bundles...)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		stop := make(chan struct{})
		for _, f := range own {
			f.Start(stop)
		}
		defer func() {
			close(stop)
			for _, f := range own {
				f.Shutdown()
			}
		}()
		// A ConfigMap per bundle and namespace, written rarely: one worker.
		return c.Run(ctx, 1)
	}, nil
}

// startEgressCAController builds the egress CA controller on an informer of its own (the one
// Secret; started and stopped with it); without --manage-egress-ca it only waits for the end of
// the term.
func startEgressCAController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	if cc.EgressCA == nil {
		return func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		}, nil
	}
	secrets := egressca.NewSecretInformerFactory(cc.KubeClient, cc.EgressCA.Namespace)
	c, err := egressca.NewController(cc.KubeClient, secrets.Core().V1().Secrets(), *cc.EgressCA)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		stop := make(chan struct{})
		secrets.Start(stop)
		defer func() {
			close(stop)
			secrets.Shutdown()
		}()
		// One Secret, written rarely: one worker.
		return c.Run(ctx, 1)
	}, nil
}

// startRuntimeController builds the AgentRuntime status controller.
func startRuntimeController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	airlock := cc.AirlockInformers.Airlock().V1alpha1()
	c, err := agentruntime.NewController(ctx, cc.AirlockClient, airlock.AgentRuntimes(), airlock.ToolRegistries(), airlock.SandboxClasses(), airlock.SandboxClaims(), cc.KubeInformers.Batch().V1().Jobs())
	if err != nil {
		return nil, err
	}
	if cc.Usage != nil {
		c.SetUsageSource(cc.Usage)
	}
	// Status writes are few and cheap: one worker keeps them ordered.
	return func(ctx context.Context) error { return c.Run(ctx, 1) }, nil
}

// startPoolController builds the warm pool controller, on the claim controller's filtered pod,
// NetworkPolicy and Job informers (members carry LabelClaim, empty; kept workspaces' records, which
// resume members wait on, carry it too).
func startPoolController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	airlock := cc.AirlockInformers.Airlock().V1alpha1()
	kube, air := cc.PoolKubeClient, cc.PoolAirlockClient
	if kube == nil {
		kube = cc.KubeClient
	}
	if air == nil {
		air = cc.AirlockClient
	}
	rate := cc.WarmRefillRate
	if rate <= 0 {
		rate = warmpool.DefaultRefillRate
	}
	c, err := warmpool.NewController(ctx, kube, air, warmpool.Informers{
		Registries:      airlock.ToolRegistries(),
		Classes:         airlock.SandboxClasses(),
		Claims:          airlock.SandboxClaims(),
		Runtimes:        airlock.AgentRuntimes(),
		Pods:            cc.KubeInformers.Core().V1().Pods(),
		NetworkPolicies: cc.KubeInformers.Networking().V1().NetworkPolicies(),
		AllowedServices: cc.AllowedServices,
		Jobs:            cc.KubeInformers.Batch().V1().Jobs(),
	}, memberKeys{cc.Tokens}, rate, defaultdeny.NewEnsurer(kube, cc.KubeInformers.Networking().V1().NetworkPolicies()))
	if err != nil {
		return nil, err
	}
	// Members of classes with egress are built with the claims' gateway (docs/egress.md).
	c.SetEgressGateway(cc.EgressGateway)
	if cc.ReadIsolationEvidence {
		// Members are read at their readiness, before any adoption, through the operator's
		// ingress (without --operator-pod-labels, OperatorPeer is nil: nothing is read).
		c.SetOperatorPeer(cc.OperatorPeer)
	}
	return c.Run, nil
}

// memberKeys gives the pool controller warm members' keys, in their Secrets' text form.
type memberKeys struct{ tokens *claimtoken.Source }

func (m memberKeys) EncodedMemberKey(ctx context.Context, namespace, member string) (string, error) {
	key, err := m.tokens.MemberKey(ctx, namespace, member)
	if err != nil {
		return "", err
	}
	return claimtoken.EncodeMemberKey(key), nil
}

func (m memberKeys) EvidenceToken(ctx context.Context, namespace, member string) (string, error) {
	return m.tokens.EvidenceToken(ctx, namespace, member)
}

func (m memberKeys) MemberEvidenceKey(ctx context.Context) ([]byte, error) {
	return m.tokens.MemberEvidenceKey(ctx)
}

func (m memberKeys) MemberProxyCredential(ctx context.Context, uid types.UID, namespace, member string) (string, error) {
	return m.tokens.MemberProxyCredential(ctx, uid, namespace, member)
}

// startClaimController builds the SandboxClaim controller.
func startClaimController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	airlock := cc.AirlockInformers.Airlock().V1alpha1()
	c, err := claim.NewController(ctx, cc.KubeClient, cc.EventClient, cc.AirlockClient, claim.Informers{
		Claims:          airlock.SandboxClaims(),
		Runtimes:        airlock.AgentRuntimes(),
		Registries:      airlock.ToolRegistries(),
		Classes:         airlock.SandboxClasses(),
		NetworkPolicies: cc.KubeInformers.Networking().V1().NetworkPolicies(),
		Jobs:            cc.KubeInformers.Batch().V1().Jobs(),
		Pods:            cc.KubeInformers.Core().V1().Pods(),
		AllowedServices: cc.AllowedServices,
	}, cc.SyncImage, cc.Tokens, cc.IsolationKeys, defaultdeny.NewEnsurer(cc.KubeClient, cc.KubeInformers.Networking().V1().NetworkPolicies()))
	if err != nil {
		return nil, err
	}
	c.SetEgressGateway(cc.EgressGateway)
	c.SetOperatorPeer(cc.OperatorPeer)
	c.SetTracerProvider(cc.TracerProvider)
	if cc.Records != nil {
		c.SetSessionRecords(cc.Records)
	}
	if !cc.ReadIsolationEvidence {
		c.SetIsolationEvidence(false)
	}
	return func(ctx context.Context) error { return c.Run(ctx, cc.Workers) }, nil
}

// startRecordController builds the session record controller (docs/record.md §2), on the claims'
// informer and the filtered pod informer (sandbox pods carry LabelClaim). It reads sandboxes'
// logs only through the operator's ingress (--operator-pod-labels).
func startRecordController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	if cc.RecordSigning == nil {
		return func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		}, nil
	}
	records := cc.RecordAirlockClient
	if records == nil {
		records = cc.AirlockClient
	}
	c, err := recordcontroller.NewController(records, cc.AirlockInformers.Airlock().V1alpha1().SandboxClaims(),
		cc.KubeInformers.Core().V1().Pods(), cc.Tokens, cc.RecordSigning, cc.OperatorPeer != nil)
	if err != nil {
		return nil, err
	}
	if cc.GatewayPods != nil && cc.Tokens != nil {
		// The gateway's decisions of claims with egress (docs/record.md §2.1).
		if err := c.SetGateway(cc.GatewayPods.Core().V1().Pods(), cc.Tokens); err != nil {
			return nil, err
		}
	}
	for _, o := range cc.RecordObservers {
		c.AddObserver(o)
	}
	if cc.Records != nil {
		cc.Records.c = c
	}
	return func(ctx context.Context) error { return c.Run(ctx, cc.Workers) }, nil
}

// startWorkspaceGCController builds the controller that collects kept workspaces, on the
// filtered Job and Pod informers (records and the claims' pods carry LabelClaim).
func startWorkspaceGCController(ctx context.Context, cc ControllerContext) (func(ctx context.Context) error, error) {
	airlock := cc.AirlockInformers.Airlock().V1alpha1()
	c, err := workspacegc.NewController(ctx, cc.KubeClient, cc.EventClient, cc.AirlockClient, workspacegc.Informers{
		Jobs:     cc.KubeInformers.Batch().V1().Jobs(),
		Pods:     cc.KubeInformers.Core().V1().Pods(),
		Claims:   airlock.SandboxClaims(),
		Runtimes: airlock.AgentRuntimes(),
		Classes:  airlock.SandboxClasses(),
	}, cc.SyncImage)
	if err != nil {
		return nil, err
	}
	// Records are few and their collections rare: one worker, as the claim controller ran it.
	return func(ctx context.Context) error { return c.Run(ctx, 1) }, nil
}

// runControllers builds and runs the controllers until ctx is done, then waits for them all to
// return. termDone stops the term's informers the controllers asked for (cc.KubeInformers),
// informersDone the airlock informers; both outlive ctx, so that controllers still read a live
// cache while they stop.
func runControllers(ctx context.Context, controllers []controllerDescriptor, cc ControllerContext, termDone, informersDone <-chan struct{}) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type runnable struct {
		name string
		run  func(ctx context.Context) error
	}
	var runnables []runnable
	for _, c := range controllers {
		run, err := c.init(klog.NewContext(ctx, klog.LoggerWithName(logger, c.name)), cc)
		if err != nil {
			return fmt.Errorf("building the %s controller: %w", c.name, err)
		}
		runnables = append(runnables, runnable{name: c.name, run: run})
	}
	// Start only what the controllers asked for and is not running yet.
	cc.KubeInformers.Start(termDone)
	if cc.CABundleConfigMaps != nil {
		cc.CABundleConfigMaps.Start(termDone)
	}
	if cc.IsolationKeySecrets != nil {
		cc.IsolationKeySecrets.Start(termDone)
	}
	if cc.GatewayPods != nil {
		cc.GatewayPods.Start(termDone)
	}
	cc.AirlockInformers.Start(informersDone)
	logger.Info("Starting controllers", "count", len(runnables))

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
	)
	for _, r := range runnables {
		wg.Go(func() {
			err := r.run(klog.NewContext(ctx, klog.LoggerWithName(logger, r.name)))
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				err = nil // asked to stop, and said so
			}
			if err == nil && ctx.Err() == nil {
				err = errors.New("returned before it was asked to stop")
			}
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Errorf("%s controller: %w", r.name, err))
				mu.Unlock()
				cancel() // one controller down stops them all: the operator restarts whole
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	logger.Info("Stopped controllers")
	return errors.Join(failures...)
}
