//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// classShapeMessages are the CRD's messages for a class that would set, repeat or swallow one
// of the operator's flags, or take one of its mounts (pkg/apis types.go).
var classShapeMessages = []string{
	"args must begin with sandboxd, once",
	"each arg after sandboxd must be a flag written --name=value",
	"args may not set --allowed-tools, --auth-token-file, --warm-key-file, --readonly or --help",
	"--workspace is the operator's",
	"a volume may not be mounted at, over or under /var/run/airlock or /run/airlock",
	"mountPath may not hold empty, . or .. segments",
	"volume names airlock-auth-token, airlock-warm-key and airlock-egress-ca are the operator's",
	"env may not read a Secret",
}

// TestClassShapesRefusedByTheSchema: the API server refuses every class shape that would set,
// repeat or swallow one of the operator's flags or put its mounts in the file tools' reach
// (sandboxpodtest.ClassShapes: the two of issue 23 among them), with one of the schema's
// messages, and accepts the shapes the operator builds (server-side dry runs: nothing is stored).
func TestClassShapesRefusedByTheSchema(t *testing.T) {
	ctx := context.Background()
	for _, shape := range sandboxpodtest.ClassShapes() {
		t.Run(shape.Name, func(t *testing.T) {
			class := validClass("e2e-class-shape")
			shape.ApplyTo(&class.Spec)
			_, err := airlockClient.AirlockV1alpha1().SandboxClasses().Create(ctx, class, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if shape.Refused == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error %v, want Invalid", err)
			}
			for _, m := range classShapeMessages {
				if strings.Contains(err.Error(), m) {
					return
				}
			}
			t.Errorf("error %v names none of the schema's messages for operator flags and mounts", err)
		})
	}
}
