#!/usr/bin/env bash
# Regenerates everything derived from pkg/apis: deepcopy and register code, the typed clientset
# (with its fake and apply configurations), listers and informers under pkg/generated, and the CRD
# manifests under manifests/crd. Never edit those by hand; run this.
#
# usage: hack/update-codegen.sh [root]   (root defaults to the repository; verify-codegen.sh passes a copy)
set -euo pipefail

ROOT=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULE=github.com/airlock-dev/airlock
cd "$ROOT"

# Generators are installed into bin/codegen of the real repository (or of $AIRLOCK_BIN_DIR), never
# into GOPATH/bin.
export GOBIN="${AIRLOCK_BIN_DIR:-$REPO/bin}/codegen"
mkdir -p "$GOBIN"

# shellcheck source=hack/lib/gomod.sh
source "$REPO/hack/lib/gomod.sh"
CODEGEN_PKG=$(module_dir "$REPO" k8s.io/code-generator)
# shellcheck source=/dev/null
source "$CODEGEN_PKG/kube_codegen.sh"

BOILERPLATE="$ROOT/hack/boilerplate.go.txt"

kube::codegen::gen_helpers --boilerplate "$BOILERPLATE" "$ROOT/pkg/apis"
kube::codegen::gen_register --boilerplate "$BOILERPLATE" "$ROOT/pkg/apis"

# gen_client only removes what it generates; start from nothing so that a removed kind leaves no file.
rm -rf "$ROOT/pkg/generated"
mkdir -p "$ROOT"/pkg/generated/{applyconfiguration,clientset,listers,informers}
kube::codegen::gen_client \
  --with-watch \
  --with-applyconfig \
  --output-dir "$ROOT/pkg/generated" \
  --output-pkg "$MODULE/pkg/generated" \
  --boilerplate "$BOILERPLATE" \
  "$ROOT/pkg/apis"

# CRDs: controller-gen runs as a generator only (pinned in hack/tools/controller-gen); the
# files are renamed to <plural>.<group>.yaml.
(cd "$REPO/hack/tools/controller-gen" && go build -o "$GOBIN/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$GOBIN/controller-gen" crd:crdVersions=v1 paths=./pkg/apis/... output:crd:dir="$tmp"
mkdir -p "$ROOT/manifests/crd"
rm -f "$ROOT"/manifests/crd/*.airlock.dev.yaml
for f in "$tmp"/*.yaml; do
  base=$(basename "$f" .yaml)          # airlock.dev_sandboxclaims
  group=${base%%_*}
  plural=${base#*_}
  cp "$f" "$ROOT/manifests/crd/$plural.$group.yaml"
done
