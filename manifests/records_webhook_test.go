package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// recordsWebhookDocs are the documents of manifests/records-webhook (documents leaves them out:
// they are the webhook's, not the operator's).
func recordsWebhookDocs(t *testing.T) []document {
	t.Helper()
	files, err := filepath.Glob("records-webhook/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var docs []document
	for _, path := range files {
		if filepath.Base(path) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range strings.Split(string(b), "\n---\n") {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(part), &meta); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if meta.Kind != "" {
				docs = append(docs, document{file: path, kind: meta.Kind, raw: []byte(part)})
			}
		}
	}
	return docs
}

// TestRecordsWebhookInstalled: the base installs the records webhook, every file of it.
func TestRecordsWebhookInstalled(t *testing.T) {
	var base, own struct {
		Resources []string `json:"resources"`
	}
	for file, k := range map[string]any{"kustomization.yaml": &base, "records-webhook/kustomization.yaml": &own} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, k); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Contains(base.Resources, "records-webhook") {
		t.Errorf("manifests/kustomization.yaml does not install records-webhook: %v", base.Resources)
	}
	for _, d := range recordsWebhookDocs(t) {
		if !slices.Contains(own.Resources, filepath.Base(d.file)) {
			t.Errorf("%s (%s) is not a resource of records-webhook/kustomization.yaml", d.file, d.kind)
		}
	}
}

// TestRecordsWebhookOnlyReads: the webhook's ServiceAccount reads the objects a write names (get
// only), and writes nothing but its own configuration's caBundle and its own Secret.
func TestRecordsWebhookOnlyReads(t *testing.T) {
	docs := recordsWebhookDocs(t)
	for file, role := range decodeAll[rbacv1.ClusterRole](t, docs, "ClusterRole") {
		for _, r := range role.Rules {
			named := slices.Equal(r.Resources, []string{"validatingwebhookconfigurations"}) && slices.Equal(r.ResourceNames, []string{"airlock-operator-records"})
			cached := slices.Equal(r.APIGroups, []string{"airlock.dev"})
			for _, v := range r.Verbs {
				if v != "get" && !named && !(cached && (v == "list" || v == "watch")) {
					t.Errorf("%s: ClusterRole %s grants %s on %v %v", file, role.Name, v, r.Resources, r.ResourceNames)
				}
			}
			if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") {
				t.Errorf("%s: ClusterRole %s grants %v on %v", file, role.Name, r.Verbs, r.Resources)
			}
		}
	}
	for file, role := range decodeAll[rbacv1.Role](t, docs, "Role") {
		for _, r := range role.Rules {
			if !slices.Equal(r.Resources, []string{"secrets"}) {
				t.Errorf("%s: Role %s grants %v on %v", file, role.Name, r.Verbs, r.Resources)
				continue
			}
			if !slices.Equal(r.Verbs, []string{"create"}) && !slices.Equal(r.ResourceNames, []string{"airlock-records-webhook-tls"}) {
				t.Errorf("%s: Role %s grants %v on Secrets %v, want its own only", file, role.Name, r.Verbs, r.ResourceNames)
			}
		}
	}
}

// TestRecordsWebhookConfiguration: asked about the operator's writes only (the policies' own
// expression), of every label by which an object names a record, failing closed, at the Service
// the Deployment serves.
func TestRecordsWebhookConfiguration(t *testing.T) {
	docs := recordsWebhookDocs(t)
	cfgs := decodeAll[admissionregistrationv1.ValidatingWebhookConfiguration](t, docs, "ValidatingWebhookConfiguration")
	if len(cfgs) != 1 {
		t.Fatalf("%d configurations, want 1", len(cfgs))
	}
	policy, err := os.ReadFile("rbac/admission_policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]bool{}
	for _, cfg := range cfgs {
		if cfg.Name != "airlock-operator-records" {
			t.Errorf("configuration %s, want airlock-operator-records (the webhook's --configuration and RBAC name it)", cfg.Name)
		}
		for _, w := range cfg.Webhooks {
			if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail || w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
				t.Errorf("%s: failurePolicy %v sideEffects %v, want Fail and None", w.Name, w.FailurePolicy, w.SideEffects)
			}
			s := w.ClientConfig.Service
			if s == nil || s.Name != "airlock-records-webhook" || s.Namespace != "airlock-system" || s.Path == nil || *s.Path != "/validate" {
				t.Errorf("%s: clientConfig %+v, want the Service airlock-records-webhook's /validate", w.Name, w.ClientConfig)
			}
			if len(w.MatchConditions) == 0 || w.MatchConditions[0].Name != "the-operator" || !strings.Contains(words(string(policy)), words(w.MatchConditions[0].Expression)) {
				t.Errorf("%s: matchConditions %+v, want the policies' the-operator expression first", w.Name, w.MatchConditions)
			}
			if len(w.Rules) == 1 && (slices.Equal(w.Rules[0].Resources, []string{"events"}) || slices.Equal(w.Rules[0].Resources, []string{"sandboxclaims/status"})) {
				labels[w.Rules[0].Resources[0]] = w.ObjectSelector == nil // Events and claims carry no naming label
				continue
			}
			if w.ObjectSelector == nil || len(w.ObjectSelector.MatchExpressions) == 0 || w.ObjectSelector.MatchExpressions[0].Operator != "Exists" {
				t.Errorf("%s: objectSelector %+v, want a label that exists first", w.Name, w.ObjectSelector)
				continue
			}
			labels[w.ObjectSelector.MatchExpressions[0].Key] = true
		}
	}
	for _, l := range []string{airlockv1alpha1.LabelClaim, airlockv1alpha1.LabelWarmMember, airlockv1alpha1.LabelKeptWorkspace, airlockv1alpha1.LabelRetryOf, "events", "sandboxclaims/status"} {
		if !labels[l] {
			t.Errorf("no webhook is asked about objects labelled %s", l)
		}
	}
	for file, d := range decodeAll[appsv1.Deployment](t, docs, "Deployment") {
		args := d.Spec.Template.Spec.Containers[0].Args
		if len(args) == 0 || args[0] != "records-webhook" || !slices.Contains(args, "--tls-sans=airlock-records-webhook.airlock-system.svc") {
			t.Errorf("%s: args %v, want records-webhook serving the Service's name", file, args)
		}
	}
}

// words is s with every run of white space one space.
func words(s string) string { return strings.Join(strings.Fields(s), " ") }
