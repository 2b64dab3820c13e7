#!/usr/bin/env bash
# The e2e suite on real pods: brings up a real single node (hack/local-node.sh), builds and imports
# airlock's images and the runtime stand-in (hack/imagebuild), installs airlock in-cluster as a
# user would (`kubectl apply -k manifests/`: CRDs, RBAC, the operator's 2 replicas with leader
# election, the Sandbox API Service), runs the tests tagged `e2e realnode` (e2e/realnode_test.go),
# and takes the node down again, whatever happens.
#
# usage: hack/e2e-node.sh [--if-possible] [go test flags...]
#
#   --if-possible  when this machine cannot run a real node (not root, no br_netfilter, or a node
#                  of someone else's is up), say why and exit 0 instead of failing (`make test`)
#
# Settings: AIRLOCK_E2E_NODE_KEEP=1 leaves the node up afterwards (then: hack/local-node.sh down);
# a node that was already up (e.g. from `make run`) is used and left up.
# With KUBECONFIG set and AIRLOCK_E2E_USE_KUBECONFIG=1 it runs against that cluster instead (pods
# must really run there, e.g. kind, with the images loaded: hack/e2e-kind.sh); airlock is
# installed there too.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

IF_POSSIBLE=0
if [[ ${1:-} == --if-possible ]]; then
  IF_POSSIBLE=1
  shift
fi

log() { echo "e2e-node: $*" >&2; }
cannot() {
  if ((IF_POSSIBLE)); then
    log "SKIPPED: $*"
    log "(the real-node e2e needs root for containerd, the kubelet and host networking; the API-only e2e ran instead)"
    exit 0
  fi
  log "error: $*"
  exit 1
}

# can_run_node: the checks local-node.sh would fail on, made up front so that --if-possible can
# skip cleanly.
can_run_node() {
  [[ $EUID -eq 0 ]] || cannot "not root (uid $EUID)"
  [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] || modprobe br_netfilter 2>/dev/null || true
  [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] ||
    cannot "the kernel has no br_netfilter: NetworkPolicy could not be enforced on bridged pod traffic"
  local owner
  owner=$(cat /run/airlock-local-node 2>/dev/null || true)
  if [[ -n $owner && $owner != "${AIRLOCK_NODE_DIR:-$ROOT/_output/local-node}" && -s $owner/components ]]; then
    cannot "a local node from $owner is up on this machine (one per machine)"
  fi
}

# kubectl: bin/kubectl (or $AIRLOCK_BIN_DIR/kubectl; hack/build-cluster-bins.sh), unless KUBECTL names another.
KUBECTL=${KUBECTL:-${AIRLOCK_BIN_DIR:-$ROOT/bin}/kubectl}
export KUBECTL

if [[ "${AIRLOCK_E2E_USE_KUBECONFIG:-0}" != 1 ]]; then
  can_run_node
  t0=$SECONDS
  if hack/local-node.sh status >/dev/null 2>&1; then
    # A node that was up before (e.g. `make run`'s) is used and left up.
    log "using the local node that is already up (left up afterwards)"
  elif [[ ${AIRLOCK_E2E_NODE_KEEP:-0} != 1 ]]; then
    trap 'hack/local-node.sh down' EXIT
  fi
  # The images are built from this tree every time (tens of seconds), then imported.
  AIRLOCK_NODE_IMPORT_IMAGES=0 hack/local-node.sh up
  hack/local-node.sh images operator sandbox sandbox-go e2e-client
  eval "$(hack/local-node.sh env)"
  log "node up and images imported in $((SECONDS - t0))s"
else
  [[ -n ${KUBECONFIG:-} ]] || { log "error: AIRLOCK_E2E_USE_KUBECONFIG=1 needs KUBECONFIG"; exit 1; }
fi
export KUBECONFIG

t1=$SECONDS
log "installing airlock: kubectl apply -k manifests/"
"$KUBECTL" apply --server-side --force-conflicts -k manifests/crd >/dev/null
"$KUBECTL" wait --for=condition=Established --timeout=60s crd/sandboxclasses.airlock.dev \
  crd/toolregistries.airlock.dev crd/agentruntimes.airlock.dev crd/sandboxclaims.airlock.dev >/dev/null
installed=$("$KUBECTL" -n airlock-system get deployment/airlock-operator -o name 2>/dev/null || true)
"$KUBECTL" apply --server-side --force-conflicts -k manifests/ >/dev/null
if [[ -n $installed ]]; then
  # The images were just rebuilt under the same tags: the running replicas must pick them up.
  "$KUBECTL" -n airlock-system rollout restart deployment/airlock-operator >/dev/null
fi
"$KUBECTL" -n airlock-system rollout status deployment/airlock-operator --timeout=120s
log "airlock installed, operator 2/2 available in $((SECONDS - t1))s"

go test -tags 'e2e realnode' -count=1 -timeout 20m -v -run '^TestRealNode' "$@" ./e2e/
