package operator

import (
	"context"
	"net/http"

	batchinformers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/airlock-dev/airlock/pkg/claimtoken"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxapi"
)

// newSandboxAPI builds the Sandbox API of this replica over its airlock informer caches. It reads
// no Secret but the operator's key (tokens): a Bound claim's token is derived from it.
func newSandboxAPI(ctx context.Context, cfg *Config, airlockInformers airlockinformers.SharedInformerFactory, keptRecords batchinformers.JobInformer, tokens *claimtoken.Source) (http.Handler, error) {
	airlock := airlockInformers.Airlock().V1alpha1()
	claims := airlock.SandboxClaims()
	server, err := sandboxapi.NewServer(ctx, sandboxapi.Config{
		KubeClient:    reviewClient(cfg),
		AirlockClient: cfg.AirlockClient,
		KeptRecords:   sandboxapi.NewKeptRecords(cfg.KubeClient), // not the review client: its limiter is the TokenReviews'
		// Read first: a new claim's legacy record is read from the API server only when it may exist.
		KeptRecordCache: keptRecords.Lister(),
		Runtimes:        airlock.AgentRuntimes().Lister(),
		Registries:      airlock.ToolRegistries().Lister(),
		Classes:         airlock.SandboxClasses().Lister(),
		Claims:          claims.Lister(),
		ClaimEvents:     claims.Informer(),
		Tokens:          tokens,
		Synced: []cache.InformerSynced{
			airlock.AgentRuntimes().Informer().HasSynced,
			airlock.ToolRegistries().Informer().HasSynced,
			airlock.SandboxClasses().Informer().HasSynced,
			claims.Informer().HasSynced,
			keptRecords.Informer().HasSynced,
		},
		Audiences:      cfg.TokenAudiences,
		TracerProvider: cfg.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	return server, nil
}

// reviewClient is the client the Sandbox API reviews tokens with: Config.ReviewClient, else
// KubeClient.
func reviewClient(cfg *Config) kubernetes.Interface {
	if cfg.ReviewClient != nil {
		return cfg.ReviewClient
	}
	return cfg.KubeClient
}
