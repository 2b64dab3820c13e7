package operator

import (
	"context"
	"net/http"

	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxapi"
)

// newSandboxAPI builds the Sandbox API of this replica over its informer caches. It asks the
// label-filtered kube factory for the claims' Secrets (the per-claim tokens that acquire hands
// out), so every replica, not only the leader, must start that factory; secrets is that informer,
// for readiness.
func newSandboxAPI(ctx context.Context, cfg *Config, airlockInformers airlockinformers.SharedInformerFactory, kubeInformers kubeinformers.SharedInformerFactory) (api http.Handler, secrets namedInformer, err error) {
	airlock := airlockInformers.Airlock().V1alpha1()
	secretInformer := kubeInformers.Core().V1().Secrets()
	claims := airlock.SandboxClaims()
	server, err := sandboxapi.NewServer(ctx, sandboxapi.Config{
		KubeClient:    cfg.KubeClient,
		AirlockClient: cfg.AirlockClient,
		Runtimes:      airlock.AgentRuntimes().Lister(),
		Registries:    airlock.ToolRegistries().Lister(),
		Classes:       airlock.SandboxClasses().Lister(),
		Claims:        claims.Lister(),
		Secrets:       secretInformer.Lister(),
		ClaimEvents:   claims.Informer(),
		SecretEvents:  secretInformer.Informer(),
		Synced: []cache.InformerSynced{
			airlock.AgentRuntimes().Informer().HasSynced,
			airlock.ToolRegistries().Informer().HasSynced,
			airlock.SandboxClasses().Informer().HasSynced,
			claims.Informer().HasSynced,
			secretInformer.Informer().HasSynced,
		},
		Audiences: cfg.TokenAudiences,
	})
	if err != nil {
		return nil, namedInformer{}, err
	}
	return server, namedInformer{name: "secrets", informer: secretInformer.Informer()}, nil
}
