//go:build !sandboxd_only

package cmd

import (
	"strings"
	"testing"
)

// TestRecordsWebhookOptionsValidate: the defaults are valid, and each bad value is refused by an
// error that names its flag.
func TestRecordsWebhookOptionsValidate(t *testing.T) {
	if errs := NewRecordsWebhookOptions().Validate(); len(errs) != 0 {
		t.Fatalf("defaults: %v", errs)
	}
	for name, tc := range map[string]struct {
		modify   func(o *RecordsWebhookOptions)
		wantFlag string
	}{
		"bind address without a port": {func(o *RecordsWebhookOptions) { o.BindAddress = "localhost" }, "bind-address"},
		"no namespace":                {func(o *RecordsWebhookOptions) { o.Namespace = "" }, "namespace"},
		"no Secret":                   {func(o *RecordsWebhookOptions) { o.SecretName = "" }, "secret-name"},
		"no SANs":                     {func(o *RecordsWebhookOptions) { o.TLSSANs = []string{""} }, "tls-sans"},
		"no configuration":            {func(o *RecordsWebhookOptions) { o.Configuration = "" }, "configuration"},
		"sync image with a space":     {func(o *RecordsWebhookOptions) { o.SyncImage = "a b" }, "sync-image"},
		"no QPS":                      {func(o *RecordsWebhookOptions) { o.KubeClient.QPS = 0 }, "kube-api-qps"},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewRecordsWebhookOptions()
			tc.modify(o)
			errs := o.Validate()
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), "--"+tc.wantFlag) {
				t.Fatalf("errors %v, want one naming --%s", errs, tc.wantFlag)
			}
		})
	}
}
