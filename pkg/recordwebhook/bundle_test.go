package recordwebhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/airlock-dev/airlock/pkg/pki"
	"github.com/airlock-dev/airlock/pkg/servingcert"
)

// TestBundlePublisher: every webhook of the configuration gets the store's bundle, and gets it
// back when something else empties it (an apply of the manifests).
func TestBundlePublisher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "a.records.airlock.dev"}, {Name: "b.records.airlock.dev"}},
	}
	client := fake.NewClientset(cfg)
	store := servingcert.NewStore()
	ca, err := pki.NewCA(rand.Reader, "test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The CA serves as its own serving pair: the store only parses it.
	if err := store.Set(ca.CertPEM, ca.KeyPEM, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	factory := NewConfigurationInformerFactory(client, ConfigurationName)
	p, err := NewBundlePublisher(client, ConfigurationName, factory, store)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	published := func(ctx context.Context) (bool, error) {
		got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, ConfigurationName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range got.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, ca.CertPEM) {
				return false, nil
			}
		}
		return true, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, published); err != nil {
		t.Fatalf("the bundle was not published: %v", err)
	}
	emptied, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, ConfigurationName, metav1.GetOptions{})
	emptied.Webhooks[1].ClientConfig.CABundle = nil
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, emptied, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, published); err != nil {
		t.Fatalf("the emptied bundle was not put back: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	factory.Shutdown()
}
