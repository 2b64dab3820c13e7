#!/usr/bin/env bash
# make bench: claim admission and binding under load, end to end (issue 12 item 5).
#
# Brings up its own API-only plane (hack/local-cluster.sh: 10 kwok Nodes, free ports, a temp state
# dir), installs the CRDs and the operator's RBAC, builds `airlock` from this tree and runs
# `airlock operator` as a process of its own under its own ServiceAccount (so that its CPU, RSS and
# API writes can be told apart from everyone else's), then runs the load generator (hack/bench)
# and tears everything down, whatever happens. What each figure means: docs/decisions.md,
# "make bench".
#
# Settings (environment):
#   BENCH_SCENARIOS        comma list of rate10,rate20,rate40,burst60,warm20,scale2000,scale10x500
#                          (default rate10,rate20,rate40,burst60,warm20; BENCH_SCALE=1 adds the scale runs)
#   BENCH_CLAIMS           claims per rate scenario (default 200)
#   BENCH_SCALE_ONE / BENCH_SCALE_PER_NAMESPACE   live claims of scale2000 (2000) / of each of
#                          scale10x500's 10 namespaces (500); BENCH_SCALE_ACQUIRES on top (100);
#                          BENCH_FILL_STALL: give up when no claim of a fill settles for this long (3m)
#   BENCH_OPERATOR_FLAGS   more `airlock operator` flags, e.g. "--kube-api-qps=1000 --kube-api-burst=2000"
#   BENCH_KCM_QPS          kube-controller-manager's --kube-api-qps (default 1000; burst twice that)
#   BENCH_OUTPUT           the JSON file (default _output/bench/bench-<UTC time>.json)
#   BENCH_KEEP_STATE=1     keep the state dir (component logs, audit log) instead of deleting it
#   AIRLOCK_BIN_DIR        the cluster binaries (default bin/)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

LOG_NAME=bench
BIN=${AIRLOCK_BIN_DIR:-$ROOT/bin}
[[ $BIN == /* ]] || BIN=$ROOT/$BIN
export AIRLOCK_BIN_DIR=$BIN
TIMEOUT=${AIRLOCK_CLUSTER_TIMEOUT:-120}
ADDR=127.0.0.1

SCENARIOS=${BENCH_SCENARIOS:-rate10,rate20,rate40,burst60,warm20}
if [[ -z ${BENCH_SCENARIOS:-} && ${BENCH_SCALE:-0} == 1 ]]; then
  SCENARIOS+=,scale2000,scale10x500
fi
KCM_QPS=${BENCH_KCM_QPS:-1000}
[[ $KCM_QPS =~ ^[0-9]+$ ]] || { echo "bench: BENCH_KCM_QPS must be a whole number, not $KCM_QPS" >&2; exit 2; }
OUTPUT=${BENCH_OUTPUT:-$ROOT/_output/bench/bench-$(date -u +%Y%m%dT%H%M%SZ).json}
mkdir -p "$(dirname "$OUTPUT")"

STATE=$(mktemp -d "${TMPDIR:-/tmp}/airlock-bench.XXXXXX")
PKI=$STATE/pki
KUBECONFIG_ADMIN=$STATE/kubeconfig
# shellcheck source=hack/lib/cluster.sh
source "$ROOT/hack/lib/cluster.sh"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # local-cluster.sh down stops what the components file lists: the operator too (start() below
  # recorded it there), clients before the API server.
  AIRLOCK_CLUSTER_DIR=$STATE hack/local-cluster.sh down || true
  if ((rc != 0)) && [[ -f $STATE/airlock.log ]]; then
    log "last lines of the operator's log ($STATE/airlock.log):"
    tail -n 30 "$STATE/airlock.log" | sed 's/^/    /' >&2
  fi
  if [[ ${BENCH_KEEP_STATE:-0} == 1 || $rc != 0 ]]; then
    log "state kept in $STATE (component logs, audit.log)"
  else
    rm -rf "$STATE"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building airlock and the load generator from this tree"
CGO_ENABLED=0 go build -o "$STATE/airlock" .
go build -o "$STATE/bench" ./hack/bench

# The API server's audit log counts writes by user (the operator is a ServiceAccount of its own)
# and tells 409 Conflict from 409 AlreadyExists; reads are not logged (level None).
cat >"$STATE/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
EOF

# The bench plane only: 10 Nodes big enough for every sandbox of the scale runs (100m CPU, 256Mi
# each), kube-controller-manager's client QPS raised so that its garbage collection of deleted
# claims' children is not held by its rate limiter (claims no longer have a Deployment: it writes
# nothing on the way to Bound); the scheduler's is already 1000 (hack/local-cluster/
# kube-scheduler.yaml).
export AIRLOCK_CLUSTER_DIR=$STATE AIRLOCK_CLUSTER_NODES=10 AIRLOCK_CLUSTER_NODE_CPU=1000 \
  AIRLOCK_CLUSTER_NODE_MEMORY=4Ti AIRLOCK_CLUSTER_NODE_PODS=1000 AIRLOCK_CLUSTER_TIMEOUT=$TIMEOUT
for var in AIRLOCK_CLUSTER_{ETCD_PORT,ETCD_PEER_PORT,APISERVER_PORT,KCM_PORT,SCHEDULER_PORT}; do
  export "$var=0"
done
export AIRLOCK_CLUSTER_APISERVER_FLAGS="--audit-policy-file=$STATE/audit-policy.yaml --audit-log-path=$STATE/audit.log --audit-log-format=json --audit-log-mode=blocking --audit-log-maxsize=1000000 --audit-log-maxbackup=0"
export AIRLOCK_CLUSTER_KCM_FLAGS="--kube-api-qps=$KCM_QPS --kube-api-burst=$((2 * KCM_QPS))"
hack/local-cluster.sh up
# shellcheck disable=SC1091
source "$STATE/cluster.env"

log "installing the CRDs and the operator's RBAC"
kubectl_ apply --server-side -k manifests/crd >/dev/null
kubectl_ wait --for=condition=Established --timeout=60s crd/sandboxclasses.airlock.dev \
  crd/toolregistries.airlock.dev crd/agentruntimes.airlock.dev crd/sandboxclaims.airlock.dev >/dev/null
kubectl_ apply --server-side -f manifests/namespace.yaml -f manifests/rbac/ >/dev/null

# The operator runs as its ServiceAccount, as it does in a cluster, with a token from the
# TokenRequest API in a kubeconfig of its own.
token=$(kubectl_ create token airlock-operator -n airlock-system --duration=24h)
cat >"$STATE/operator.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster:
    server: https://$ADDR:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: airlock-operator
  user:
    token: $token
contexts:
- name: bench
  context: {cluster: bench, user: airlock-operator}
current-context: bench
EOF
chmod 600 "$STATE/operator.kubeconfig"

free_port API_PORT
free_port METRICS_PORT
free_port HEALTH_PORT
read -ra operator_flags <<<"${BENCH_OPERATOR_FLAGS:-}"
log "starting airlock operator${operator_flags[*]:+ with ${operator_flags[*]}}"
# start() (hack/lib/cluster.sh) records it in the components file, so that `down` stops it.
START_EXE=$STATE/airlock start airlock operator --kubeconfig="$STATE/operator.kubeconfig" \
  --api-bind-address="$ADDR:$API_PORT" --metrics-bind-address="$ADDR:$METRICS_PORT" \
  --health-probe-bind-address="$ADDR:$HEALTH_PORT" "${operator_flags[@]}"
operator_leads() {
  curl -sf --max-time 2 "http://$ADDR:$HEALTH_PORT/readyz" >/dev/null &&
    curl -sf --max-time 2 "http://$ADDR:$METRICS_PORT/metrics" | grep -q '^leader_election_master_status{.*} 1$'
}
wait_for airlock "the operator to be ready and lead" operator_leads
# The Sandbox API serves TLS with the operator's own CA (--tls-mode=self-signed, the default): the
# load generator trusts that CA, as a runtime trusts the airlock-ca ConfigMap, and names the
# Service the certificate is for (it connects to 127.0.0.1).
kubectl_ -n airlock-system get secret airlock-sandbox-api-tls \
  -o jsonpath='{.data.ca\.crt}' | base64 -d >"$STATE/api-ca.crt"
[[ -s $STATE/api-ca.crt ]] || die "the operator published no CA in airlock-system/airlock-sandbox-api-tls"

"$STATE/bench" \
  --kubeconfig="$KUBECONFIG_ADMIN" \
  --state-dir="$STATE" \
  --api-url="https://$ADDR:$API_PORT" \
  --api-ca-file="$STATE/api-ca.crt" \
  --api-server-name=airlock-sandbox-api.airlock-system.svc \
  --operator-metrics-url="http://$ADDR:$METRICS_PORT/metrics" \
  --operator-user=system:serviceaccount:airlock-system:airlock-operator \
  --scenarios="$SCENARIOS" \
  --claims="${BENCH_CLAIMS:-200}" \
  --scale-one="${BENCH_SCALE_ONE:-2000}" \
  --scale-per-namespace="${BENCH_SCALE_PER_NAMESPACE:-500}" \
  --scale-acquires="${BENCH_SCALE_ACQUIRES:-100}" \
  --fill-stall="${BENCH_FILL_STALL:-3m}" \
  --operator-flags="${BENCH_OPERATOR_FLAGS:-}" \
  --plane-notes="10 kwok Nodes; kube-scheduler client qps/burst $(awk '/^  qps:/ {q=$2} /^  burst:/ {b=$2} END {print q "/" b}' "$STATE/kube-scheduler.yaml"); kube-controller-manager --kube-api-qps=$KCM_QPS --kube-api-burst=$((2 * KCM_QPS)) (bench plane only); audit log of writes at Metadata level" \
  --commit="$(git describe --always --dirty 2>/dev/null || echo unknown)" \
  --output="$OUTPUT"
