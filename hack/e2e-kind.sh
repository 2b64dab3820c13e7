#!/usr/bin/env bash
# `make e2e-kind`, for machines with Docker and kind (users' CI): builds airlock's two images from
# the Dockerfiles (as `make image` does) and the runtime stand-in (hack/imagebuild, no Docker
# needed), the runtime in Python (hack/imagebuild e2e-python, from this machine's python3) and the
# Go and TypeScript clients' examples (e2e-go-example, e2e-typescript: npm and Node.js 22 of the
# pinned npm package), creates a kind cluster, loads the six images, and runs hack/e2e-node.sh
# against it, which installs airlock as a user would (`helm install` of manifests/chart/airlock;
# helm is built from its pin if bin/helm is missing) and runs the real-pod e2e suite (tags `e2e
# realnode`, the same tests it runs on this repository's local node).
#
# Not run on the development machines: they have no Docker engine (docs/decisions.md, "Real node").
#
# usage: hack/e2e-kind.sh [go test flags...]
# env: KIND (default kind), KIND_CLUSTER (default airlock-e2e), KEEP_CLUSTER=1 to keep it afterwards.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
KIND=${KIND:-kind}
CLUSTER=${KIND_CLUSTER:-airlock-e2e}
# The tags manifests/ and the e2e suite use.
IMAGE=ghcr.io/airlock-dev/airlock:v0.1.0
SANDBOX_IMAGE=ghcr.io/airlock-dev/airlock-sandbox:v0.1.0
CLIENT_IMAGE=localhost/airlock-e2e/runtimeclient:v0.1.0

for tool in docker "$KIND" kubectl go; do
  command -v "$tool" >/dev/null || { echo "e2e-kind needs $tool on PATH" >&2; exit 1; }
done

version=${IMAGE##*:}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
docker build --build-arg VERSION="$version" --build-arg COMMIT="$commit" -t "$IMAGE" .
docker build --build-arg VERSION="$version" --build-arg COMMIT="$commit" -f Dockerfile.sandbox --target sandbox -t "$SANDBOX_IMAGE" .
AIRLOCK_E2E_CLIENT_IMAGE=$CLIENT_IMAGE hack/imagebuild/build-images.sh e2e-client e2e-python e2e-go-example e2e-typescript

if ! "$KIND" get clusters | grep -qx "$CLUSTER"; then
  "$KIND" create cluster --name "$CLUSTER" --wait 120s
fi
if [[ "${KEEP_CLUSTER:-0}" != 1 ]]; then
  trap '"$KIND" delete cluster --name "$CLUSTER"' EXIT
fi
"$KIND" load docker-image "$IMAGE" "$SANDBOX_IMAGE" --name "$CLUSTER"
for tar in e2e-client e2e-python e2e-go-example e2e-typescript; do
  "$KIND" load image-archive "${AIRLOCK_IMAGES_DIR:-_output/images}/$tar.tar" --name "$CLUSTER"
done

kubeconfig=$(mktemp)
"$KIND" get kubeconfig --name "$CLUSTER" >"$kubeconfig"
KUBECONFIG=$kubeconfig KUBECTL=$(command -v kubectl) AIRLOCK_E2E_USE_KUBECONFIG=1 hack/e2e-node.sh "$@"
