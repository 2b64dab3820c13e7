package cabundle

import (
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// The Sandbox API's bundle.
const (
	// ConfigMapName is the ConfigMap in each runtime's namespace.
	ConfigMapName = "airlock-ca"
	// Key is the ConfigMap's key that holds the PEM bundle; a runtime mounts it as a file of that
	// name (by default at /var/run/airlock/ca/ca.crt, pkg/client.DefaultCAFile).
	Key = "ca.crt"
	// LabelBundle marks the ConfigMaps airlock-ca the distributor owns ("true").
	LabelBundle = "airlock.dev/ca-bundle"
	// IsolationKeysKey is airlock-ca's key with the PEM public keys that verify the operator's
	// isolation attestations (pkg/attestation); a runtime that mounts airlock-ca at
	// /var/run/airlock/ca has them at /var/run/airlock/ca/isolation-keys.pem.
	IsolationKeysKey = "isolation-keys.pem"
	// RecordSigningKey is airlock-ca's key with the PEM public key that verifies the session
	// records (docs/record.md §2.2): `airlock record` reads it from there.
	RecordSigningKey = "record-signing.pub"
)

// The egress gateway CA's bundle.
const (
	// EgressKey is the egress bundle ConfigMap's key (the Secret's, egressca.BundleKey).
	EgressKey = "ca.crt"
	// EgressLabelBundle marks the egress bundle ConfigMaps the distributor owns ("true").
	EgressLabelBundle = "airlock.dev/egress-ca-bundle"
)

// SandboxAPIBundle is the CA bundle that verifies the Sandbox API, in the ConfigMap airlock-ca of
// every namespace that has an AgentRuntime, so that a runtime's pod can mount it; extras are its
// other keys (the isolation keys, IsolationKeysKey). configMaps is from
// NewConfigMapInformerFactory(client, ConfigMapName, LabelBundle).
func SandboxAPIBundle(source Source, runtimes airlockinformers.AgentRuntimeInformer, configMaps coreinformers.ConfigMapInformer, extras ...Extra) Bundle {
	return Bundle{
		Extras:        extras,
		Name:          "Sandbox API CA bundle",
		ConfigMapName: ConfigMapName,
		Key:           Key,
		Label:         LabelBundle,
		Source:        source,
		ConfigMaps:    configMaps,
		Audiences:     []Audience{{Informer: runtimes.Informer()}},
	}
}

// EgressBundle is the egress gateway CA's bundle (the public roots and the terminating CAs, from
// the egress CA's Secret) in the ConfigMap name (--egress-ca-bundle-configmap) of every
// namespace with a claim frozen with egress and that ConfigMap, which its sandboxes mount, and
// of every namespace with a ToolRegistry that keeps warm members of a class with egress (built
// with the operator's gateway and this ConfigMap: docs/egress.md, "Warm members of a class with
// egress"), so that the bundle is there before any claim, as the members start. classes are
// what the registries' sandboxes name: a class that gains or loses egress looks at every
// namespace again. configMaps is from NewConfigMapInformerFactory(client, name,
// EgressLabelBundle); sourceSynced is the source's informer's; fieldManager names the writer of
// the ConfigMaps.
func EgressBundle(name string, source Source, sourceSynced cache.InformerSynced, claims airlockinformers.SandboxClaimInformer,
	registries airlockinformers.ToolRegistryInformer, classes airlockinformers.SandboxClassInformer,
	configMaps coreinformers.ConfigMapInformer, fieldManager string) Bundle {
	classLister := classes.Lister()
	return Bundle{
		Name:          "egress CA bundle",
		ConfigMapName: name,
		Key:           EgressKey,
		Label:         EgressLabelBundle,
		FieldManager:  fieldManager,
		Source:        source,
		SourceSynced:  sourceSynced,
		ConfigMaps:    configMaps,
		Audiences: []Audience{
			{Informer: claims.Informer(), Needs: func(obj any) bool { return frozenWithBundle(obj, name) }},
			{Informer: registries.Informer(), Needs: func(obj any) bool { return warmWithEgress(obj, classLister) }},
		},
		Dependencies: []cache.SharedIndexInformer{classes.Informer()},
	}
}

// warmWithEgress says whether obj is a registry with a sandbox that wants warm members and whose
// class (from classes) has egress.
func warmWithEgress(obj any, classes airlocklisters.SandboxClassLister) bool {
	reg, ok := obj.(*airlockv1alpha1.ToolRegistry)
	if !ok {
		return false
	}
	for i := range reg.Spec.Sandboxes {
		entry := &reg.Spec.Sandboxes[i]
		if !sandboxpod.WarmWanted(entry) {
			continue
		}
		if class, err := classes.Get(entry.Class); err == nil && class.Spec.Egress != nil {
			return true
		}
	}
	return false
}

// frozenWithBundle says whether obj is a claim frozen with egress and the bundle ConfigMap name.
func frozenWithBundle(obj any, name string) bool {
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok || claim.Status.Frozen == nil || claim.Status.Frozen.Egress == nil {
		return false
	}
	return claim.Status.Frozen.Egress.Gateway.CABundleConfigMap == name
}
