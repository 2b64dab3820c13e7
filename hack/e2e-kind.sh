#!/usr/bin/env bash
# `make e2e-kind`, for machines with Docker and kind (users' CI): builds the operator image, creates
# a kind cluster, loads the image, and runs the same e2e suite as `make e2e` against it.
#
# env: KIND (default kind), KIND_CLUSTER (default airlock-e2e), KEEP_CLUSTER=1 to keep it afterwards.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
KIND=${KIND:-kind}
CLUSTER=${KIND_CLUSTER:-airlock-e2e}
IMAGE=ghcr.io/airlock-dev/airlock:v0.1.0   # the tag manifests/kustomization.yaml installs

for tool in docker "$KIND" kubectl; do
  command -v "$tool" >/dev/null || { echo "e2e-kind needs $tool on PATH" >&2; exit 1; }
done

docker build -t "$IMAGE" .
if ! "$KIND" get clusters | grep -qx "$CLUSTER"; then
  "$KIND" create cluster --name "$CLUSTER" --wait 120s
fi
if [[ "${KEEP_CLUSTER:-0}" != 1 ]]; then
  trap '"$KIND" delete cluster --name "$CLUSTER"' EXIT
fi
"$KIND" load docker-image "$IMAGE" --name "$CLUSTER"

kubeconfig=$(mktemp)
"$KIND" get kubeconfig --name "$CLUSTER" >"$kubeconfig"
KUBECONFIG=$kubeconfig KUBECTL=$(command -v kubectl) AIRLOCK_E2E_USE_KUBECONFIG=1 hack/e2e.sh "$@"
