//go:build !sandboxd_only

package cmd

import (
	"github.com/airlock-dev/airlock/pkg/recordtrace"
	"github.com/airlock-dev/airlock/pkg/tracing"

	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	componentbaseconfig "k8s.io/component-base/config"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/controller/warmpool"
	"github.com/airlock-dev/airlock/pkg/operator"
	"github.com/airlock-dev/airlock/pkg/version"
)

const (
	// defaultLeaseNamespace is the lease's namespace when POD_NAMESPACE is not set.
	defaultLeaseNamespace = "airlock-system"
	// podNamespaceEnv names the operator's own namespace, from the downward API.
	podNamespaceEnv = "POD_NAMESPACE"
	// shutdownTimeout bounds the wait for in-flight HTTP requests on shutdown.
	shutdownTimeout = 15 * time.Second
	// apiServerTimeout bounds the wait at start for the API server and the airlock CRDs.
	apiServerTimeout = 10 * time.Second
	// defaultTokenAudience is the audience a runtime's token must carry by default (SPEC section 4).
	defaultTokenAudience = "airlock"
)

// OperatorOptions are the flags of `airlock operator`.
type OperatorOptions struct {
	// namespace is the operator's own ($POD_NAMESPACE, else airlock-system), where its claim
	// token key Secret lives.
	namespace string

	KubeClient     *KubeClientOptions
	LeaderElection *LeaderElectionOptions
	SandboxAPI     *SandboxAPIOptions
	Serving        *ServingOptions
	Controllers    *ControllerOptions
	Tracing        *TracingOptions
}

// NewOperatorOptions returns the operator's options with their defaults.
func NewOperatorOptions() *OperatorOptions {
	return newOperatorOptions(os.Getenv)
}

func newOperatorOptions(getenv func(string) string) *OperatorOptions {
	leaseNamespace := defaultLeaseNamespace
	if ns := getenv(podNamespaceEnv); ns != "" {
		leaseNamespace = ns
	}
	return &OperatorOptions{
		namespace: leaseNamespace,
		// Each claim costs the kube client three creates (Secret, NetworkPolicy, pod) and the
		// airlock client two status writes: 40 claims a second need 120 requests a second of one
		// limiter (docs/decisions.md, "Client rate limits").
		KubeClient: &KubeClientOptions{QPS: 200, Burst: 400},
		LeaderElection: &LeaderElectionOptions{LeaderElectionConfiguration: componentbaseconfig.LeaderElectionConfiguration{
			LeaderElect:       true,
			LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
			ResourceLock:      "leases",
			ResourceName:      operator.ComponentName,
			ResourceNamespace: leaseNamespace,
		}},
		SandboxAPI: &SandboxAPIOptions{
			BindAddress:    ":8443",
			TokenAudiences: []string{defaultTokenAudience},
			TLSMode:        TLSModeSelfSigned,
			TLSSANs:        defaultTLSSANs(leaseNamespace),
		},
		Serving: &ServingOptions{
			MetricsBindAddress:     ":8080",
			HealthProbeBindAddress: ":8081",
		},
		Tracing: newTracingOptions(),
		Controllers: &ControllerOptions{
			Workers:        4,
			SyncImage:      "ghcr.io/airlock-dev/airlock:" + version.Get().Version,
			WarmRefillRate: warmpool.DefaultRefillRate,
			// Evidence is read wherever the operator can reach sandboxes.
			ReadIsolationEvidence: true,
		},
	}
}

// Flags returns the operator's flags by section.
func (o *OperatorOptions) Flags(fss *cliflag.NamedFlagSets) {
	o.SandboxAPI.AddFlags(fss.FlagSet("sandbox API"))
	o.Serving.AddFlags(fss.FlagSet("health and metrics"))
	o.Controllers.AddFlags(fss.FlagSet("controllers"))
	o.LeaderElection.AddFlags(fss.FlagSet("leader election"))
	o.KubeClient.AddFlags(fss.FlagSet("kubernetes client"))
	o.Tracing.AddFlags(fss.FlagSet("tracing"))
	addLogsFlags(fss.FlagSet("logs"))
}

// Validate returns one error for each invalid flag value.
func (o *OperatorOptions) Validate() []error {
	var errs []error
	errs = append(errs, o.SandboxAPI.Validate()...)
	errs = append(errs, o.Serving.Validate()...)
	errs = append(errs, o.Controllers.Validate()...)
	errs = append(errs, o.LeaderElection.Validate()...)
	errs = append(errs, o.KubeClient.Validate()...)
	errs = append(errs, o.Tracing.Validate()...)
	errs = append(errs, validateDistinctAddresses(
		bindAddress{"api-bind-address", o.SandboxAPI.BindAddress},
		bindAddress{"health-probe-bind-address", o.Serving.HealthProbeBindAddress},
		bindAddress{"metrics-bind-address", o.Serving.MetricsBindAddress},
	)...)
	return errs
}

// Config builds the clients and returns the operator's configuration. Call it after Validate.
func (o *OperatorOptions) Config() (*operator.Config, error) {
	restConfig, err := o.KubeClient.restConfig()
	if err != nil {
		return nil, err
	}
	clients, err := newOperatorClients(restConfig, operator.ComponentName+"/"+version.Get().Version, o.LeaderElection.RenewDeadline.Duration)
	if err != nil {
		return nil, err
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("getting the hostname for the lease identity: %w", err)
	}

	egressGateway, egressCA, err := o.Controllers.egress()
	if err != nil {
		return nil, err
	}
	operatorPeer, err := o.Controllers.operatorPeer(o.namespace)
	if err != nil {
		return nil, err
	}

	return &operator.Config{
		KubeClient:             clients.kube,
		EventClient:            clients.event,
		ReviewClient:           clients.review,
		AirlockClient:          clients.airlock,
		LeaderElectionClient:   clients.leaderElection,
		LeaderElection:         o.LeaderElection.LeaderElectionConfiguration,
		Identity:               hostname + "_" + uuid.NewString(),
		Namespace:              o.namespace,
		APIBindAddress:         o.SandboxAPI.BindAddress,
		TLSMode:                operator.TLSMode(o.SandboxAPI.TLSMode),
		TLSCertFile:            o.SandboxAPI.TLSCertFile,
		TLSKeyFile:             o.SandboxAPI.TLSKeyFile,
		TLSCAFile:              o.SandboxAPI.TLSCAFile,
		TLSSANs:                o.SandboxAPI.TLSSANs,
		TokenAudiences:         o.SandboxAPI.TokenAudiences,
		MetricsBindAddress:     o.Serving.MetricsBindAddress,
		Profiling:              o.Serving.Profiling,
		HealthProbeBindAddress: o.Serving.HealthProbeBindAddress,
		ShutdownTimeout:        shutdownTimeout,
		APIServerTimeout:       apiServerTimeout,
		Workers:                o.Controllers.Workers,
		SyncImage:              o.Controllers.SyncImage,
		PoolKubeClient:         clients.poolKube,
		PoolAirlockClient:      clients.poolAirlock,
		RecordAirlockClient:    clients.record,
		WarmRefillRate:         o.Controllers.WarmRefillRate,
		EgressGateway:          egressGateway,
		OperatorPeer:           operatorPeer,
		ReadIsolationEvidence:  o.Controllers.ReadIsolationEvidence,
		EgressCA:               egressCA,
		Tracing:                o.Tracing.Config(),
	}, nil
}

func newOperatorCommand(o *OperatorOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the airlock operator: controllers, Sandbox API, health and metrics",
		Long: `Run the airlock operator. Every replica serves the Sandbox API, health probes and metrics;
the replica that holds the leader lease also runs the controllers.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			cliflag.PrintFlags(cmd.Flags())
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			operator.TuneGC(klog.FromContext(ctx), os.Getenv)
			tp, err := tracing.New(ctx, cfg.Tracing, tracing.ServiceOperator)
			if err != nil {
				return err
			}
			defer shutdownTracing(tp)
			cfg.TracerProvider = tp
			spans, err := recordtrace.New(ctx, cfg.Tracing)
			if err != nil {
				return err
			}
			defer shutdownTracing(spans)
			cfg.RecordSpans = spans
			return operator.Run(ctx, cfg)
		},
	}
	fss := newNamedFlagSets()
	o.Flags(&fss)
	setFlags(cmd, fss)
	return cmd
}
