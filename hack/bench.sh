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
# The peer (issue 40): then, on a fresh plane made the same way, kubernetes-sigs/agent-sandbox's
# controller (pinned in hack/tools/agent-sandbox, built into the bin dir by
# `hack/build-cluster-bins.sh agent-sandbox-controller`) runs as its own ServiceAccount with its
# KWOK presubmit's flags, the same scenarios (but the scale runs) are sent as SandboxClaims, and
# `bench compare` prints both side by side with the issue's ratios. The output says so plainly
# when the peer did not run.
#
# Settings (environment):
#   BENCH_SCENARIOS        comma list of rate10,rate20,rate40,burst60,warm20,warm-demand,warm-day,scale2000,
#                          scale10x500 (default rate10,rate20,rate40,burst60,warm20; BENCH_SCALE=1 adds the
#                          scale runs; warm-demand, airlock's only: a warmPolicy pool through 2/s, 20/s and
#                          2/s for 30 s each; the pool's refill follows the measured arrivals, above
#                          --warm-refill-rate; warm-day, airlock's only, not by default: the same pool
#                          through a replayed day of 1,884 sessions, hack/bench/testdata/day.csv, each
#                          closed after its length, about 16 minutes at the default speed-up;
#                          docs/decisions.md, "make bench", says why 96x overstates its idle share)
#   BENCH_DAY_SPEEDUP      how many times faster than the day warm-day replays it (default 96: 24 h in
#                          15 min; arrivals and session lengths alike, the operator's time constants not:
#                          docs/decisions.md, "make bench")
#   BENCH_CLAIMS           claims per rate scenario (default 200)
#   BENCH_SCALE_ONE / BENCH_SCALE_PER_NAMESPACE   live claims of scale2000 (2000) / of each of
#                          scale10x500's 10 namespaces (500); BENCH_SCALE_ACQUIRES on top (100);
#                          BENCH_FILL_STALL: give up when no claim of a fill settles for this long (3m)
#   BENCH_OPERATOR_FLAGS   more `airlock operator` flags, e.g. "--kube-api-qps=1000 --kube-api-burst=2000"
#   BENCH_RECORDS_WEBHOOK  1 (default): airlock runs with its records webhook, as installed (its CPU
#                          is counted); 0: without, to measure what it costs
#   BENCH_KCM_QPS          kube-controller-manager's --kube-api-qps (default 1000; burst twice that)
#   BENCH_OUTPUT           the JSON file (default _output/bench/bench-<UTC time>.json); the peer's is
#                          <that>-agent-sandbox.json, the side by side <that>-side-by-side.json
#   BENCH_BASELINE         the committed baseline printed beside each figure; a scenario more than 25%
#                          slower is said so (default hack/bench/baseline.json)
#   BENCH_WRITE_BASELINE=1 write this run's figures into the baseline (make bench-baseline; on purpose,
#                          on a quiet machine, then commit it)
#   BENCH_PEER             1: build the peer when needed, and run it; 0: never; unset: run it when
#                          its binary is built from its pin (the default build list leaves it out)
#   BENCH_PEER_FLAGS       more agent-sandbox-controller flags
#   BENCH_KEEP_STATE=1     keep the state dirs (component logs, audit log) instead of deleting them
#   AIRLOCK_BIN_DIR        the cluster binaries, and the peer's (default bin/)
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
PEER_OUTPUT=${OUTPUT%.json}-agent-sandbox.json
COMPARE_OUTPUT=${OUTPUT%.json}-side-by-side.json
mkdir -p "$(dirname "$OUTPUT")"

# shellcheck source=hack/lib/cluster.sh
source "$ROOT/hack/lib/cluster.sh"
# shellcheck source=hack/lib/gomod.sh
source "$ROOT/hack/lib/gomod.sh"

# The peer runs when asked (BENCH_PEER=1, built if needed), or by default when its binary is built
# from its pin; PEER_SKIPPED says why not, and is printed at the end. It runs the scenarios asked
# for but the scale runs (their fill goes through airlock's Sandbox API), warm-demand and warm-day
# (the peer's pools follow demand only through an HPA or KEDA, which this plane does not run).
PEER_SKIPPED=
PEER_SCENARIOS=$(tr ',' '\n' <<<"$SCENARIOS" | grep -vx -e scale2000 -e scale10x500 -e warm-demand -e warm-day -e '' | paste -sd, || true)
case ${BENCH_PEER:-} in
  0) PEER_SKIPPED="BENCH_PEER=0" ;;
  1) hack/build-cluster-bins.sh agent-sandbox-controller ;;
  "") hack/build-cluster-bins.sh --check agent-sandbox-controller ||
    PEER_SKIPPED="$BIN/agent-sandbox-controller is not built from hack/tools/agent-sandbox's pin; BENCH_PEER=1 builds it (a few minutes) and runs it" ;;
  *) echo "bench: BENCH_PEER must be 0, 1 or unset, not $BENCH_PEER" >&2; exit 2 ;;
esac
if [[ -z $PEER_SKIPPED && -z $PEER_SCENARIOS ]]; then
  PEER_SKIPPED="only scenarios the peer does not run were asked for (the scale runs, warm-demand, warm-day)"
fi
if [[ -n $PEER_SKIPPED ]]; then
  log "the peer (agent-sandbox) will not run: $PEER_SKIPPED"
else
  log "airlock, then the peer (agent-sandbox) on a fresh plane: $PEER_SCENARIOS side by side"
fi

# BUILD holds this tree's binaries; STATE is the plane of the moment (a fresh one per product),
# PROCESS its controller's name, PHASE what the script is doing.
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/airlock-bench-build.XXXXXX")
STATE=
PROCESS=airlock
PHASE="building"

# plane_down RC: stops the current plane and its controller; its state dir is kept when RC is not
# 0 or BENCH_KEEP_STATE=1.
plane_down() {
  local rc=$1
  [[ -n $STATE ]] || return 0
  # local-cluster.sh down stops what the components file lists: the controller too (start()
  # recorded it there), clients before the API server.
  AIRLOCK_CLUSTER_DIR=$STATE hack/local-cluster.sh down || true
  if ((rc != 0)) && [[ -f $STATE/$PROCESS.log ]]; then
    log "last lines of $PROCESS's log ($STATE/$PROCESS.log):"
    tail -n 30 "$STATE/$PROCESS.log" | sed 's/^/    /' >&2
  fi
  if [[ ${BENCH_KEEP_STATE:-0} == 1 || $rc != 0 ]]; then
    log "state kept in $STATE (component logs, audit.log)"
  else
    rm -rf "$STATE"
  fi
  STATE=
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if ((rc != 0)); then
    log "FAILED while $PHASE"
  fi
  plane_down "$rc"
  rm -rf "$BUILD"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building airlock and the load generator from this tree"
CGO_ENABLED=0 go build -o "$BUILD/airlock" .
go build -o "$BUILD/bench" ./hack/bench

# plane_up: a fresh API-only plane in a new state dir; sets STATE, PKI, KUBECONFIG_ADMIN and the
# ports of its cluster.env.
plane_up() {
  STATE=$(mktemp -d "${TMPDIR:-/tmp}/airlock-bench.XXXXXX")
  PKI=$STATE/pki
  KUBECONFIG_ADMIN=$STATE/kubeconfig
  # The API server's audit log counts writes by user (each product's controller is a
  # ServiceAccount of its own) and tells 409 Conflict from 409 AlreadyExists; reads are not
  # logged (level None).
  cat >"$STATE/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
POLICY
  # The bench plane only: 10 Nodes big enough for every sandbox of the scale runs (100m CPU, 256Mi
  # each), kube-controller-manager's client QPS raised so that its garbage collection of deleted
  # claims' children is not held by its rate limiter (claims no longer have a Deployment: it writes
  # nothing on the way to Bound); the scheduler's is already 1000 (hack/local-cluster/
  # kube-scheduler.yaml).
  export AIRLOCK_CLUSTER_DIR=$STATE AIRLOCK_CLUSTER_NODES=10 AIRLOCK_CLUSTER_NODE_CPU=1000 \
    AIRLOCK_CLUSTER_NODE_MEMORY=4Ti AIRLOCK_CLUSTER_NODE_PODS=1000 AIRLOCK_CLUSTER_TIMEOUT=$TIMEOUT
  local var
  for var in AIRLOCK_CLUSTER_{ETCD_PORT,ETCD_PEER_PORT,APISERVER_PORT,KCM_PORT,SCHEDULER_PORT}; do
    export "$var=0"
  done
  export AIRLOCK_CLUSTER_APISERVER_FLAGS="--audit-policy-file=$STATE/audit-policy.yaml --audit-log-path=$STATE/audit.log --audit-log-format=json --audit-log-mode=blocking --audit-log-maxsize=1000000 --audit-log-maxbackup=0"
  export AIRLOCK_CLUSTER_KCM_FLAGS="--kube-api-qps=$KCM_QPS --kube-api-burst=$((2 * KCM_QPS))"
  hack/local-cluster.sh up
  # shellcheck disable=SC1091
  source "$STATE/cluster.env"
}

plane_notes() {
  echo "10 kwok Nodes; kube-scheduler client qps/burst $(awk '/^  qps:/ {q=$2} /^  burst:/ {b=$2} END {print q "/" b}' "$STATE/kube-scheduler.yaml"); kube-controller-manager --kube-api-qps=$KCM_QPS --kube-api-burst=$((2 * KCM_QPS)) (bench plane only); audit log of writes at Metadata level; a fresh plane per product"
}

# controller_kubeconfig NAMESPACE SERVICEACCOUNT FILE: a kubeconfig holding a TokenRequest token of
# the ServiceAccount, so that a controller runs as it would in a cluster.
controller_kubeconfig() {
  local token
  token=$(kubectl_ create token "$2" -n "$1" --duration=24h)
  cat >"$3" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster:
    server: https://$ADDR:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $2
  user:
    token: $token
contexts:
- name: bench
  context: {cluster: bench, user: $2}
current-context: bench
KUBECONFIG
  chmod 600 "$3"
}

# leads HEALTH_PORT METRICS_PORT: the controller is ready and holds its leader lease.
leads() {
  curl -sf --max-time 2 "http://$ADDR:$1/readyz" >/dev/null &&
    curl -sf --max-time 2 "http://$ADDR:$2/metrics" | grep -q '^leader_election_master_status{.*} 1$'
}

# webhook_bundles_at_least N: N webhooks of the records webhook's configuration have a caBundle.
webhook_bundles_at_least() {
  local n
  n=$(kubectl_ get validatingwebhookconfiguration airlock-operator-records \
    -o jsonpath='{range .webhooks[*]}{.clientConfig.caBundle}{"\n"}{end}' | grep -c . || true)
  [[ $n -ge $1 ]]
}

# start_records_webhook: the records webhook of the default install (manifests/records-webhook,
# docs/security.md) beside the plane, as its ServiceAccount, its configuration pointed at it by
# URL (the plane's API server advertises 127.0.0.1 and cannot reach a Service); every write of
# the operator's that it is asked about waits for its answer, as in a cluster. BENCH_RECORDS_WEBHOOK=0
# leaves it out (to measure what it costs).
start_records_webhook() {
  [[ ${BENCH_RECORDS_WEBHOOK:-1} == 1 ]] || { log "no records webhook (BENCH_RECORDS_WEBHOOK=0)"; return; }
  kubectl_ apply --server-side -f manifests/records-webhook/service_account.yaml -f manifests/records-webhook/rbac.yaml \
    -f manifests/records-webhook/validating_webhook.yaml >/dev/null
  controller_kubeconfig airlock-system airlock-records-webhook "$STATE/webhook.kubeconfig"
  free_port WEBHOOK_PORT
  log "starting airlock records-webhook"
  # start() and stop() know a component by its executable's name: the airlock binary under the
  # component's name (a link), or `down` would not find it to stop.
  ln -sf "$BUILD/airlock" "$BUILD/airlock-records-webhook"
  START_EXE=$BUILD/airlock-records-webhook start airlock-records-webhook records-webhook --kubeconfig="$STATE/webhook.kubeconfig" \
    --namespace=airlock-system --bind-address="$ADDR:$WEBHOOK_PORT" --tls-sans="$ADDR"
  local patch="" n i
  n=$(kubectl_ get validatingwebhookconfiguration airlock-operator-records -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' | grep -c .)
  for ((i = 0; i < n; i++)); do
    patch+="${patch:+,}{\"op\":\"replace\",\"path\":\"/webhooks/$i/clientConfig\",\"value\":{\"url\":\"https://$ADDR:$WEBHOOK_PORT/validate\"}}"
  done
  kubectl_ patch validatingwebhookconfiguration airlock-operator-records --type=json -p "[$patch]" >/dev/null
  wait_for airlock-records-webhook "the records webhook's CA bundle" webhook_bundles_at_least "$n"
}

run_airlock() {
  PHASE="running airlock" PROCESS=airlock
  plane_up
  log "installing the CRDs and the operator's RBAC"
  kubectl_ apply --server-side -k manifests/crd >/dev/null
  kubectl_ wait --for=condition=Established --timeout=60s crd/sandboxclasses.airlock.dev \
    crd/toolregistries.airlock.dev crd/agentruntimes.airlock.dev crd/sandboxclaims.airlock.dev crd/sessionrecords.airlock.dev >/dev/null
  kubectl_ apply --server-side -f manifests/namespace.yaml -f manifests/rbac/ >/dev/null
  # The operator runs as its ServiceAccount, as it does in a cluster.
  controller_kubeconfig airlock-system airlock-operator "$STATE/operator.kubeconfig"

  start_records_webhook

  free_port API_PORT
  free_port METRICS_PORT
  free_port HEALTH_PORT
  local operator_flags
  read -ra operator_flags <<<"${BENCH_OPERATOR_FLAGS:-}"
  log "starting airlock operator${operator_flags[*]:+ with ${operator_flags[*]}}"
  # start() (hack/lib/cluster.sh) records it in the components file, so that `down` stops it.
  START_EXE=$BUILD/airlock start airlock operator --kubeconfig="$STATE/operator.kubeconfig" \
    --api-bind-address="$ADDR:$API_PORT" --metrics-bind-address="$ADDR:$METRICS_PORT" \
    --health-probe-bind-address="$ADDR:$HEALTH_PORT" "${operator_flags[@]}"
  wait_for airlock "the operator to be ready and lead" leads "$HEALTH_PORT" "$METRICS_PORT"
  # The Sandbox API serves TLS with the operator's own CA (--tls-mode=self-signed, the default): the
  # load generator trusts that CA, as a runtime trusts the airlock-ca ConfigMap, and names the
  # Service the certificate is for (it connects to 127.0.0.1).
  kubectl_ -n airlock-system get secret airlock-sandbox-api-tls \
    -o jsonpath='{.data.ca\.crt}' | base64 -d >"$STATE/api-ca.crt"
  [[ -s $STATE/api-ca.crt ]] || die "the operator published no CA in airlock-system/airlock-sandbox-api-tls"

  local write_baseline=()
  if [[ ${BENCH_WRITE_BASELINE:-0} == 1 ]]; then
    write_baseline=(--write-baseline)
  fi
  "$BUILD/bench" \
    --product=airlock \
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
    --day-speedup="${BENCH_DAY_SPEEDUP:-96}" \
    --fill-stall="${BENCH_FILL_STALL:-3m}" \
    --operator-flags="${BENCH_OPERATOR_FLAGS:-}" \
    --plane-notes="$(plane_notes)" \
    --commit="$(git describe --always --dirty 2>/dev/null || echo unknown)" \
    --baseline="${BENCH_BASELINE:-$ROOT/hack/bench/baseline.json}" \
    "${write_baseline[@]}" \
    --output="$OUTPUT"
  plane_down 0
}

# PEER_FLAGS are the flags agent-sandbox's KWOK presubmit runs its controller with
# (dev/ci/presubmits/test-e2e-scalability-kwok at the pinned version, with its defaults). run_peer
# adds the kubeconfig and the addresses: metrics, health, and the webhook's port and certificate
# dir, which must not collide with anything else on the machine.
PEER_FLAGS=(--leader-election-namespace=agent-sandbox-system --extensions=true
  --kube-api-qps=1000 --kube-api-burst=2000 --sandbox-concurrent-workers=50
  --sandbox-claim-concurrent-workers=50 --sandbox-warm-pool-concurrent-workers=1
  --sandbox-template-concurrent-workers=1 --sandbox-warm-pool-max-batch-size=300)

# peer_identity_docs FILE: the documents of one of the peer's k8s/*.yaml that give its controller
# its identity (Namespace, ServiceAccount, Role, bindings), not its Deployment nor its Services:
# the controller runs here as a process.
peer_identity_docs() {
  awk 'BEGIN { RS = "\n---\n" } /(^|\n)kind: (Namespace|ServiceAccount|Role|RoleBinding|ClusterRoleBinding)\n/ { print "---"; print }' "$1"
}

run_peer() {
  PHASE="running the peer (agent-sandbox)" PROCESS=agent-sandbox-controller
  local src version
  src=$(module_dir "$ROOT/hack/tools/agent-sandbox" sigs.k8s.io/agent-sandbox)
  version=$(awk '$1 == "sigs.k8s.io/agent-sandbox" { print $2 }' hack/tools/agent-sandbox/go.mod)
  plane_up
  log "installing agent-sandbox $version's CRDs and RBAC"
  kubectl_ apply --server-side -f "$src/k8s/crds/" >/dev/null
  # (kubectl wait fails at once on a CRD it sees before the API server gave it conditions:
  # called again until they are Established.)
  wait_for kube-apiserver "agent-sandbox's CRDs to be Established" kubectl_ wait --for=condition=Established \
    --timeout=10s crd/sandboxes.agents.x-k8s.io crd/sandboxclaims.extensions.agents.x-k8s.io \
    crd/sandboxtemplates.extensions.agents.x-k8s.io crd/sandboxwarmpools.extensions.agents.x-k8s.io
  kubectl_ apply --server-side -f "$src/k8s/rbac.generated.yaml" -f "$src/k8s/extensions-rbac.generated.yaml" >/dev/null
  { peer_identity_docs "$src/k8s/controller.yaml"; peer_identity_docs "$src/k8s/extensions.yaml"; } |
    kubectl_ apply --server-side -f - >/dev/null
  controller_kubeconfig agent-sandbox-system agent-sandbox-controller "$STATE/peer.kubeconfig"

  free_port PEER_METRICS_PORT
  free_port PEER_HEALTH_PORT
  free_port PEER_WEBHOOK_PORT
  local extra flags
  read -ra extra <<<"${BENCH_PEER_FLAGS:-}"
  flags=("${PEER_FLAGS[@]}" "${extra[@]}")
  log "starting agent-sandbox-controller $version with ${flags[*]}"
  START_EXE=$BIN/agent-sandbox-controller start agent-sandbox-controller \
    --kubeconfig="$STATE/peer.kubeconfig" \
    --metrics-bind-address="$ADDR:$PEER_METRICS_PORT" --health-probe-bind-address="$ADDR:$PEER_HEALTH_PORT" \
    --webhook-port="$PEER_WEBHOOK_PORT" --webhook-cert-dir="$STATE/peer-webhook-certs" "${flags[@]}"
  wait_for agent-sandbox-controller "the peer to be ready and lead" leads "$PEER_HEALTH_PORT" "$PEER_METRICS_PORT"

  "$BUILD/bench" \
    --product=agent-sandbox \
    --kubeconfig="$KUBECONFIG_ADMIN" \
    --state-dir="$STATE" \
    --operator-metrics-url="http://$ADDR:$PEER_METRICS_PORT/metrics" \
    --operator-user=system:serviceaccount:agent-sandbox-system:agent-sandbox-controller \
    --operator-histograms='^(controller_runtime_reconcile_time_seconds|rest_client_rate_limiter_duration_seconds|rest_client_request_duration_seconds|workqueue_(queue|work)_duration_seconds)$' \
    --pass-metric='^$' \
    --scenarios="$PEER_SCENARIOS" \
    --claims="${BENCH_CLAIMS:-200}" \
    --operator-flags="${flags[*]}" \
    --plane-notes="$(plane_notes)" \
    --commit="$version" \
    --output="$PEER_OUTPUT"
  plane_down 0
}

run_airlock
if [[ -n $PEER_SKIPPED ]]; then
  echo
  echo "THE PEER DID NOT RUN: agent-sandbox was not measured ($PEER_SKIPPED); no side-by-side figures."
  exit 0
fi
run_peer
PHASE="comparing airlock's figures with the peer's"
"$BUILD/bench" compare --airlock="$OUTPUT" --peer="$PEER_OUTPUT" --output="$COMPARE_OUTPUT"
