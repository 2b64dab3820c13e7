package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
