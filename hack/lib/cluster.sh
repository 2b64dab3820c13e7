# Shared shell functions of the local clusters (sourced, not run):
#   hack/local-cluster.sh  API-only control plane with kwok fake Nodes (notes section A)
#   hack/local-node.sh     the same control plane plus one real node (notes section B)
#
# The sourcing script sets, before calling anything here:
#   LOG_NAME        prefix of log lines (e.g. local-cluster)
#   STATE           absolute state dir; BIN: the binaries; PKI=$STATE/pki; TIMEOUT (seconds)
#   ADDR            address of etcd, kube-controller-manager and kube-scheduler (127.0.0.1)
#   APISERVER_ADDR  address kube-apiserver binds to and advertises (default $ADDR)
#   ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHEDULER_PORT SERVICE_CIDR
#   KUBECONFIG_ADMIN
# shellcheck shell=bash

CLUSTER_LIB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
START_EXE= # see start(); never taken from the caller's environment

log() { echo "${LOG_NAME:-local-cluster}: $*" >&2; }
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

# start NAME ARGS...: run $BIN/NAME ARGS (or $START_EXE ARGS: START_EXE=/usr/bin/x start x ...;
# its basename must be NAME) in its own session (so it outlives this script and the
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
    exec "$@"' _ "$STATE/$name.pid" "${START_EXE:-$BIN/$name}" "$@" </dev/null >"$STATE/$name.log" 2>&1 &
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
    "https://${APISERVER_ADDR:-$ADDR}:$APISERVER_PORT/readyz" | grep -qx ok
}

# The healthz endpoints of kcm and the scheduler serve a self-signed cert; /healthz is in their
# --authorization-always-allow-paths.
healthz() { curl -skf --max-time 2 "https://$ADDR:$1/healthz" | grep -qx ok; }

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
subjectAltName=IP:$ADDR,IP:${APISERVER_ADDR:-$ADDR},IP:$(first_ip "$SERVICE_CIDR"),DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=kubernetes-admin" "$client"
  cert kube-controller-manager "/CN=system:kube-controller-manager" "$client"
  cert kube-scheduler "/CN=system:kube-scheduler" "$client"
  # The apiserver's client identity towards kubelets (hack/local-node.sh runs a real one).
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
    server: https://${APISERVER_ADDR:-$ADDR}:$APISERVER_PORT
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

# ---------------------------------------------------------------------------------------------
# control plane: etcd -> kube-apiserver -> kube-controller-manager, kube-scheduler

# start_etcd: etcd needs no certificates, so start it first and make the PKI while it comes up.
# --unsafe-no-fsync: the data is thrown away at `down`, and fsync on this VM dominates write latency.
start_etcd() {
  mkdir -p "$STATE/etcd-data"
  chmod 700 "$STATE/etcd-data"
  start etcd --name=local --data-dir="$STATE/etcd-data" \
    --listen-client-urls="http://$ADDR:$ETCD_PORT" --advertise-client-urls="http://$ADDR:$ETCD_PORT" \
    --listen-peer-urls="http://$ADDR:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://$ADDR:$ETCD_PEER_PORT" \
    --initial-cluster="local=http://$ADDR:$ETCD_PEER_PORT" --initial-cluster-state=new \
    --auto-compaction-retention=1 --quota-backend-bytes=$((8 * 1024 * 1024 * 1024)) \
    --unsafe-no-fsync --log-level=warn
}

# start_apiserver [EXTRA_FLAGS...]: kube-apiserver on $APISERVER_ADDR:$APISERVER_PORT, with
# RBAC + Node authorization and the PodSecurity admission.
start_apiserver() {
  local addr=${APISERVER_ADDR:-$ADDR}
  mkdir -p "$STATE/serving-certs"
  start kube-apiserver \
    --etcd-servers="http://$ADDR:$ETCD_PORT" \
    --bind-address="$addr" --secure-port="$APISERVER_PORT" --advertise-address="$addr" \
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
    --profiling=false "$@"
}

# start_controller_manager [EXTRA_FLAGS...]
start_controller_manager() {
  kubeconfig "$STATE/kube-controller-manager.kubeconfig" kube-controller-manager
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
    --leader-elect=false --profiling=false "$@"
}

# start_scheduler: kube-scheduler with hack/local-cluster/kube-scheduler.yaml (client QPS raised).
start_scheduler() {
  kubeconfig "$STATE/kube-scheduler.kubeconfig" kube-scheduler
  sed "s|@KUBECONFIG@|$STATE/kube-scheduler.kubeconfig|" "$CLUSTER_LIB_ROOT/hack/local-cluster/kube-scheduler.yaml" \
    >"$STATE/kube-scheduler.yaml"
  start kube-scheduler \
    --config="$STATE/kube-scheduler.yaml" \
    --authentication-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --bind-address="$ADDR" --secure-port="$SCHEDULER_PORT" --cert-dir="$STATE/serving-certs"
}

# wait_control_plane T0: kcm and the scheduler healthy, and kcm's controllers running (the
# ServiceAccount admission rejects pods until the `default` ServiceAccount exists).
wait_control_plane() {
  wait_for kube-controller-manager "kube-controller-manager /healthz" healthz "$KCM_PORT"
  wait_for kube-scheduler "kube-scheduler /healthz" healthz "$SCHEDULER_PORT"
  log "kube-controller-manager and kube-scheduler healthy (+$(since "$1")s)"
  wait_for kube-controller-manager "ServiceAccount default/default" kubectl_ get serviceaccount default -n default
}

# print_env SCRIPT: the export line of the admin kubeconfig, with a warning naming SCRIPT when
# there is none yet.
print_env() {
  [[ -f $KUBECONFIG_ADMIN ]] || log "warning: $KUBECONFIG_ADMIN does not exist; run: $1 up"
  echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
}

# print_status LABEL ADDRESS: what runs of the recorded components, and the apiserver at ADDRESS.
# Returns 0 when everything is up, 1 when something is down, 2 when nothing was started.
print_status() {
  local label=$1 addr=$2 c ok=0 listed
  listed=$(components)
  if [[ -z $listed ]]; then
    echo "$label: not running (state dir $STATE)"
    return 2
  fi
  echo "$label in $STATE"
  for c in $listed; do
    if alive "$c"; then
      printf '  %-24s running  pid %s\n' "$c" "$(pid_of "$c")"
    else
      printf '  %-24s NOT RUNNING (log: %s)\n' "$c" "$STATE/$c.log"
      ok=1
    fi
  done
  if apiserver_ready; then
    echo "  kube-apiserver https://$addr:$APISERVER_PORT ready; KUBECONFIG=$KUBECONFIG_ADMIN"
    kubectl_ get nodes -o wide 2>&1 | sed 's/^/  /'
  else
    echo "  kube-apiserver https://$addr:$APISERVER_PORT NOT ready"
    ok=1
  fi
  return $ok
}
