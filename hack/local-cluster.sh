#!/usr/bin/env bash
# A real, API-only Kubernetes control plane on loopback, without Docker (SPEC section 8;
# facts in shared notes "local-cluster.md", section A).
#
#   etcd -> kube-apiserver -> kube-controller-manager, kube-scheduler, kwok (+ N fake Nodes)
#
# The binaries come from hack/build-cluster-bins.sh (built once, cached in bin/). Pods are
# scheduled by the real kube-scheduler onto kwok's fake Nodes; kwok makes them Running and
# Ready and finishes their deletion. There is no kubelet, no container runtime, no Service
# networking: an apiserver advertising 127.0.0.1 gives the `kubernetes` Service no endpoints,
# so reach webhooks by URL.
#
# usage: hack/local-cluster.sh up|down|env|status
#
#   up      build the binaries if needed, start everything, wait until it is ready.
#           Idempotent: when the cluster is already fully up it says so and exits 0; when it
#           is only partly up (a component died), it is torn down and started fresh.
#   down    stop exactly the processes `up` started (by PID: TERM, bounded wait, then KILL)
#           and delete the state (etcd data, certificates, kubeconfigs, pid files). Component
#           logs (<state>/*.log) are kept for post-mortems; the next `up` overwrites them.
#   env     print `export KUBECONFIG=<abs path>` (use: eval "$(hack/local-cluster.sh env)").
#   status  print what runs; exit 0 only when every component runs and the apiserver is ready.
#
# Settings (environment):
#   AIRLOCK_CLUSTER_DIR             state dir (default _output/local-cluster)
#   AIRLOCK_CLUSTER_ETCD_PORT       etcd client port       (default 23790)
#   AIRLOCK_CLUSTER_ETCD_PEER_PORT  etcd peer port         (default 23800)
#   AIRLOCK_CLUSTER_APISERVER_PORT  kube-apiserver port    (default 26443)
#   AIRLOCK_CLUSTER_KCM_PORT        kube-controller-manager healthz/metrics port (default 20257)
#   AIRLOCK_CLUSTER_SCHEDULER_PORT  kube-scheduler healthz/metrics port          (default 20259)
#                                   any port set to 0 is replaced by a free port at `up`
#   AIRLOCK_CLUSTER_NODES           number of fake Nodes (default 2)
#   AIRLOCK_CLUSTER_NODE_CPU / _NODE_MEMORY / _NODE_EPHEMERAL_STORAGE / _NODE_PODS
#                                   per fake Node (default 32, 256Gi, 1Ti, 1000)
#   AIRLOCK_CLUSTER_SERVICE_CIDR    (default 10.96.0.0/16)
#   AIRLOCK_CLUSTER_POD_CIDR        pod IPs kwok hands out (default 10.128.0.0/16)
#   AIRLOCK_CLUSTER_TIMEOUT         seconds each readiness wait may take (default 60)
#   AIRLOCK_CLUSTER_APISERVER_FLAGS / _KCM_FLAGS   more kube-apiserver / kube-controller-manager
#                                   flags, space-separated; they come last and win (hack/bench.sh:
#                                   an audit log, kcm's client QPS)
#   AIRLOCK_BIN_DIR                 where the binaries are (default bin/)
#
# Everything listens on 127.0.0.1 only. The effective settings of a running cluster are in
# <state>/cluster.env, so `status` and `down` do not depend on the caller's environment.
#
# The generic pieces (process tracking, PKI, the control-plane start functions) live in
# hack/lib/cluster.sh, shared with hack/local-node.sh (the same control plane plus one real
# node: containerd, kubelet, kube-proxy, CoreDNS, NetworkPolicy enforcement; notes section B).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${AIRLOCK_BIN_DIR:-$ROOT/bin}
TEMPLATES=$ROOT/hack/local-cluster
STATE=${AIRLOCK_CLUSTER_DIR:-$ROOT/_output/local-cluster}
[[ $STATE == /* ]] || STATE=$PWD/$STATE

ADDR=127.0.0.1
APISERVER_ADDR=$ADDR # (hack/lib/cluster.sh: the address kube-apiserver binds to and advertises)
ETCD_PORT=${AIRLOCK_CLUSTER_ETCD_PORT:-23790}
ETCD_PEER_PORT=${AIRLOCK_CLUSTER_ETCD_PEER_PORT:-23800}
APISERVER_PORT=${AIRLOCK_CLUSTER_APISERVER_PORT:-26443}
KCM_PORT=${AIRLOCK_CLUSTER_KCM_PORT:-20257}
SCHEDULER_PORT=${AIRLOCK_CLUSTER_SCHEDULER_PORT:-20259}
NODES=${AIRLOCK_CLUSTER_NODES:-2}
NODE_CPU=${AIRLOCK_CLUSTER_NODE_CPU:-32}
NODE_MEMORY=${AIRLOCK_CLUSTER_NODE_MEMORY:-256Gi}
NODE_EPHEMERAL_STORAGE=${AIRLOCK_CLUSTER_NODE_EPHEMERAL_STORAGE:-1Ti}
NODE_PODS=${AIRLOCK_CLUSTER_NODE_PODS:-1000}
SERVICE_CIDR=${AIRLOCK_CLUSTER_SERVICE_CIDR:-10.96.0.0/16}
POD_CIDR=${AIRLOCK_CLUSTER_POD_CIDR:-10.128.0.0/16}
TIMEOUT=${AIRLOCK_CLUSTER_TIMEOUT:-60}

PKI=$STATE/pki
KUBECONFIG_ADMIN=$STATE/kubeconfig
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

LOG_NAME=local-cluster
# shellcheck source=hack/lib/cluster.sh
source "$ROOT/hack/lib/cluster.sh"
# shellcheck source=hack/lib/gomod.sh
source "$ROOT/hack/lib/gomod.sh"

# ---------------------------------------------------------------------------------------------
# waiting (the generic helpers are in hack/lib/cluster.sh)

# All fake Nodes are Ready and carry no taints (the not-ready taint added at creation is
# removed by kube-controller-manager once kwok reports Ready).
nodes_ready() {
  local out
  out=$(kubectl_ get nodes -l type=kwok -o \
    jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{" "}{.spec.taints}{"\n"}{end}') || return 1
  [[ $(grep -c . <<<"$out") -eq $NODES ]] || return 1
  ! grep -qv ' True $' <<<"$out"
}

# ---------------------------------------------------------------------------------------------
# configuration

resolve_ports() {
  local var
  for var in ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHEDULER_PORT; do
    if [[ ${!var} == 0 ]]; then
      free_port "$var"
    elif port_in_use "${!var}"; then
      die "port ${!var} ($var) is in use on this machine; set AIRLOCK_CLUSTER_$var to another port (0 = any free port)"
    fi
  done
}

save_settings() {
  cat >"$STATE/cluster.env" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
NODES=$NODES
EOF
}

load_settings() {
  # shellcheck disable=SC1091
  if [[ -f $STATE/cluster.env ]]; then source "$STATE/cluster.env"; fi
}


# kwok's default stages (what kwokctl supplies), read straight from the kwok module that
# hack/tools/kwok pins: no copy in this repo.
kwok_stage_files() {
  local dir
  dir=$(module_dir "$ROOT/hack/tools/kwok" sigs.k8s.io/kwok) || die "kwok module not found"
  local s=$dir/kustomize/stage files=()
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [[ -f $s/$f ]] || die "kwok stage $s/$f not found"
    files+=("$s/$f")
  done
  (IFS=,; echo "${files[*]}")
}

fake_nodes() {
  local i
  for ((i = 0; i < NODES; i++)); do
    [[ $i -eq 0 ]] || echo "---"
    sed -e "s|@NAME@|kwok-node-$i|g" -e "s|@CPU@|$NODE_CPU|g" -e "s|@MEMORY@|$NODE_MEMORY|g" -e "s|@EPHEMERAL_STORAGE@|$NODE_EPHEMERAL_STORAGE|g" \
      -e "s|@PODS@|$NODE_PODS|g" "$TEMPLATES/fake-node.yaml"
  done
}

# ---------------------------------------------------------------------------------------------
# subcommands

# fully_up: every recorded component runs and the apiserver is ready.
fully_up() {
  local c n=0
  for c in $(components); do
    alive "$c" || return 1
    n=$((n + 1))
  done
  ((n > 0)) && apiserver_ready
}

cmd_up() {
  mkdir -p "$STATE"
  lock
  load_settings
  if fully_up; then
    log "already up ($(components | xargs)); KUBECONFIG=$KUBECONFIG_ADMIN"
    return 0
  fi
  if [[ -n $(components) ]] || any_pid_files; then
    log "partly up or stale state; tearing it down and starting fresh"
    do_down
  fi
  # Settings come from the environment again (cluster.env was for the old cluster).
  ETCD_PORT=${AIRLOCK_CLUSTER_ETCD_PORT:-23790} ETCD_PEER_PORT=${AIRLOCK_CLUSTER_ETCD_PEER_PORT:-23800}
  APISERVER_PORT=${AIRLOCK_CLUSTER_APISERVER_PORT:-26443} KCM_PORT=${AIRLOCK_CLUSTER_KCM_PORT:-20257}
  SCHEDULER_PORT=${AIRLOCK_CLUSTER_SCHEDULER_PORT:-20259} NODES=${AIRLOCK_CLUSTER_NODES:-2}

  command -v openssl >/dev/null || {
    log "openssl missing; installing it with apt-get"
    apt-get install -y -qq openssl >/dev/null || die "could not install openssl"
  }
  "$ROOT/hack/build-cluster-bins.sh" "${BINARIES[@]}"

  local t0
  t0=$(now)
  resolve_ports
  # A failed `up` (a timeout, an error, Ctrl-C) leaves nothing running; the logs stay.
  trap 'rc=$?; if ((rc != 0)); then log "up failed; stopping what was started"; do_down; fi' EXIT
  trap 'exit 130' INT TERM
  : >"$STATE/components"
  rm -f "$STATE"/*.log
  save_settings
  mkdir -p "$STATE/kwok-home"

  start_etcd # (hack/lib/cluster.sh, as the other control-plane steps)
  gen_pki
  kubeconfig "$KUBECONFIG_ADMIN" admin
  local stages
  stages=$(kwok_stage_files)
  wait_for etcd "etcd health" etcd_healthy
  log "etcd ready (+$(since "$t0")s)"

  # --endpoint-reconciler-type=none: a loopback advertise address cannot become an Endpoints
  # address, so the reconciler would only log errors; the `kubernetes` Service has no endpoints.
  local -a apiserver_flags kcm_flags
  read -ra apiserver_flags <<<"${AIRLOCK_CLUSTER_APISERVER_FLAGS:-}"
  read -ra kcm_flags <<<"${AIRLOCK_CLUSTER_KCM_FLAGS:-}"
  start_apiserver --endpoint-reconciler-type=none "${apiserver_flags[@]}"
  wait_for kube-apiserver "kube-apiserver /readyz" apiserver_ready
  log "kube-apiserver ready (+$(since "$t0")s)"

  # The rest only needs the apiserver: start them together.
  start_controller_manager "${kcm_flags[@]}"
  start_scheduler
  # HOME points into the state dir so that a ~/.kwok/kwok.yaml of the user is not loaded.
  # No --server-address/--node-port: kwok's kubelet-like HTTP server (logs/exec) is not run.
  HOME=$STATE/kwok-home start kwok \
    --kubeconfig="$KUBECONFIG_ADMIN" \
    --config="$stages" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr="$POD_CIDR" --node-lease-duration-seconds=40

  fake_nodes | kubectl_ apply -f - >/dev/null || fail kube-apiserver "could not create the fake Nodes"

  wait_control_plane "$t0"
  wait_for kwok "$NODES fake Node(s) Ready and untainted" nodes_ready
  trap - EXIT INT TERM

  log "up in $(since "$t0")s: $(components | xargs) with $NODES fake Node(s)"
  log "export KUBECONFIG=$KUBECONFIG_ADMIN"
}

# do_down: stop what the components file lists (reverse start order: clients first, etcd
# last), then delete the state except logs.
do_down() {
  local -a comps
  mapfile -t comps < <(components)
  # Also any pid file not listed (e.g. `up` was interrupted between writing both).
  local f name
  for f in "$STATE"/*.pid; do
    [[ -e $f ]] || continue
    name=$(basename "$f" .pid)
    [[ " ${comps[*]-} " == *" $name "* ]] || comps+=("$name")
  done
  local i clients=()
  for ((i = ${#comps[@]} - 1; i >= 0; i--)); do
    case ${comps[i]} in
      etcd | kube-apiserver) ;;
      *) clients+=("${comps[i]}") ;;
    esac
  done
  ((${#clients[@]} == 0)) || stop "${clients[@]}"
  stop kube-apiserver
  stop etcd
  rm -rf "$STATE/etcd-data" "$PKI" "$STATE/serving-certs" "$STATE/kwok-home"
  rm -f "$STATE/components" "$STATE/cluster.env" "$STATE"/*.kubeconfig "$KUBECONFIG_ADMIN" \
    "$STATE/kube-scheduler.yaml"
}

cmd_down() {
  [[ -d $STATE ]] || { log "nothing to stop ($STATE does not exist)"; return 0; }
  lock
  load_settings
  local comps
  comps=$(components | xargs)
  do_down
  log "down${comps:+ (stopped: $comps)}"
}

cmd_env() { print_env hack/local-cluster.sh; }

cmd_status() {
  load_settings
  local ok=0
  print_status "local cluster" "$ADDR" || ok=$?
  return $(( ok == 0 ? 0 : 1 ))
}

# lock: one up/down at a time per state dir (fd 9; start() closes it in the children).
lock() {
  exec 9>"$STATE/.lock"
  flock -w 120 9 || die "another hack/local-cluster.sh holds $STATE/.lock"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 up|down|env|status" >&2
    exit 2
    ;;
esac
