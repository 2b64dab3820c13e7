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
# gVisor: the suite runs the codegen class under RuntimeClass `gvisor` (handler `runsc`,
# docs/isolation.md, "A kernel of its own in your cluster"). This script builds runsc and
# containerd-shim-runsc-v1 from their pin (hack/build-cluster-bins.sh, no Docker needed), creates
# the cluster with containerd's `runsc` runtime (containerdConfigPatches: kind's node images run
# containerd 2, config version 3), copies both binaries into every node's /usr/local/bin (where
# containerd finds the shim on its PATH) and creates the RuntimeClass. AIRLOCK_KIND_GVISOR=0
# leaves gVisor out (the gVisor tests then fail: they need the RuntimeClass).
#
# Not run on the development machines: they have no Docker engine (docs/decisions.md, "Real node").
#
# usage: hack/e2e-kind.sh [go test flags...]
# env: KIND (default kind), KIND_CLUSTER (default airlock-e2e), KEEP_CLUSTER=1 to keep it afterwards,
#      AIRLOCK_KIND_GVISOR=0 (above).
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

GVISOR=${AIRLOCK_KIND_GVISOR:-1}
kind_config=$(mktemp)
if ((GVISOR)); then
  AIRLOCK_BIN_DIR=${AIRLOCK_BIN_DIR:-$ROOT/bin} hack/build-cluster-bins.sh runsc containerd-shim-runsc-v1
  cat >"$kind_config" <<'KIND'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
containerdConfigPatches:
- |-
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
    runtime_type = "io.containerd.runsc.v1"
KIND
else
  printf 'kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n' >"$kind_config"
fi
if ! "$KIND" get clusters | grep -qx "$CLUSTER"; then
  "$KIND" create cluster --name "$CLUSTER" --config "$kind_config" --wait 120s
fi
rm -f "$kind_config"
if [[ "${KEEP_CLUSTER:-0}" != 1 ]]; then
  trap '"$KIND" delete cluster --name "$CLUSTER"' EXIT
fi
"$KIND" load docker-image "$IMAGE" "$SANDBOX_IMAGE" --name "$CLUSTER"
for tar in e2e-client e2e-python e2e-go-example e2e-typescript; do
  "$KIND" load image-archive "${AIRLOCK_IMAGES_DIR:-_output/images}/$tar.tar" --name "$CLUSTER"
done

kubeconfig=$(mktemp)
"$KIND" get kubeconfig --name "$CLUSTER" >"$kubeconfig"
if ((GVISOR)); then
  bin=${AIRLOCK_BIN_DIR:-$ROOT/bin}
  for node in $("$KIND" get nodes --name "$CLUSTER"); do
    docker cp "$bin/runsc" "$node:/usr/local/bin/runsc"
    docker cp "$bin/containerd-shim-runsc-v1" "$node:/usr/local/bin/containerd-shim-runsc-v1"
  done
  KUBECONFIG=$kubeconfig kubectl apply -f - <<'RC'
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: runsc
RC
fi
KUBECONFIG=$kubeconfig KUBECTL=$(command -v kubectl) AIRLOCK_E2E_USE_KUBECONFIG=1 hack/e2e-node.sh "$@"
