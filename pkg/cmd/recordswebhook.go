//go:build !sandboxd_only

package cmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	"github.com/airlock-dev/airlock/pkg/recordwebhook"
	"github.com/airlock-dev/airlock/pkg/servingcert"
	"github.com/airlock-dev/airlock/pkg/version"
)

// RecordsWebhookOptions are the flags of `airlock records-webhook`.
type RecordsWebhookOptions struct {
	BindAddress   string
	Namespace     string
	SecretName    string
	TLSSANs       []string
	Configuration string
	SyncImage     string
	KubeClient    *KubeClientOptions
}

// NewRecordsWebhookOptions returns the webhook's options with their defaults.
func NewRecordsWebhookOptions() *RecordsWebhookOptions {
	ns := defaultNamespace(os.Getenv)
	return &RecordsWebhookOptions{
		BindAddress:   ":9443",
		Namespace:     ns,
		SecretName:    "airlock-records-webhook-tls",
		TLSSANs:       []string{"airlock-records-webhook." + ns + ".svc"},
		Configuration: recordwebhook.ConfigurationName,
		SyncImage:     "ghcr.io/airlock-dev/airlock:" + version.Get().Version,
		// Its reads are on the path of every write it is asked about: a client-side limit only
		// adds their wait to the operator's writes (at 20 claims/s, 50 QPS queued them for about
		// a second each: make bench); the API server's own fairness protects it.
		KubeClient: &KubeClientOptions{QPS: 1000, Burst: 2000},
	}
}

func (o *RecordsWebhookOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Address (host:port) the webhook serves HTTPS on: POST "+recordwebhook.Path+" (AdmissionReviews) and GET /healthz.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the Secret --secret-name. Defaults to $"+podNamespaceEnv+" when it is set, else "+defaultLeaseNamespace+".")
	fs.StringVar(&o.SecretName, "secret-name", o.SecretName, "Secret in which the webhook keeps its own CA and serving certificate (made, renewed), shared by its replicas.")
	fs.StringSliceVar(&o.TLSSANs, "tls-sans", o.TLSSANs, "DNS names and IP addresses of the serving certificate: the name the API server calls (the Service's <name>.<namespace>.svc, or the host of the configuration's url).")
	fs.StringVar(&o.Configuration, "configuration", o.Configuration, "ValidatingWebhookConfiguration whose webhooks' caBundle the webhook keeps equal to its CA bundle.")
	fs.StringVar(&o.SyncImage, "sync-image", o.SyncImage, "The operator's --sync-image: the only image the record of a claim that no longer exists may run. Set it as the operator's.")
}

// Validate returns one error for each invalid flag value.
func (o *RecordsWebhookOptions) Validate() []error {
	errs := o.KubeClient.Validate()
	if _, _, err := net.SplitHostPort(o.BindAddress); err != nil {
		errs = append(errs, invalidFlag("bind-address", "%v", err))
	}
	if o.Namespace == "" {
		errs = append(errs, invalidFlag("namespace", "must not be empty"))
	}
	if o.SecretName == "" {
		errs = append(errs, invalidFlag("secret-name", "must not be empty"))
	}
	if len(o.TLSSANs) == 0 || strings.Join(o.TLSSANs, "") == "" {
		errs = append(errs, invalidFlag("tls-sans", "must name at least one DNS name or IP address"))
	}
	if o.Configuration == "" {
		errs = append(errs, invalidFlag("configuration", "must not be empty"))
	}
	if o.SyncImage == "" || strings.ContainsAny(o.SyncImage, " \t\n") {
		errs = append(errs, invalidFlag("sync-image", "must be an image reference, like ghcr.io/airlock-dev/airlock:v0.1.0"))
	}
	return errs
}

func newRecordsWebhookCommand(o *RecordsWebhookOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "records-webhook",
		Short: "Run the admission webhook that refuses the operator's writes naming records that do not exist as they say",
		Long: `Run the records webhook: a validating admission webhook, asked only about the operator's writes,
that refuses a sandbox pod, Secret, NetworkPolicy or Job whose claim, registry, pool record, kept
record, controlling pod or allowed Service does not exist as it says; an Event about nothing in a
namespace airlock does not serve; and a claim's first record that is not what its class and
registry entry freeze: what the in-tree admission policies cannot check (docs/security.md, "The
records webhook"). It keeps its own CA and serving certificate in a Secret and their bundle in its
ValidatingWebhookConfiguration.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			cliflag.PrintFlags(cmd.Flags())
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return o.run(ctx)
		},
	}
	fss := newNamedFlagSets()
	o.AddFlags(fss.FlagSet("webhook"))
	o.KubeClient.AddFlags(fss.FlagSet("kubernetes client"))
	addLogsFlags(fss.FlagSet("logs"))
	setFlags(cmd, fss)
	return cmd
}

// run serves until ctx is done: the issuer, the bundle publisher and the HTTPS server.
func (o *RecordsWebhookOptions) run(ctx context.Context) error {
	cfg, err := o.KubeClient.restConfig()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	airlock, err := airlockclientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	store := servingcert.NewStore()
	secrets := servingcert.NewNamedSecretInformerFactory(kube, o.Namespace, o.SecretName)
	policy := servingcert.DefaultPolicy(o.TLSSANs)
	// The API server reads the bundle from the configuration within seconds: a new CA needs no
	// day in the bundle before it signs.
	policy.SecretName, policy.CAName, policy.Component, policy.CAPropagation = o.SecretName, "airlock-records-webhook-ca", "records-webhook", time.Minute
	issuer, err := servingcert.NewIssuer(kube, o.Namespace, secrets.Core().V1().Secrets(), policy, store)
	if err != nil {
		return err
	}
	caches := recordwebhook.NewCacheInformerFactory(airlock)
	live := recordwebhook.NewLookup(kube, airlock)
	cached := recordwebhook.NewCachedLookup(caches, live)
	configs := recordwebhook.NewConfigurationInformerFactory(kube, o.Configuration)
	publisher, err := recordwebhook.NewBundlePublisher(kube, o.Configuration, configs, store)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	secrets.Start(ctx.Done())
	configs.Start(ctx.Done())
	caches.Start(ctx.Done())
	defer secrets.Shutdown()
	defer configs.Shutdown()
	defer caches.Shutdown()
	// Not ready until the caches hold what the API server does: a webhook whose cache cannot
	// list (its RBAC) would read every object live, unseen.
	var synced atomic.Bool
	go func() {
		for _, ok := range caches.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return
			}
		}
		synced.Store(true)
	}()
	done := make(chan struct{}, 2)
	for _, run := range []func(context.Context) error{issuer.Run, publisher.Run} {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := run(ctx); err != nil {
				cancel(err)
			}
		}()
	}
	defer func() { <-done; <-done }()
	defer cancel(nil)
	return o.serve(ctx, store, &synced, &recordwebhook.Handler{Lookup: live, Cache: cached, Config: recordwebhook.Config{SyncImage: o.SyncImage}})
}

func (o *RecordsWebhookOptions) serve(ctx context.Context, store *servingcert.Store, synced *atomic.Bool, handler *recordwebhook.Handler) error {
	mux := http.NewServeMux()
	mux.Handle(recordwebhook.Path, handler)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if len(store.Bundle()) == 0 {
			http.Error(w, "no serving certificate yet", http.StatusServiceUnavailable)
			return
		}
		if !synced.Load() {
			http.Error(w, "the caches of claims, registries, runtimes and classes have not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{
		Addr:              o.BindAddress,
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: store.GetCertificate},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	ln, err := net.Listen("tcp", o.BindAddress)
	if err != nil {
		return fmt.Errorf("listening on --bind-address=%s: %w", o.BindAddress, err)
	}
	klog.FromContext(ctx).Info("Serving the records webhook", "address", ln.Addr().String(), "configuration", o.Configuration)
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}
