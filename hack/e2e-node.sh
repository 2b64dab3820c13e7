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
# The trace collector (TestRealNodeTrace, docs/record.md §1): the real Jaeger (bin/jaeger, built by
# `hack/build-cluster-bins.sh jaeger` if missing) runs on this host for the run, in memory, OTLP in
# on the node's address (where pods reach the host) and its query API on 127.0.0.1; the chart is
# installed with tracing.endpoint naming it, and it is stopped when the script ends (also with
# AIRLOCK_E2E_NODE_KEEP=1: the kept release then names a collector that is gone, which costs only
# dropped batches). AIRLOCK_E2E_TRACING_PROTOCOL=grpc (default) or http picks the OTLP protocol;
# AIRLOCK_E2E_JAEGER_PORTS="OTLP-gRPC OTLP-HTTP query query-gRPC health" moves its ports (default
# "4317 4318 16686 16685 13133"). Not with AIRLOCK_E2E_INSTALL=kustomize (no tracing there).
# With KUBECONFIG set and AIRLOCK_E2E_USE_KUBECONFIG=1 it runs against that cluster instead (pods
# must really run there, e.g. kind, with the images loaded: hack/e2e-kind.sh); airlock is
# installed there too; Jaeger only with AIRLOCK_E2E_JAEGER_HOST, an address of this host the
# cluster's pods reach (e.g. kind's Docker network gateway), else TestRealNodeTrace is skipped.
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

# The trace collector's PID while it runs (stop_jaeger).
JAEGER_PID=
# NODE_DOWN=1: the node was brought up here and goes down at the end.
NODE_DOWN=0

# start_jaeger HOST: the real Jaeger v2 (an OpenTelemetry Collector) with in-memory storage, OTLP
# over gRPC and HTTP in on HOST (the operator's and the gateway's pods reach this host there: the
# node IP is on this host's lo, kube-apiserver's address; their NetworkPolicies restrict ingress
# only), the query API on 127.0.0.1 for the test; returns once the query API answers. Exports the
# endpoint the chart gets and the query URL (e2e/realnode_trace_test.go reads them).
start_jaeger() {
  local host=$1 jaeger=${AIRLOCK_BIN_DIR:-$ROOT/bin}/jaeger dir=$ROOT/_output/e2e-node
  local protocol=${AIRLOCK_E2E_TRACING_PROTOCOL:-grpc}
  local -a ports
  read -r -a ports <<<"${AIRLOCK_E2E_JAEGER_PORTS:-4317 4318 16686 16685 13133}"
  ((${#ports[@]} == 5)) || { log "error: AIRLOCK_E2E_JAEGER_PORTS needs 5 ports, got '${ports[*]}'"; exit 1; }
  case $protocol in
    grpc) AIRLOCK_E2E_TRACING_ENDPOINT=$host:${ports[0]} ;;
    http) AIRLOCK_E2E_TRACING_ENDPOINT=http://$host:${ports[1]} ;;
    *) log "error: AIRLOCK_E2E_TRACING_PROTOCOL=$protocol: want grpc or http"; exit 1 ;;
  esac
  [[ -x $jaeger ]] || hack/build-cluster-bins.sh jaeger
  local addr
  for addr in "$host:${ports[0]}" "$host:${ports[1]}" "127.0.0.1:${ports[2]}" "127.0.0.1:${ports[3]}" "127.0.0.1:${ports[4]}"; do
    if timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "${addr%:*}" "${addr##*:}" 2>/dev/null; then
      log "error: $addr is taken (one of Jaeger's; AIRLOCK_E2E_JAEGER_PORTS moves them)"
      exit 1
    fi
  done
  mkdir -p "$dir"
  cat >"$dir/jaeger.yaml" <<EOF
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:${ports[4]}
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:${ports[2]}
    grpc:
      endpoint: 127.0.0.1:${ports[3]}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 20000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: $host:${ports[0]}
      http:
        endpoint: $host:${ports[1]}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF
  "$jaeger" --config "file:$dir/jaeger.yaml" >"$dir/jaeger.log" 2>&1 &
  JAEGER_PID=$!
  local query=http://127.0.0.1:${ports[2]} i
  for ((i = 0; i < 300; i++)); do
    if ! kill -0 "$JAEGER_PID" 2>/dev/null; then
      wait "$JAEGER_PID" || true
      JAEGER_PID=
      log "error: jaeger exited; the end of its log ($dir/jaeger.log):"
      tail -n 30 "$dir/jaeger.log" >&2
      exit 1
    fi
    curl -sf --max-time 2 "$query/api/services" >/dev/null && break
    sleep 0.2
  done
  ((i < 300)) || { log "error: jaeger's query API $query did not answer in 60 s ($dir/jaeger.log)"; exit 1; }
  export AIRLOCK_E2E_TRACING_ENDPOINT AIRLOCK_E2E_TRACING_PROTOCOL=$protocol AIRLOCK_E2E_JAEGER_QUERY=$query
  log "jaeger (pid $JAEGER_PID): OTLP over $protocol at $AIRLOCK_E2E_TRACING_ENDPOINT, query API $query, log $dir/jaeger.log"
}

# stop_jaeger: TERM, a bounded wait, KILL; by its PID only.
stop_jaeger() {
  [[ -n $JAEGER_PID ]] || return 0
  kill -TERM "$JAEGER_PID" 2>/dev/null || true
  local i
  for ((i = 0; i < 50; i++)); do
    kill -0 "$JAEGER_PID" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL "$JAEGER_PID" 2>/dev/null || true
  wait "$JAEGER_PID" 2>/dev/null || true
  JAEGER_PID=
}

# on_exit, whatever happens: the collector stopped, the node taken down if it was brought up here.
on_exit() {
  stop_jaeger
  if ((NODE_DOWN)); then hack/local-node.sh down; fi
}
trap on_exit EXIT

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
    NODE_DOWN=1
  fi
  # The images are built from this tree every time (tens of seconds), then imported.
  AIRLOCK_NODE_IMPORT_IMAGES=0 hack/local-node.sh up
  hack/local-node.sh images operator sandbox sandbox-go e2e-client e2e-python e2e-go-example e2e-typescript
  eval "$(hack/local-node.sh env)"
  log "node up and images imported in $((SECONDS - t0))s"
  # The node's address is on this host's lo (hack/local-node.sh's AIRLOCK_NODE_IP).
  JAEGER_HOST=${AIRLOCK_E2E_JAEGER_HOST:-${AIRLOCK_NODE_IP:-10.10.0.1}}
else
  [[ -n ${KUBECONFIG:-} ]] || { log "error: AIRLOCK_E2E_USE_KUBECONFIG=1 needs KUBECONFIG"; exit 1; }
  JAEGER_HOST=${AIRLOCK_E2E_JAEGER_HOST:-}
fi
export KUBECONFIG

INSTALL=${AIRLOCK_E2E_INSTALL:-helm}
export AIRLOCK_E2E_INSTALL=$INSTALL

# The chart's tracing values: the collector started here (the sample ratio stays the chart's
# default: only sampled traces export, and TestRealNodeTrace's traceparent is sampled).
TRACING_SET=()
if [[ $INSTALL == helm && -n $JAEGER_HOST ]]; then
  start_jaeger "$JAEGER_HOST"
  TRACING_SET=(--set "tracing.endpoint=$AIRLOCK_E2E_TRACING_ENDPOINT" --set "tracing.protocol=$AIRLOCK_E2E_TRACING_PROTOCOL")
else
  log "no trace collector (install $INSTALL, host '$JAEGER_HOST'): TestRealNodeTrace will not find one"
fi
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
    "$helm" upgrade airlock "$chart" "${common[@]}" ${TRACING_SET[@]+"${TRACING_SET[@]}"} >/dev/null
  elif [[ -n $installed ]]; then
    log "taking the kustomize install over: helm install --take-ownership airlock $chart"
    apply_crds
    "$helm" install airlock "$chart" "${common[@]}" --take-ownership ${TRACING_SET[@]+"${TRACING_SET[@]}"} >/dev/null
  else
    log "installing airlock: helm install airlock $chart --namespace airlock-system --create-namespace"
    "$helm" install airlock "$chart" "${common[@]}" --create-namespace ${TRACING_SET[@]+"${TRACING_SET[@]}"} >/dev/null
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
  "$KUBECTL" -n airlock-system rollout restart deployment/airlock-operator deployment/airlock-records-webhook >/dev/null 2>&1 ||
    "$KUBECTL" -n airlock-system rollout restart deployment/airlock-operator >/dev/null
fi
"$KUBECTL" -n airlock-system rollout status deployment/airlock-operator --timeout=120s
# The records webhook (docs/security.md): its replicas up and its CA bundle in its configuration,
# or the operator's sandbox pods are refused.
"$KUBECTL" -n airlock-system rollout status deployment/airlock-records-webhook --timeout=120s
webhook_bundles() {
  "$KUBECTL" get validatingwebhookconfiguration airlock-operator-records \
    -o jsonpath='{range .webhooks[*]}{.clientConfig.caBundle}{"\n"}{end}' 2>/dev/null | grep -c . || true
}
for _ in $(seq 1 120); do
  [[ $(webhook_bundles) -ge 4 ]] && break
  sleep 0.5
done
if [[ $(webhook_bundles) -lt 4 ]]; then
  log "error: the records webhook did not publish its CA bundle in 60s"
  "$KUBECTL" -n airlock-system logs deployment/airlock-records-webhook --tail=50 || true
  exit 1
fi
log "airlock installed ($INSTALL), operator 2/2 available in $((SECONDS - t1))s"

# The suite takes 20-25 minutes on this kind of machine (2 cores), more under load: the limit is
# the whole suite's, well above it (it passed 20 minutes in a fresh-clone run at 3648aa3).
go test -tags 'e2e realnode' -count=1 -timeout 45m -v -run '^TestRealNode' "$@" ./e2e/
