//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// webhookRefusal is how the API server says the records webhook refused a write.
const webhookRefusal = "airlock records webhook: "

// TestRecordsWebhook: what the in-tree policies admit because the record an object names does
// not exist (docs/security.md, "What the params cannot close") is admitted without the records
// webhook and refused with it, through the API server, as the operator's ServiceAccount; what
// airlock builds is admitted with it. The webhook runs as `airlock records-webhook` beside the
// API-only plane, which calls it by URL (an API server advertising 127.0.0.1 cannot reach a
// Service), asked about the test's namespace only.
func TestRecordsWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespaceAt(t, "airlock-records", "privileged")
	unserved := newNamespaceAt(t, "airlock-unserved", "privileged")
	leaveSuiteRecordsWebhook(t, ns, ns)
	leaveSuiteRecordsWebhook(t, unserved, ns)
	op := asOperator(t)
	claim := servePolicyClaim(t, ctx, policyClaim(ns))
	waitParamPolicies(t, ctx, claim)
	pod := policyClaimPod(claim)
	never := recordlessWrites(t, claim, unserved)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	for name, create := range never {
		// Once the API server sees the namespace's label, the suite's webhook is not asked.
		eventually(t, 30*time.Second, "without the webhook, "+name+" admitted (the policies' residual)", func(ctx context.Context) (bool, error) {
			err := create(ctx, op, dryRun)
			if err != nil && !strings.Contains(err.Error(), webhookRefusal) {
				return false, err
			}
			return err == nil, nil
		})
	}

	// A claim's first record of the operator's own making: without the webhook, any record.
	forged, honest := recordWrites(t, ctx, claim)
	eventually(t, 30*time.Second, "without the webhook, a forged first record admitted (the policies' residual)", func(ctx context.Context) (bool, error) {
		err := forged(ctx)
		if err != nil && !strings.Contains(err.Error(), webhookRefusal) {
			return false, err
		}
		return err == nil, nil
	})

	startRecordsWebhook(t, ctx, ns, policySyncImage, never["a pod of a claim that does not exist, running another image"])
	if err := forged(ctx); err == nil || !strings.Contains(err.Error(), webhookRefusal) || !strings.Contains(err.Error(), "freeze now") {
		t.Errorf("with the webhook, a forged first record: %v; want refused by it", err)
	}
	if err := honest(ctx); err != nil {
		t.Errorf("with the webhook, the record its class and entry freeze: %v; want admitted", err)
	}
	for name, create := range never {
		err := create(ctx, op, dryRun)
		if err == nil || !strings.Contains(err.Error(), webhookRefusal) {
			t.Errorf("with the webhook, %s: %v; want refused by it", name, err)
		}
	}
	if _, err := op.CoreV1().Pods(ns).Create(ctx, pod, dryRun); err != nil {
		t.Errorf("the claim's pod: %v, want admitted", err)
	}
	np := sandboxpod.ClaimNetworkPolicy(claim, claim.Status.Frozen, nil)
	if _, err := op.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, dryRun); err != nil {
		t.Errorf("the claim's NetworkPolicy: %v, want admitted", err)
	}
	// The administrator is not asked about.
	ghost := never["a pod of a claim that does not exist, running another image"]
	if err := ghost(ctx, kubeClient, dryRun); err != nil {
		t.Errorf("the administrator's pod: %v, want admitted", err)
	}
}

// recordWrites returns two dry-run writes, as the operator, of the first record of a claim of
// claim's runtime and sandbox that has none yet: forged (another image than its class's) and
// honest (what its class and its registry's entry freeze, with the operator's sync image).
func recordWrites(t *testing.T, ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (forged, honest func(context.Context) error) {
	t.Helper()
	ns := claim.Namespace
	class := validClass("records-" + ns)
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = airlockClient.AirlockV1alpha1().SandboxClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	class, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(ctx, class.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Get(ctx, "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-fresh00009", Namespace: ns, Labels: map[string]string{airlockv1alpha1.LabelClaimShard: "9"},
			Finalizers: []string{keepFinalizer}},
		Spec: *claim.Spec.DeepCopy(),
	}
	fresh.Spec.ClassName = class.Name
	fresh.Spec.WorkspaceDir = ns + "/sandboxes/" + fresh.Name
	fresh, err = airlockClient.AirlockV1alpha1().SandboxClaims(ns).Create(ctx, fresh, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, _ = airlockClient.AirlockV1alpha1().SandboxClaims(ns).Patch(context.Background(), fresh.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	})
	record := sandboxpod.Freeze(class, &reg.Spec.Sandboxes[0])
	record.SyncImage = policySyncImage
	write := func(rec *airlockv1alpha1.FrozenSandbox) func(context.Context) error {
		return func(ctx context.Context) error {
			c := fresh.DeepCopy()
			c.Status.Frozen = rec
			_, err := asOperatorAirlock(t).AirlockV1alpha1().SandboxClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
	}
	evil := record.DeepCopy()
	evil.Image = "evil.example/exfil:v1"
	return write(evil), write(record)
}

// checkRecordsWebhookRefuses: as installed (the suite's webhook on the API-only plane, the
// Deployment on the real node), the writes whose record does not exist are refused by the
// records webhook.
func checkRecordsWebhookRefuses(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim) {
	t.Helper()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	unserved := newNamespaceAt(t, "airlock-unserved", "privileged")
	for name, create := range recordlessWrites(t, claim, unserved) {
		if err := create(ctx, op, dryRun); err == nil || !strings.Contains(err.Error(), webhookRefusal) {
			t.Errorf("%s: %v; want refused by the records webhook", name, err)
		}
	}
}

// recordlessWrites are writes whose record does not exist: a claim's pod, Secret and
// NetworkPolicy of a claim no claim has (in the real claim's shard, so that the shard's
// bindings find their params), and the kept record of a claim that is gone running another
// image than the operator's sync image; and an Event about a claim that does not exist in
// unserved, a namespace with no runtime or registry.
func recordlessWrites(t *testing.T, claim *airlockv1alpha1.SandboxClaim, unserved string) map[string]func(context.Context, kubernetes.Interface, metav1.CreateOptions) error {
	t.Helper()
	ghost := claim.DeepCopy()
	ghost.Name = "agent-ghost0000" + claim.Name[len(claim.Name)-1:]
	ghost.UID = types.UID(uuid.NewUUID())
	ghost.Status.Frozen.Image = "evil.example/exfil:v1"
	ns := claim.Namespace
	pod := policyClaimPod(ghost)
	secret := sandboxpod.TokenSecret(ghost, claimtoken.ClaimSecretName(ghost.Name, "token"), "t")
	np := sandboxpod.ClaimNetworkPolicy(ghost, ghost.Status.Frozen, nil)
	record := workspace.Record(ghost, ghost.Status.Frozen.WorkspaceClaimName, sandboxpod.JobConfig("evil.example/exfil:v1"), time.Now())
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: ghost.Name + ".e2e", Namespace: unserved},
		InvolvedObject: corev1.ObjectReference{APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxClaim",
			Namespace: unserved, Name: ghost.Name, UID: ghost.UID},
		Reason: "Bound", Message: "not airlock's", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "airlock-operator"},
	}
	return map[string]func(context.Context, kubernetes.Interface, metav1.CreateOptions) error{
		"a pod of a claim that does not exist, running another image": func(ctx context.Context, c kubernetes.Interface, o metav1.CreateOptions) error {
			_, err := c.CoreV1().Pods(ns).Create(ctx, pod, o)
			return err
		},
		"a token Secret of a claim that does not exist": func(ctx context.Context, c kubernetes.Interface, o metav1.CreateOptions) error {
			_, err := c.CoreV1().Secrets(ns).Create(ctx, secret, o)
			return err
		},
		"a NetworkPolicy of a claim that does not exist": func(ctx context.Context, c kubernetes.Interface, o metav1.CreateOptions) error {
			_, err := c.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, o)
			return err
		},
		"an Event about a claim in a namespace airlock does not serve": func(ctx context.Context, c kubernetes.Interface, o metav1.CreateOptions) error {
			_, err := c.CoreV1().Events(unserved).Create(ctx, event, o)
			return err
		},
		"a kept record of a gone claim running another image": func(ctx context.Context, c kubernetes.Interface, o metav1.CreateOptions) error {
			_, err := c.BatchV1().Jobs(ns).Create(ctx, record.DeepCopy(), o)
			return err
		},
	}
}

// startRecordsWebhook runs `airlock records-webhook` until the test ends, with its Secret in ns
// and a configuration of its own made from the component's (manifests/components/records-webhook),
// calling it by URL and asked about the namespaces labelled as ns's (leaveSuiteRecordsWebhook)
// only; it returns once the webhook refuses probe.
func startRecordsWebhook(t *testing.T, ctx context.Context, ns, syncImage string, probe func(context.Context, kubernetes.Interface, metav1.CreateOptions) error) (logPath string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "manifests", "records-webhook", "validating_webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	url := "https://" + addr + "/validate"
	cfg.Name = "airlock-records-" + ns
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
		cfg.Webhooks[i].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{labelOwnRecordsWebhook: ns}}
	}
	if _, err := kubeClient.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := kubeClient.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", cfg.Name, err)
		}
	})
	logPath = filepath.Join(t.TempDir(), "webhook.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(airlockBinary(t), "records-webhook", "--kubeconfig="+os.Getenv("KUBECONFIG"),
		"--namespace="+ns, "--bind-address="+addr, "--tls-sans=127.0.0.1", "--configuration="+cfg.Name,
		"--sync-image="+syncImage, "-v=4")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("records webhook log:\n%s", b)
			}
		}
	})
	// In force once the API server has the configuration with its CA bundle: a write the webhook
	// refuses is refused by it.
	op := asOperator(t)
	eventually(t, time.Minute, "the records webhook to be asked", func(ctx context.Context) (bool, error) {
		select {
		case <-done:
			return false, fmt.Errorf("the records webhook exited")
		default:
		}
		err := probe(ctx, op, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), webhookRefusal), nil
	})
	return logPath
}

// leaveSuiteRecordsWebhook labels ns so that the suite's records webhook is not asked about it,
// with the name of the test's own namespace (startRecordsWebhook's selector).
func leaveSuiteRecordsWebhook(t *testing.T, ns, test string) {
	t.Helper()
	ctx := context.Background()
	patch := []byte(`{"metadata":{"labels":{"` + labelOwnRecordsWebhook + `":"` + test + `"}}}`)
	if _, err := kubeClient.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkRecordsWebhookAllowed: the operator's log shows no write the records webhook refused, and
// the suite's webhook's log shows it was asked about (and allowed) each of kinds in namespace ns.
func checkRecordsWebhookAllowed(t *testing.T, operatorLog, ns string, kinds ...string) {
	t.Helper()
	if denied := grepLines(operatorLog, webhookRefusal); denied != "" {
		t.Errorf("the operator's log shows a write the records webhook refused:\n%s", denied)
	}
	if suiteRecordsWebhookLog == "" {
		return // the real node's: the installed Deployment's log
	}
	b, err := os.ReadFile(suiteRecordsWebhookLog)
	if err != nil {
		t.Fatal(err)
	}
	asked := grepLines(grepLines(string(b), `"Allowed a write of the operator"`), `object="`+ns+`/`)
	for _, kind := range kinds {
		if !strings.Contains(asked, `kind="`+kind+`"`) {
			t.Errorf("the records webhook was not asked about a %s of the operator in %s; what it allowed there:\n%s", kind, ns, asked)
		}
	}
}
