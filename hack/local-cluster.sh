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
#   AIRLOCK_CLUSTER_NODE_CPU / _NODE_MEMORY / _NODE_PODS   per fake Node (default 32, 256Gi, 1000)
#   AIRLOCK_CLUSTER_SERVICE_CIDR    (default 10.96.0.0/16)
#   AIRLOCK_CLUSTER_POD_CIDR        pod IPs kwok hands out (default 10.128.0.0/16)
#   AIRLOCK_CLUSTER_TIMEOUT         seconds each readiness wait may take (default 60)
#   AIRLOCK_BIN_DIR                 where the binaries are (default bin/)
#
# Everything listens on 127.0.0.1 only. The effective settings of a running cluster are in
# <state>/cluster.env, so `status` and `down` do not depend on the caller's environment.
#
# Later, a single real node (containerd, kubelet, kube-proxy; notes section B) can be added as
# more components: start() records every started component in <state>/components and down()
# stops whatever is listed there in reverse order, so nothing here needs to change for that
# except the apiserver's advertise address and the extra start() calls.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${AIRLOCK_BIN_DIR:-$ROOT/bin}
TEMPLATES=$ROOT/hack/local-cluster
STATE=${AIRLOCK_CLUSTER_DIR:-$ROOT/_output/local-cluster}
[[ $STATE == /* ]] || STATE=$PWD/$STATE

ADDR=127.0.0.1
ETCD_PORT=${AIRLOCK_CLUSTER_ETCD_PORT:-23790}
ETCD_PEER_PORT=${AIRLOCK_CLUSTER_ETCD_PEER_PORT:-23800}
APISERVER_PORT=${AIRLOCK_CLUSTER_APISERVER_PORT:-26443}
KCM_PORT=${AIRLOCK_CLUSTER_KCM_PORT:-20257}
SCHEDULER_PORT=${AIRLOCK_CLUSTER_SCHEDULER_PORT:-20259}
NODES=${AIRLOCK_CLUSTER_NODES:-2}
NODE_CPU=${AIRLOCK_CLUSTER_NODE_CPU:-32}
NODE_MEMORY=${AIRLOCK_CLUSTER_NODE_MEMORY:-256Gi}
NODE_PODS=${AIRLOCK_CLUSTER_NODE_PODS:-1000}
SERVICE_CIDR=${AIRLOCK_CLUSTER_SERVICE_CIDR:-10.96.0.0/16}
POD_CIDR=${AIRLOCK_CLUSTER_POD_CIDR:-10.128.0.0/16}
TIMEOUT=${AIRLOCK_CLUSTER_TIMEOUT:-60}

PKI=$STATE/pki
KUBECONFIG_ADMIN=$STATE/kubeconfig
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

log() { echo "local-cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

kubectl_() { "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; }

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------------------------
# processes

pid_of() { cat "$STATE/$1.pid" 2>/dev/null || true; }

# alive NAME: the PID in NAME.pid is a live (non-zombie) process that we started: its argv[0]
# is $BIN/NAME... (checked by basename) and its command line mentions the state dir. This
# guards against signalling a stranger after PID reuse.
alive() {
  local name=$1 pid state
  pid=$(pid_of "$name")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/stat ]] || return 1
  state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ $state != Z ]] || return 1
  local -a argv
  mapfile -d '' -t argv <"/proc/$pid/cmdline" 2>/dev/null || return 1
  [[ ${#argv[@]} -gt 0 && $(basename "${argv[0]}") == "$name" ]] || return 1
  [[ " ${argv[*]} " == *"$STATE"* ]] || return 1
}

# start NAME ARGS...: run $BIN/NAME ARGS in its own session (so it outlives this script and the
# caller's process group), stdin from /dev/null, output to <state>/NAME.log. The wrapper shell
# writes its own PID, closes every inherited descriptor above 2 (e.g. our lock, a caller's
# pipes) and then execs the binary, so <state>/NAME.pid is the binary's PID.
start() {
  local name=$1
  shift
  rm -f "$STATE/$name.pid"
  echo "$name" >>"$STATE/components"
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c '
    pidfile=$1; shift
    for fd in /proc/$$/fd/*; do # (no redirection on this loop: bash would park fd 2 above 2)
      fd=${fd##*/}
      if [[ $fd -gt 2 ]]; then eval "exec $fd>&-"; fi
    done
    echo $$ >"$pidfile"
    exec "$@"' _ "$STATE/$name.pid" "$BIN/$name" "$@" </dev/null >"$STATE/$name.log" 2>&1 &
  local deadline=$((SECONDS + 5))
  until [[ -s $STATE/$name.pid ]]; do
    ((SECONDS < deadline)) || die "$name did not start (no pid file)"
    sleep 0.02
  done
}

# stop NAME...: TERM them all, wait up to 15 s for all to exit, then KILL what is left.
stop() {
  local name pid waiting=()
  for name in "$@"; do
    if alive "$name"; then
      pid=$(pid_of "$name")
      kill -TERM "$pid" 2>/dev/null || true
      waiting+=("$name")
    fi
  done
  local deadline=$((SECONDS + 15))
  while ((${#waiting[@]})); do
    local still=()
    for name in "${waiting[@]}"; do
      if alive "$name"; then still+=("$name"); fi
    done
    waiting=("${still[@]+"${still[@]}"}")
    ((${#waiting[@]})) || break
    if ((SECONDS >= deadline)); then
      for name in "${waiting[@]}"; do
        log "$name ($(pid_of "$name")) did not exit after TERM; killing it"
        kill -KILL "$(pid_of "$name")" 2>/dev/null || true
      done
      sleep 0.2
      break
    fi
    sleep 0.1
  done
  for name in "$@"; do rm -f "$STATE/$name.pid"; done
}

# components: what `up` started, in start order.
components() { cat "$STATE/components" 2>/dev/null || true; }

any_pid_files() { compgen -G "$STATE/*.pid" >/dev/null; }

# ---------------------------------------------------------------------------------------------
# waiting

# fail COMPONENT MESSAGE: report and show the tail of the component's log. During `up` the
# EXIT trap then tears down whatever was started.
fail() {
  local comp=$1
  shift
  log "error: $*"
  if [[ -f $STATE/$comp.log ]]; then
    log "last lines of $STATE/$comp.log:"
    tail -n 40 "$STATE/$comp.log" | sed 's/^/    /' >&2
  fi
  exit 1
}

# wait_for COMPONENT WHAT CMD...: run CMD every 0.2 s until it succeeds, at most $TIMEOUT s;
# fail early when COMPONENT has exited.
wait_for() {
  local comp=$1 what=$2
  shift 2
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    alive "$comp" || fail "$comp" "$comp exited while waiting for $what"
    ((SECONDS < deadline)) || fail "$comp" "timed out after ${TIMEOUT}s waiting for $what"
    sleep 0.2
  done
}

etcd_healthy() { curl -sf --max-time 2 "http://$ADDR:$ETCD_PORT/health" | grep -q '"health":"true"'; }

apiserver_ready() {
  curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://$ADDR:$APISERVER_PORT/readyz" | grep -qx ok
}

# The healthz endpoints of kcm and the scheduler serve a self-signed cert; /healthz is in their
# --authorization-always-allow-paths.
healthz() { curl -skf --max-time 2 "https://$ADDR:$1/healthz" | grep -qx ok; }

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

port_in_use() { [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]; }

# free_port VAR: set VAR to a free loopback port not handed out before in this run.
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 12000))
    if ! port_in_use "$p" && [[ " ${PORTS_TAKEN:-} " != *" $p "* ]]; then
      PORTS_TAKEN="${PORTS_TAKEN:-} $p"
      printf -v "$1" '%s' "$p"
      return
    fi
  done
  die "found no free port"
}

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

# first_ip 10.96.0.0/16 -> 10.96.0.1 (the `kubernetes` Service's ClusterIP)
first_ip() {
  local net=${1%/*} a b c d
  IFS=. read -r a b c d <<<"$net"
  echo "$a.$b.$c.$((d + 1))"
}

# ---------------------------------------------------------------------------------------------
# PKI: one CA signs everything; EC P-256 keys (fast to generate).

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# cert NAME SUBJECT EXTENSIONS [CA]: NAME.key + NAME.crt signed by CA (default: ca).
cert() {
  local name=$1 subj=$2 ext=$3 ca=${4:-ca}
  newkey "$PKI/$name.key"
  printf '%s\n' "$ext" >"$PKI/$name.ext"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" |
    openssl x509 -req -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 3650 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
}

# ca NAME CN: a self-signed CA NAME.key + NAME.crt.
ca() {
  newkey "$PKI/$1.key"
  printf '%s\n' "basicConstraints=critical,CA:TRUE" "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    "subjectKeyIdentifier=hash" >"$PKI/$1.ext"
  openssl req -new -key "$PKI/$1.key" -subj "/CN=$2" |
    openssl x509 -req -signkey "$PKI/$1.key" -days 3650 -extfile "$PKI/$1.ext" -out "$PKI/$1.crt" 2>/dev/null
}

gen_pki() {
  mkdir -p "$PKI"
  ca ca airlock-local-cluster-ca
  # A separate CA for the front proxy (request-header authentication of aggregated API
  # servers), as kubeadm does; without it kcm and the scheduler log errors about the missing
  # requestheader CA bundle.
  ca front-proxy-ca airlock-local-cluster-front-proxy-ca

  local client="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  cert apiserver "/CN=kube-apiserver" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$ADDR,IP:$(first_ip "$SERVICE_CIDR"),DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=kubernetes-admin" "$client"
  cert kube-controller-manager "/CN=system:kube-controller-manager" "$client"
  cert kube-scheduler "/CN=system:kube-scheduler" "$client"
  # For a later real kubelet: the apiserver's client identity towards kubelets.
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
  cert front-proxy-client "/CN=front-proxy-client" "$client" front-proxy-ca

  # Service-account token signing key pair (apiserver signs and verifies; kcm signs for the
  # legacy token controller).
  newkey "$PKI/sa.key"
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  rm -f "$PKI"/*.ext
}

# kubeconfig FILE USER: a kubeconfig with the CA and USER's client cert embedded.
kubeconfig() {
  local file=$1 user=$2
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: airlock-local
  cluster:
    server: https://$ADDR:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$user.crt")
    client-key-data: $(base64 -w0 <"$PKI/$user.key")
contexts:
- name: airlock-local
  context:
    cluster: airlock-local
    user: $user
current-context: airlock-local
EOF
  chmod 600 "$file"
}

# kwok's default stages (what kwokctl supplies), read straight from the kwok module that
# hack/tools/kwok pins: no copy in this repo.
kwok_stage_files() {
  local dir
  dir=$(cd "$ROOT/hack/tools/kwok" && GOWORK=off go list -m -f '{{.Dir}}' sigs.k8s.io/kwok 2>/dev/null) || true
  if [[ -z $dir || ! -d $dir ]]; then
    (cd "$ROOT/hack/tools/kwok" && GOWORK=off go mod download sigs.k8s.io/kwok) >&2
    dir=$(cd "$ROOT/hack/tools/kwok" && GOWORK=off go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  fi
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
    sed -e "s|@NAME@|kwok-node-$i|g" -e "s|@CPU@|$NODE_CPU|g" -e "s|@MEMORY@|$NODE_MEMORY|g" \
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
  mkdir -p "$STATE/etcd-data" "$STATE/serving-certs" "$STATE/kwok-home"
  chmod 700 "$STATE/etcd-data"

  # etcd needs no certificates: start it first and make the PKI while it comes up.
  # --unsafe-no-fsync: the data is thrown away at `down`, and fsync on this VM dominates write latency.
  start etcd --name=local --data-dir="$STATE/etcd-data" \
    --listen-client-urls="http://$ADDR:$ETCD_PORT" --advertise-client-urls="http://$ADDR:$ETCD_PORT" \
    --listen-peer-urls="http://$ADDR:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://$ADDR:$ETCD_PEER_PORT" \
    --initial-cluster="local=http://$ADDR:$ETCD_PEER_PORT" --initial-cluster-state=new \
    --auto-compaction-retention=1 --quota-backend-bytes=$((8 * 1024 * 1024 * 1024)) \
    --unsafe-no-fsync --log-level=warn
  gen_pki
  kubeconfig "$KUBECONFIG_ADMIN" admin
  kubeconfig "$STATE/kube-controller-manager.kubeconfig" kube-controller-manager
  kubeconfig "$STATE/kube-scheduler.kubeconfig" kube-scheduler
  sed "s|@KUBECONFIG@|$STATE/kube-scheduler.kubeconfig|" "$TEMPLATES/kube-scheduler.yaml" >"$STATE/kube-scheduler.yaml"
  local stages
  stages=$(kwok_stage_files)
  wait_for etcd "etcd health" etcd_healthy
  log "etcd ready (+$(since "$t0")s)"

  # --endpoint-reconciler-type=none: a loopback advertise address cannot become an Endpoints
  # address, so the reconciler would only log errors; the `kubernetes` Service has no endpoints.
  start kube-apiserver \
    --etcd-servers="http://$ADDR:$ETCD_PORT" \
    --bind-address="$ADDR" --secure-port="$APISERVER_PORT" --advertise-address="$ADDR" \
    --endpoint-reconciler-type=none \
    --cert-dir="$STATE/serving-certs" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction,PodSecurity \
    --allow-privileged=true \
    --profiling=false
  wait_for kube-apiserver "kube-apiserver /readyz" apiserver_ready
  log "kube-apiserver ready (+$(since "$t0")s)"

  # The rest only needs the apiserver: start them together.
  start kube-controller-manager \
    --kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --bind-address="$ADDR" --secure-port="$KCM_PORT" --cert-dir="$STATE/serving-certs" \
    --controllers='*' --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --kube-api-qps=200 --kube-api-burst=400 \
    --leader-elect=false --profiling=false
  start kube-scheduler \
    --config="$STATE/kube-scheduler.yaml" \
    --authentication-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --bind-address="$ADDR" --secure-port="$SCHEDULER_PORT" --cert-dir="$STATE/serving-certs"
  # HOME points into the state dir so that a ~/.kwok/kwok.yaml of the user is not loaded.
  # No --server-address/--node-port: kwok's kubelet-like HTTP server (logs/exec) is not run.
  HOME=$STATE/kwok-home start kwok \
    --kubeconfig="$KUBECONFIG_ADMIN" \
    --config="$stages" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr="$POD_CIDR" --node-lease-duration-seconds=40

  fake_nodes | kubectl_ apply -f - >/dev/null || fail kube-apiserver "could not create the fake Nodes"

  wait_for kube-controller-manager "kube-controller-manager /healthz" healthz "$KCM_PORT"
  wait_for kube-scheduler "kube-scheduler /healthz" healthz "$SCHEDULER_PORT"
  log "kube-controller-manager and kube-scheduler healthy (+$(since "$t0")s)"
  # The ServiceAccount admission rejects pods until the `default` ServiceAccount exists, so
  # this is also the sign that kcm's controllers run.
  wait_for kube-controller-manager "ServiceAccount default/default" kubectl_ get serviceaccount default -n default
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

cmd_env() {
  [[ -f $KUBECONFIG_ADMIN ]] || log "warning: $KUBECONFIG_ADMIN does not exist; run: hack/local-cluster.sh up"
  echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
}

cmd_status() {
  load_settings
  local c ok=0 listed
  listed=$(components)
  if [[ -z $listed ]]; then
    echo "local cluster: not running (state dir $STATE)"
    return 1
  fi
  echo "local cluster in $STATE"
  for c in $listed; do
    if alive "$c"; then
      printf '  %-24s running  pid %s\n' "$c" "$(pid_of "$c")"
    else
      printf '  %-24s NOT RUNNING (log: %s)\n' "$c" "$STATE/$c.log"
      ok=1
    fi
  done
  if apiserver_ready; then
    echo "  kube-apiserver https://$ADDR:$APISERVER_PORT ready; KUBECONFIG=$KUBECONFIG_ADMIN"
    kubectl_ get nodes -o wide 2>&1 | sed 's/^/  /'
  else
    echo "  kube-apiserver https://$ADDR:$APISERVER_PORT NOT ready"
    ok=1
  fi
  return $ok
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
