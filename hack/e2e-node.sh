#!/usr/bin/env bash
# The e2e suite on real pods: brings up a real single node (hack/local-node.sh), builds and imports
# airlock's images and the runtime stand-ins (hack/imagebuild), installs airlock in-cluster as a
# user would, with `helm install` of manifests/chart/airlock (CRDs, RBAC, the operator's 2
# replicas with leader election, the Sandbox API Service; docs/helm.md, "The real-node e2e
# installs with Helm"), runs the tests tagged `e2e realnode` (e2e/realnode*_test.go), and takes
# the node down again, whatever happens.
#
# usage: hack/e2e-node.sh [--if-possible] [go test flags...]
#
#   --if-possible  when this machine cannot run a real node (not root, no br_netfilter, or a node
#                  of someone else's is up), say why and exit 0 instead of failing (`make test`)
#   go test flags  passed last, so they win: `-run '^TestRealNodePython'` runs only those tests
#                  (the default is -run '^TestRealNode', all of them)
#
# Settings: AIRLOCK_E2E_NODE_KEEP=1 leaves the node up afterwards (then: hack/local-node.sh down);
# a node that was already up (e.g. from `make run`) is used and left up.
# AIRLOCK_E2E_INSTALL=helm (default) installs with the chart; =kustomize with `kubectl apply -k
# manifests/` instead (one install path per run: manifests/chart_test.go holds the two equal).
# HELM names the helm binary (default bin/helm, built by hack/build-cluster-bins.sh if missing).
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
  hack/local-node.sh images operator sandbox sandbox-go e2e-client e2e-python e2e-go-example e2e-typescript
  eval "$(hack/local-node.sh env)"
  log "node up and images imported in $((SECONDS - t0))s"
else
  [[ -n ${KUBECONFIG:-} ]] || { log "error: AIRLOCK_E2E_USE_KUBECONFIG=1 needs KUBECONFIG"; exit 1; }
fi
export KUBECONFIG

INSTALL=${AIRLOCK_E2E_INSTALL:-helm}
export AIRLOCK_E2E_INSTALL=$INSTALL
CRDS=(crd/sandboxclasses.airlock.dev crd/toolregistries.airlock.dev crd/agentruntimes.airlock.dev
  crd/sandboxclaims.airlock.dev crd/sessionrecords.airlock.dev)

# apply_crds: the CRDs of manifests/crd, server-side (Helm installs them on `helm install` but
# never upgrades them: docs/helm.md), and wait until they are served.
apply_crds() {
  "$KUBECTL" apply --server-side --force-conflicts -k manifests/crd >/dev/null
  "$KUBECTL" wait --for=condition=Established --timeout=60s "${CRDS[@]}" >/dev/null
}

# install_kustomize: `kubectl apply -k manifests/`, the CRDs first.
install_kustomize() {
  log "installing airlock: kubectl apply -k manifests/"
  apply_crds
  "$KUBECTL" apply --server-side --force-conflicts -k manifests/ >/dev/null
}

# install_helm: the chart, as docs/helm.md tells users. A fresh cluster gets `helm install`,
# which installs the CRDs itself; a release already there (a node kept up) is upgraded, its CRDs
# applied first; an install of `kubectl apply -k` (e.g. `make run`'s node) is taken over by the
# release (--take-ownership), its CRDs applied first.
install_helm() {
  local helm=${HELM:-${AIRLOCK_BIN_DIR:-$ROOT/bin}/helm}
  if [[ -z ${HELM:-} && ! -x $helm ]]; then
    hack/build-cluster-bins.sh helm
  fi
  local chart=manifests/chart/airlock
  local -a common=(--namespace airlock-system --kubeconfig "$KUBECONFIG")
  if "$helm" status airlock "${common[@]}" >/dev/null 2>&1; then
    log "upgrading the Helm release airlock: helm upgrade airlock $chart"
    apply_crds
    "$helm" upgrade airlock "$chart" "${common[@]}" >/dev/null
  elif [[ -n $installed ]]; then
    log "taking the kustomize install over: helm install --take-ownership airlock $chart"
    apply_crds
    "$helm" install airlock "$chart" "${common[@]}" --take-ownership >/dev/null
  else
    log "installing airlock: helm install airlock $chart --namespace airlock-system --create-namespace"
    "$helm" install airlock "$chart" "${common[@]}" --create-namespace >/dev/null
  fi
}

t1=$SECONDS
installed=$("$KUBECTL" -n airlock-system get deployment/airlock-operator -o name 2>/dev/null || true)
case $INSTALL in
  helm) install_helm ;;
  kustomize) install_kustomize ;;
  *) log "error: AIRLOCK_E2E_INSTALL=$INSTALL: want helm or kustomize"; exit 1 ;;
esac
if [[ -n $installed ]]; then
  # The images were just rebuilt under the same tags: the running replicas must pick them up.
  "$KUBECTL" -n airlock-system rollout restart deployment/airlock-operator >/dev/null
fi
"$KUBECTL" -n airlock-system rollout status deployment/airlock-operator --timeout=120s
log "airlock installed ($INSTALL), operator 2/2 available in $((SECONDS - t1))s"

# The suite takes 20-25 minutes on this kind of machine (2 cores), more under load: the limit is
# the whole suite's, well above it (it passed 20 minutes in a fresh-clone run at 3648aa3).
go test -tags 'e2e realnode' -count=1 -timeout 45m -v -run '^TestRealNode' "$@" ./e2e/
