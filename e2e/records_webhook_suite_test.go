//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-dev/airlock/pkg/recordwebhook"
)

// labelOwnRecordsWebhook on a namespace leaves it out of the suite's records webhook (a test that
// runs one of its own there, or shows what the policies admit without one).
const labelOwnRecordsWebhook = "airlock.dev/e2e-own-records-webhook"

// suiteRecordsWebhook is the records webhook the install's configuration calls on the API-only
// plane: `airlock records-webhook` beside the plane, called by URL (an API server advertising
// 127.0.0.1 cannot reach a Service), with its log at suiteRecordsWebhookLog. On the real node the
// installed Deployment serves it.
var (
	suiteRecordsWebhook     *exec.Cmd
	suiteRecordsWebhookDone chan struct{}
	suiteRecordsWebhookLog  string
)

// startSuiteRecordsWebhook runs the suite's records webhook and points the installed
// configuration (manifests/records-webhook) at it, and returns once its CA bundle is there.
func startSuiteRecordsWebhook() error {
	bin, err := buildAirlockBinary()
	if err != nil {
		return err
	}
	port, err := freePortErr()
	if err != nil {
		return err
	}
	log, err := os.CreateTemp("", "airlock-e2e-records-webhook-*.log")
	if err != nil {
		return err
	}
	suiteRecordsWebhookLog = log.Name()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "records-webhook", "--kubeconfig="+os.Getenv("KUBECONFIG"),
		"--namespace="+operatorNamespaceName, "--bind-address="+addr, "--tls-sans=127.0.0.1",
		"--configuration="+recordwebhook.ConfigurationName, "--sync-image="+e2eImage(), "-v=4")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	suiteRecordsWebhook, suiteRecordsWebhookDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(suiteRecordsWebhookDone) }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	configs := kubeClient.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg, err := configs.Get(ctx, recordwebhook.ConfigurationName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the installed records webhook configuration: %w", err)
	}
	url := "https://" + addr + recordwebhook.Path
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
		w.NamespaceSelector.MatchExpressions = append(w.NamespaceSelector.MatchExpressions,
			metav1.LabelSelectorRequirement{Key: labelOwnRecordsWebhook, Operator: metav1.LabelSelectorOpDoesNotExist})
	}
	if _, err := configs.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pointing the records webhook configuration at %s: %w", url, err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := configs.Get(ctx, recordwebhook.ConfigurationName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range got.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		b, _ := os.ReadFile(suiteRecordsWebhookLog)
		return fmt.Errorf("waiting for the records webhook's CA bundle: %w\n%s", err, b)
	}
	return nil
}

// stopSuiteRecordsWebhook stops the suite's records webhook and removes its log.
func stopSuiteRecordsWebhook() {
	if suiteRecordsWebhook == nil {
		return
	}
	_ = suiteRecordsWebhook.Process.Signal(os.Interrupt)
	select {
	case <-suiteRecordsWebhookDone:
	case <-time.After(20 * time.Second):
		_ = suiteRecordsWebhook.Process.Kill()
		<-suiteRecordsWebhookDone
	}
	_ = os.Remove(suiteRecordsWebhookLog)
}
