//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/e2e/openapicheck"
	"github.com/airlock-dev/airlock/pkg/client"
)

// apiSpec checks every exchange of the suite's Sandbox API clients (apiHTTPClient) against the
// OpenAPI document pkg/client/openapi.json; TestMain fails the run on what it does not allow
// (issue 27, item 3).
var apiSpec *openapicheck.Spec

// setupOpenAPICheck compiles the document; setup calls it.
func setupOpenAPICheck() error {
	s, err := openapicheck.New(client.OpenAPIDocument())
	if err != nil {
		return fmt.Errorf("the Sandbox API's OpenAPI document: %w", err)
	}
	apiSpec = s
	return nil
}

// reportOpenAPIViolations prints what the suite's Sandbox API traffic did that the document does
// not allow, and returns the exit code to use.
func reportOpenAPIViolations(code int) int {
	if apiSpec == nil {
		return code
	}
	violations, checked := apiSpec.Violations()
	fmt.Fprintf(os.Stderr, "Sandbox API exchanges checked against pkg/client/openapi.json: %d, violations: %d\n", checked, len(violations))
	for _, v := range violations {
		fmt.Fprintln(os.Stderr, "  openapi:", v)
	}
	if len(violations) > 0 && code == 0 {
		return 1
	}
	return code
}

// TestSandboxAPIServesOpenAPIDocument: every replica answers its OpenAPI document at
// /openapi.json without a token.
func TestSandboxAPIServesOpenAPIDocument(t *testing.T) {
	e := newClaimEnv(t, "airlock-openapi", claimEnvOptions{maxConcurrent: 1, maxPerSession: 1})
	op := startAPIOperator(t, e.ns)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, op.apiURL+"/openapi.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := op.httpClient.Do(req) // no Authorization header
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(body, client.OpenAPIDocument()) {
		t.Errorf("GET /openapi.json: %d %q (%d bytes), want 200 application/json with pkg/client/openapi.json", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
}
