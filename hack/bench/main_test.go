package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAPITLSConfig: the Sandbox API is verified with the CA file given, for the server name
// given; a file that is missing or holds no certificate is an error that names the flag.
func TestAPITLSConfig(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.crt")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(dir, "missing.crt"), garbage} {
		if _, err := apiTLSConfig(file, ""); err == nil || !strings.Contains(err.Error(), "--api-ca-file") {
			t.Errorf("apiTLSConfig(%s) = %v, want an error naming --api-ca-file", file, err)
		}
	}
	cfg, err := apiTLSConfig("", "airlock-sandbox-api.airlock-system.svc")
	if err != nil || cfg.RootCAs != nil || cfg.ServerName != "airlock-sandbox-api.airlock-system.svc" {
		t.Errorf("apiTLSConfig without a file = %+v, %v; want the system's roots and the server name", cfg, err)
	}
}

// TestValidateProduct: the peer needs no Sandbox API URL but airlock does; the peer refuses the
// scale runs (their fill goes through airlock's Sandbox API); an unknown product is refused.
func TestValidateProduct(t *testing.T) {
	base := options{kubeconfig: "k", stateDir: "s", operatorMetricsURL: "m", operatorUser: "u", output: "o",
		sizes: sizes{Claims: 1, ScaleAcquires: 1, ScaleOne: 1, ScalePerNamespace: 1, DaySpeedUp: defaultDaySpeedUp}, acquireTimeout: time.Minute, fillStall: time.Minute,
		operatorHistograms: ".", passMetric: "."}
	for _, tc := range []struct {
		product, apiURL, scenarios, wantErr string
	}{
		{productPeer, "", "rate20,warm20", ""},
		{productAirlock, "https://x", "rate20,scale2000", ""},
		{productAirlock, "", "rate20", "missing --api-url"},
		{productPeer, "", "rate20,scale10x500", "scenario scale10x500: airlock's only"},
		{productPeer, "", "warm-demand", "scenario warm-demand: airlock's only"},
		{productAirlock, "https://x", "warm20,warm-demand", ""},
		{"kube-agent", "", "rate20", `unknown --product "kube-agent"`},
	} {
		o := base
		o.product, o.apiURL, o.scenarios = tc.product, tc.apiURL, tc.scenarios
		err := o.validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s %q %s: validate() = %v, want %q", tc.product, tc.apiURL, tc.scenarios, err, tc.wantErr)
		}
	}
}
