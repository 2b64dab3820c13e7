#!/usr/bin/env bash
# Runs the e2e suite on a fresh local control plane and tears it down afterwards, whatever happens.
# With KUBECONFIG already set and AIRLOCK_E2E_USE_KUBECONFIG=1, it runs against that cluster instead.
#
# usage: hack/e2e.sh [go test flags...]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if [[ "${AIRLOCK_E2E_USE_KUBECONFIG:-0}" != 1 ]]; then
  # A throwaway cluster of its own: its own state dir (a cluster of `make cluster-up` stays up and
  # untouched) and any free ports (a well-known port may be taken: by that cluster, by another run).
  export AIRLOCK_CLUSTER_DIR=${AIRLOCK_CLUSTER_DIR:-$ROOT/_output/e2e-cluster}
  for var in AIRLOCK_CLUSTER_{ETCD_PORT,ETCD_PEER_PORT,APISERVER_PORT,KCM_PORT,SCHEDULER_PORT}; do
    export "$var=${!var:-0}"
  done
  trap 'hack/local-cluster.sh down' EXIT
  hack/local-cluster.sh up
  eval "$(hack/local-cluster.sh env)"
  # The cluster is this run's own: tests may stop and resume its processes (its pid files).
  AIRLOCK_E2E_CLUSTER_DIR=$(cd "$AIRLOCK_CLUSTER_DIR" && pwd)
  export AIRLOCK_E2E_CLUSTER_DIR
fi
export KUBECONFIG
# The trace collector of e2e/tracing (docs/record.md §1), built from its pin once (bin/.stamp-jaeger).
AIRLOCK_BIN_DIR=${AIRLOCK_BIN_DIR:-$ROOT/bin} hack/build-cluster-bins.sh jaeger
export KUBECTL=${KUBECTL:-${AIRLOCK_BIN_DIR:-$ROOT/bin}/kubectl}

go test -tags e2e -count=1 -timeout 20m -v "$@" ./e2e/...
