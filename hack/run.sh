#!/usr/bin/env bash
# `make run`: brings up the local control plane (hack/local-cluster.sh), installs airlock's manifests
# as a user would, and runs the operator against it in the foreground. Ctrl-C stops the operator;
# the cluster stays up for kubectl (eval "$(hack/local-cluster.sh env)") until `make cluster-down`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

hack/local-cluster.sh up
eval "$(hack/local-cluster.sh env)"
KUBECTL=$ROOT/bin/kubectl

echo "installing airlock (kubectl apply -k manifests/)"
"$KUBECTL" apply --server-side --force-conflicts -k manifests/crd >/dev/null
"$KUBECTL" wait --for=condition=Established --timeout=60s crd/sandboxclasses.airlock.dev crd/toolregistries.airlock.dev crd/agentruntimes.airlock.dev crd/sandboxclaims.airlock.dev >/dev/null
"$KUBECTL" apply --server-side --force-conflicts -k manifests/

# The API-only control plane has no container runtime: kwok would only pretend to run the
# operator's pods. Scale them away and run the operator here, out of cluster, instead.
"$KUBECTL" -n airlock-system scale deployment/airlock-operator --replicas=0 >/dev/null

make --no-print-directory build
API=${AIRLOCK_API_ADDRESS:-127.0.0.1:8443}
METRICS=${AIRLOCK_METRICS_ADDRESS:-127.0.0.1:8080}
HEALTH=${AIRLOCK_HEALTH_ADDRESS:-127.0.0.1:8081}
cat <<MSG

airlock operator starting against the local control plane:
  Sandbox API  http://$API      health http://$HEALTH/readyz      metrics http://$METRICS/metrics
In another shell:
  eval "\$(hack/local-cluster.sh env)"; export PATH=$ROOT/bin:\$PATH
  kubectl get sbc,tr,ar,sbx -A
Ctrl-C stops the operator; 'make cluster-down' stops the cluster.

MSG
exec bin/airlock operator \
  --kubeconfig="$KUBECONFIG" \
  --leader-elect-resource-namespace=airlock-system \
  --api-bind-address="$API" \
  --metrics-bind-address="$METRICS" \
  --health-probe-bind-address="$HEALTH"
