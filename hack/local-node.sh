#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, without Docker and without a registry (SPEC
# section 8; measured facts in shared notes "local-cluster.md", section B):
#
#   etcd -> kube-apiserver -> kube-controller-manager, kube-scheduler      (hack/lib/cluster.sh)
#   containerd (Debian) + runc + CNI bridge -> kubelet, kube-proxy (nftables mode),
#   kube-network-policies (NetworkPolicy enforcement), CoreDNS (a pod, kube-dns Service)
#   + gVisor: RuntimeClass gvisor (handler runsc: containerd-shim-runsc-v1 + runsc, systrap)
#
# Pods really run: readiness probes, Services (ClusterIP from pods and the host), DNS,
# kubectl exec/logs/port-forward (not port-forward into gVisor pods: docs/isolation.md),
# enforced NetworkPolicies and Pod Security admission. Images come from docker-archive tarballs
# imported into containerd (hack/imagebuild); nothing is pulled, so use imagePullPolicy
# IfNotPresent or Never and a non-latest tag.
#
# usage: hack/local-node.sh up|down|env|status|images [image...]
#
#   up      install the Debian packages and build the binaries and infrastructure images if
#           needed (cached in bin/ and _output/images), start everything, wait until the node is
#           Ready, NetworkPolicy enforcement is active (kube-network-policies' nftables queue
#           rules exist and it listens on that queue) and CoreDNS is Ready; then import the
#           airlock images already built (see `images`). Fails, tearing down what it started, if
#           any of that does not happen. About 10-15 s from built binaries (+15-20 s to import
#           the three airlock images, sandbox-go being 343 MiB with gopls).
#           Idempotent like hack/local-cluster.sh: fully up -> exit 0; partly up -> restart.
#   down    stop what `up` started, by PID (TERM, bounded wait, KILL), after deleting all pods so
#           that containerd tears down their networks; then remove what is left on the host: runc
#           containers, mounts under the state dir, the CNI bridge, the nftables tables and
#           iptables chains of kube-proxy / kube-network-policies / CNI, the node IP on lo, the
#           kubepods cgroups, /var/log/containers links, stale shim/kubelet sockets and the
#           then-empty directories containerd/kubelet/CNI create at fixed paths; the sysctls
#           `up` changed are restored. Logs (<state>/*.log) are kept. About 12 s.
#   env     print `export KUBECONFIG=<abs path>`.
#   status  what runs; exit 0 only when all of it runs, the node is Ready and NetworkPolicy
#           enforcement is active.
#   images  build the airlock images (hack/imagebuild/build-images.sh; default: operator sandbox
#           sandbox-go) and import them into the node's containerd if it is up.
#
# Settings (environment):
#   AIRLOCK_NODE_DIR             state dir (default _output/local-node)
#   AIRLOCK_NODE_NAME            Node name (default airlock-node)
#   AIRLOCK_NODE_IP              node address, put on lo as /32 (default 10.10.0.1); the
#                                apiserver binds and advertises it, so pods reach it through the
#                                `kubernetes` Service
#   AIRLOCK_NODE_APISERVER_PORT  (default 6443, on the node IP)
#   AIRLOCK_NODE_POD_CIDR        (default 10.244.0.0/24)    AIRLOCK_NODE_SERVICE_CIDR (10.96.0.0/16)
#   AIRLOCK_NODE_BRIDGE          CNI bridge name (default airlock0)
#   AIRLOCK_NODE_TIMEOUT         seconds each readiness wait may take (default 60)
#   AIRLOCK_NODE_IMPORT_IMAGES   1 (default): `up` imports the built airlock images; 0: only
#                                the infrastructure images (pause, coredns)
#   AIRLOCK_NODE_GVISOR          1 (default): build runsc and containerd-shim-runsc-v1 (pinned in
#                                hack/tools/gvisor, the shim with its local.patch), give
#                                containerd the runtime handler runsc and create the RuntimeClass
#                                gvisor once the node is Ready (docs/isolation.md, "gVisor on the
#                                local node"); 0: runc only
#   AIRLOCK_BIN_DIR, AIRLOCK_IMAGES_DIR  binaries (bin/) and image tarballs (_output/images)
#   etcd, kube-controller-manager and kube-scheduler listen on free 127.0.0.1 ports.
#
# One such node per machine: the bridge, the nftables/iptables rules, the kubelet ports and the
# node IP are host-global. A machine-wide lock (/run/airlock-local-node.lock, and
# /run/airlock-local-node naming the state dir of the node that is up) enforces it; API-only
# clusters of hack/local-cluster.sh (loopback only, no host networking) run next to it.
#
# kube-network-policies (with hack/tools/kube-network-policies/local.patch) judges new
# connections of pods that some NetworkPolicy selects, including connections to the node itself
# (kube-apiserver, kubelet); it exempts root processes on the host (the kubelet's probes), and
# learns pod IPs from the API, so a brand-new pod's very first packets can race its policy.
# Not here: a volume provisioner (make hostPath PersistentVolumes), LoadBalancer, Ingress,
# metrics-server, user namespaces, AppArmor.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${AIRLOCK_BIN_DIR:-$ROOT/bin}
STATE=${AIRLOCK_NODE_DIR:-$ROOT/_output/local-node}
[[ $STATE == /* ]] || STATE=$PWD/$STATE
IMAGES=${AIRLOCK_IMAGES_DIR:-$ROOT/_output/images}
[[ $IMAGES == /* ]] || IMAGES=$PWD/$IMAGES
export AIRLOCK_IMAGES_DIR=$IMAGES AIRLOCK_BIN_DIR=$BIN

NODE_NAME=${AIRLOCK_NODE_NAME:-airlock-node}
NODE_IP=${AIRLOCK_NODE_IP:-10.10.0.1}
POD_CIDR=${AIRLOCK_NODE_POD_CIDR:-10.244.0.0/24}
SERVICE_CIDR=${AIRLOCK_NODE_SERVICE_CIDR:-10.96.0.0/16}
BRIDGE=${AIRLOCK_NODE_BRIDGE:-airlock0}
TIMEOUT=${AIRLOCK_NODE_TIMEOUT:-60}
IMPORT_IMAGES=${AIRLOCK_NODE_IMPORT_IMAGES:-1}
CLUSTER_DOMAIN=cluster.local
SERVICE_NET=${SERVICE_CIDR%/*}
DNS_IP=${SERVICE_NET%.*}.10 # the kube-dns Service (10.96.0.10)
PAUSE_IMAGE=registry.k8s.io/pause:3.10
COREDNS_IMAGE=localhost/airlock-node/coredns:v1.14.7
export AIRLOCK_PAUSE_IMAGE=$PAUSE_IMAGE AIRLOCK_COREDNS_IMAGE=$COREDNS_IMAGE

ADDR=127.0.0.1          # etcd, kube-controller-manager, kube-scheduler
APISERVER_ADDR=$NODE_IP # kube-apiserver binds and advertises the node IP
APISERVER_PORT=${AIRLOCK_NODE_APISERVER_PORT:-6443}
ETCD_PORT=0 ETCD_PEER_PORT=0 KCM_PORT=0 SCHEDULER_PORT=0 # free ports, chosen at `up`
KUBELET_PORT=10250 KUBELET_HEALTHZ_PORT=10248
PROXY_METRICS_PORT=0 PROXY_HEALTHZ_PORT=0 KNP_METRICS_PORT=0

PKI=$STATE/pki
KUBECONFIG_ADMIN=$STATE/kubeconfig
CTRD=$STATE/containerd
CTRD_SOCK=$CTRD/containerd.sock
RUNC_ROOT=$CTRD/runc
GVISOR=${AIRLOCK_NODE_GVISOR:-1}
RUNSC_ROOT=$CTRD/runsc # runsc's state; the shim appends the namespace: $RUNSC_ROOT/k8s.io
CTRD_PATH=$CTRD/bin    # first on containerd's PATH: the runsc shim (1.6 ignores runtime_path)
CNI_CONF_DIR=$STATE/cni/net.d
POD_LOGS=$STATE/pod-logs
MACHINE_LOCK=/run/airlock-local-node.lock
MACHINE_OWNER=/run/airlock-local-node # holds the state dir of the node that is up
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy
  coredns kube-network-policies)
if [[ $GVISOR == 1 ]]; then BINARIES+=(runsc containerd-shim-runsc-v1); fi
PACKAGES=(containerd runc containernetworking-plugins iptables nftables conntrack busybox-static
  openssl curl iproute2 patch)

LOG_NAME=local-node
# shellcheck source=hack/lib/cluster.sh
source "$ROOT/hack/lib/cluster.sh"

ctr_() { ctr --address "$CTRD_SOCK" --namespace k8s.io "$@"; }

# ---------------------------------------------------------------------------------------------
# preparation

need_root() { [[ $EUID -eq 0 ]] || die "must run as root (containerd, kubelet and host networking)"; }

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == 'install ok installed' ]] || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing Debian packages: ${missing[*]}"
  # (Where systemd runs, the package may also start the system's containerd; this node runs its
  # own containerd with its own socket, root and state under the state dir either way.)
  # (On a fresh machine the package lists may be empty: update them once and retry.)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
    die "apt-get install ${missing[*]} failed"
}

# infra_images: the pause and CoreDNS image tarballs, (re)built when missing or older than
# their inputs.
infra_images() {
  local want=()
  [[ -f $IMAGES/pause.tar && $IMAGES/pause.tar -nt $ROOT/hack/imagebuild/pause/main.go ]] || want+=(pause)
  [[ -f $IMAGES/coredns.tar && $IMAGES/coredns.tar -nt $BIN/coredns ]] || want+=(coredns)
  ((${#want[@]} == 0)) || "$ROOT/hack/imagebuild/build-images.sh" "${want[@]}"
}

# ---------------------------------------------------------------------------------------------
# configuration files

save_settings() {
  cat >"$STATE/node.env" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
PROXY_METRICS_PORT=$PROXY_METRICS_PORT
PROXY_HEALTHZ_PORT=$PROXY_HEALTHZ_PORT
KNP_METRICS_PORT=$KNP_METRICS_PORT
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
APISERVER_ADDR=$NODE_IP
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
BRIDGE=$BRIDGE
SAVED_IP_FORWARD=${SAVED_IP_FORWARD:-}
SAVED_BRIDGE_NF=${SAVED_BRIDGE_NF:-}
SAVED_NFT_TABLES="${SAVED_NFT_TABLES:-}"
EOF
}

load_settings() {
  # shellcheck disable=SC1091
  if [[ -f $STATE/node.env ]]; then source "$STATE/node.env"; fi
}

# The node's certificates, on top of gen_pki's control-plane ones.
gen_node_pki() {
  local client="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
  cert kubelet-serving "/CN=$NODE_NAME" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE_NAME,DNS:localhost"
  cert kube-proxy "/CN=system:kube-proxy" "$client" # bound to system:node-proxier by default
  cert kube-network-policies "/CN=kube-network-policies" "$client" # RBAC in addons.yaml
  rm -f "$PKI"/*.ext
}

write_containerd_config() {
  mkdir -p "$CTRD" "$RUNC_ROOT"
  cat >"$CTRD/config.toml" <<EOF
# containerd 1.6 for hack/local-node.sh: everything under the state dir.
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
plugin_dir = ""
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$CTRD_SOCK"

[ttrpc]
  address = "$CTRD_SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$CTRD/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Required here: without CAP_SYS_RESOURCE runc cannot lower oom_score_adj, and every pod
  # would stay in ContainerCreating ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Network namespaces under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUNC_ROOT"
$(if [[ $GVISOR == 1 ]]; then runsc_runtime_config; fi)
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1
EOF
  if [[ $GVISOR == 1 ]]; then write_runsc_config; fi
}

# runsc_runtime_config: the CRI runtime handler runsc (RuntimeClass gvisor). containerd finds
# containerd-shim-runsc-v1 on its PATH (write_runsc_config links it into $CTRD_PATH); the shim
# reads its options, and runsc's flags, from ConfigPath.
runsc_runtime_config() {
  cat <<EOF
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$CTRD/runsc.toml"
EOF
}

# write_runsc_config: the shim's options: the runsc binary by absolute path, and runsc's state
# under the state dir (the gofers' pinned network namespace is a mount there, which `down`
# unmounts). runsc's defaults are what works here: platform systrap (no KVM), network sandbox
# (gVisor's netstack on the pod's CNI veth), cgroups v1 as root, the root filesystem overlay
# backed by a file in the container's own directory. [runsc_config] takes runsc flags without
# their dashes, e.g. debug = "true" and debug-log = "<dir>/%ID%/" to see what runsc does.
write_runsc_config() {
  mkdir -p "$CTRD_PATH" "$RUNSC_ROOT"
  ln -sfn "$BIN/containerd-shim-runsc-v1" "$CTRD_PATH/containerd-shim-runsc-v1"
  cat >"$CTRD/runsc.toml" <<EOF
# containerd-shim-runsc-v1's options for hack/local-node.sh (the CRI runtime handler runsc).
binary_name = "$BIN/runsc"
root = "$RUNSC_ROOT"
EOF
}

# The pod network: one Linux bridge, host-local IPAM (its data under the state dir), no masquerade
# (pods only talk to each other, Services and the node), hairpin for a pod reaching itself
# through a Service.
write_cni_config() {
  mkdir -p "$CNI_CONF_DIR" "$STATE/cni/ipam"
  cat >"$CNI_CONF_DIR/10-airlock.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "airlock",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$STATE/cni/ipam"
      }
    }
  ]
}
EOF
}

write_kubelet_config() {
  mkdir -p "$STATE/kubelet" "$POD_LOGS"
  kubeconfig "$STATE/kubelet.kubeconfig" kubelet-client
  cat >"$STATE/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Required on this kernel's cgroup v1 hierarchy (k8s >= 1.35 refuses it otherwise); there is no
# systemd, so the cgroupfs driver; the VM has no swap accounting worth failing over.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$CTRD_SOCK
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
clusterDNS: [$DNS_IP]
clusterDomain: $CLUSTER_DOMAIN
podLogsDir: $POD_LOGS
# A small shared VM: do not evict for disk or memory pressure others cause.
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
EOF
}

write_proxy_config() {
  kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy
  cat >"$STATE/kube-proxy-config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: $STATE/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
bindAddress: $NODE_IP
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
# Leave the host's conntrack sysctls alone (root here lacks CAP_SYS_RESOURCE).
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# ---------------------------------------------------------------------------------------------
# host networking

node_ip_on_lo() { [[ $(ip -o addr show dev lo) == *" $NODE_IP/32 "* ]]; }

sysctl_get() { cat "/proc/sys/${1//.//}"; }
sysctl_set() { echo "$2" >"/proc/sys/${1//.//}"; }

setup_host_network() {
  SAVED_IP_FORWARD=$(sysctl_get net.ipv4.ip_forward)
  [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] ||
    die "br_netfilter is not available (/proc/sys/net/bridge missing): bridged pod traffic would bypass NetworkPolicy"
  SAVED_BRIDGE_NF=$(sysctl_get net.bridge.bridge-nf-call-iptables)
  # nftables tables that exist before the node (cleanup_host deletes only the node's own).
  SAVED_NFT_TABLES=$(nft list tables 2>/dev/null | awk '{ print $2" "$3 }' | paste -sd, -)
  save_settings
  sysctl_set net.ipv4.ip_forward 1
  sysctl_set net.bridge.bridge-nf-call-iptables 1
  # The node IP: an address on lo (this kernel has no dummy interfaces).
  node_ip_on_lo || ip addr add "$NODE_IP/32" dev lo
}

# ---------------------------------------------------------------------------------------------
# waiting

containerd_ready() { ctr_ version; }

node_ready() {
  [[ $(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# NetworkPolicy enforcement is active when kube-network-policies' table has its queue rules
# (nft shows the xtables NFQUEUE target, used through nft_compat, as `queue num 100`) and a
# program listens on that queue (kube-network-policies; the kernel lists it in nfnetlink_queue).
# (No `| grep -q` on these: with pipefail, grep's early exit can fail the pipeline.)
KNP_QUEUE=100
knp_rules() {
  [[ $(nft list table inet kube-network-policies 2>/dev/null) == *" queue num $KNP_QUEUE"* ]] &&
    [[ -n $(awk -v q="$KNP_QUEUE" '$1 == q' /proc/net/netfilter/nfnetlink_queue 2>/dev/null) ]]
}

coredns_ready() {
  [[ $(kubectl_ -n kube-system get deployment coredns -o jsonpath='{.status.readyReplicas}') == 1 ]]
}

proxy_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz" >/dev/null; }

# apply_runtime_class: RuntimeClass gvisor, whose pods containerd runs with the handler runsc.
apply_runtime_class() {
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: runsc
EOF
}

# ---------------------------------------------------------------------------------------------
# images

# import_images TAR...: import docker-archive tarballs into the node's containerd.
import_images() {
  local t
  for t in "$@"; do
    ctr_ images import "$t" >/dev/null || die "import of $t failed"
  done
}

# The airlock images that have been built (hack/imagebuild/build-images.sh).
built_airlock_images() {
  local n
  for n in operator sandbox sandbox-go; do
    [[ -f $IMAGES/$n.tar ]] && echo "$IMAGES/$n.tar"
  done
  true
}

# ---------------------------------------------------------------------------------------------
# subcommands

fully_up() {
  local c n=0
  for c in $(components); do
    alive "$c" || return 1
    n=$((n + 1))
  done
  ((n > 0)) && apiserver_ready && node_ready && knp_rules
}

# machine_lock: one node per machine; also refuses when another state dir's node is up.
machine_lock() {
  exec 8>"$MACHINE_LOCK"
  flock -w 120 8 || die "another hack/local-node.sh holds $MACHINE_LOCK"
  local owner
  owner=$(cat "$MACHINE_OWNER" 2>/dev/null || true)
  if [[ -n $owner && $owner != "$STATE" && -d $owner && -s $owner/components ]]; then
    die "a local node from $owner is up on this machine (one per machine); run: AIRLOCK_NODE_DIR=$owner $0 down"
  fi
}

cmd_up() {
  need_root
  mkdir -p "$STATE"
  machine_lock
  load_settings
  if fully_up; then
    log "already up ($(components | xargs)); KUBECONFIG=$KUBECONFIG_ADMIN"
    return 0
  fi
  if [[ -n $(components) ]] || any_pid_files; then
    log "partly up or stale state; tearing it down and starting fresh"
    do_down
  fi
  # Settings come from the script again (node.env was for the old node).
  APISERVER_PORT=${AIRLOCK_NODE_APISERVER_PORT:-6443}
  ETCD_PORT=0 ETCD_PEER_PORT=0 KCM_PORT=0 SCHEDULER_PORT=0
  PROXY_METRICS_PORT=0 PROXY_HEALTHZ_PORT=0 KNP_METRICS_PORT=0

  install_packages
  "$ROOT/hack/build-cluster-bins.sh" "${BINARIES[@]}"
  infra_images

  local t0 p
  t0=$(now)
  for p in ETCD_PORT ETCD_PEER_PORT KCM_PORT SCHEDULER_PORT PROXY_METRICS_PORT PROXY_HEALTHZ_PORT KNP_METRICS_PORT; do
    free_port "$p"
  done
  for p in "$APISERVER_PORT" "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT"; do
    ! port_in_use "$p" || die "port $p is in use on this machine (a node or something else is already up?)"
  done
  ! ip link show "$BRIDGE" >/dev/null 2>&1 || die "bridge $BRIDGE exists already; run: $0 down"

  # A failed `up` (a timeout, an error, Ctrl-C) leaves nothing running and nothing on the host.
  trap 'rc=$?; if ((rc != 0)); then log "up failed; stopping what was started"; do_down; fi' EXIT
  trap 'exit 130' INT TERM
  : >"$STATE/components"
  echo "$STATE" >"$MACHINE_OWNER"
  rm -f "$STATE"/*.log
  setup_host_network # (saves the settings, with the sysctls to restore)

  start_etcd
  write_containerd_config
  write_cni_config
  PATH="$CTRD_PATH:$PATH" START_EXE=$(command -v containerd) start containerd --config "$CTRD/config.toml"
  gen_pki
  gen_node_pki
  kubeconfig "$KUBECONFIG_ADMIN" admin
  kubeconfig "$STATE/kube-network-policies.kubeconfig" kube-network-policies
  write_kubelet_config
  write_proxy_config
  wait_for etcd "etcd health" etcd_healthy
  log "etcd ready (+$(since "$t0")s)"

  # The Node's name does not resolve: reach the kubelet (logs, exec, port-forward) by its IP.
  start_apiserver --kubelet-preferred-address-types=InternalIP,Hostname
  wait_for containerd "containerd" containerd_ready
  import_images "$IMAGES/pause.tar" "$IMAGES/coredns.tar"
  log "containerd ready, pause and coredns images imported (+$(since "$t0")s)"
  wait_for kube-apiserver "kube-apiserver /readyz" apiserver_ready
  log "kube-apiserver ready (+$(since "$t0")s)"

  start_controller_manager
  start_scheduler
  sed -e "s|@CLUSTER_DOMAIN@|$CLUSTER_DOMAIN|g" -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|g" \
    -e "s|@DNS_IP@|$DNS_IP|g" \
    "$ROOT/hack/lib/local-node/addons.yaml" | kubectl_ apply -f - >/dev/null ||
    fail kube-apiserver "could not apply the add-ons (CoreDNS, RBAC)"
  start kubelet --config="$STATE/kubelet-config.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
    --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" -v=1
  start kube-proxy --config="$STATE/kube-proxy-config.yaml" -v=1
  # NRI off: containerd 1.6 has none. Not fail-open: unjudged packets are dropped. Without NRI
  # a new pod's IP is known once the apiserver publishes it; until then a connection from it is
  # dropped (--drop-unknown-pods-in, local.patch), not judged as no pod's, which no egress policy
  # selects: a sandbox's isolation evidence saw its first connections escape (docs/isolation.md);
  # and a pod's connection to such an address is dropped too, not judged under no ingress policy.
  start kube-network-policies --kubeconfig="$STATE/kube-network-policies.kubeconfig" \
    --hostname-override="$NODE_NAME" --disable-nri --nfqueue-id="$KNP_QUEUE" --drop-unknown-pods-in="$POD_CIDR" \
    --metrics-bind-address="127.0.0.1:$KNP_METRICS_PORT" -v=1

  wait_control_plane "$t0"
  wait_for kubelet "Node $NODE_NAME Ready" node_ready
  log "node $NODE_NAME Ready (+$(since "$t0")s)"
  if [[ $GVISOR == 1 ]]; then
    apply_runtime_class || fail kube-apiserver "could not create the RuntimeClass gvisor"
  fi
  wait_for kube-proxy "kube-proxy /healthz" proxy_healthy
  # No success without enforcement: the NFQUEUE rules must be in place.
  wait_for kube-network-policies "NetworkPolicy enforcement (table inet kube-network-policies with queue rules, and a listener on queue $KNP_QUEUE)" knp_rules
  log "kube-proxy and NetworkPolicy enforcement active (+$(since "$t0")s)"
  wait_for kubelet "CoreDNS Ready" coredns_ready
  log "CoreDNS Ready (+$(since "$t0")s)"
  trap - EXIT INT TERM
  log "up in $(since "$t0")s: $(components | xargs)"

  if [[ $IMPORT_IMAGES == 1 ]]; then
    local t1 tars
    t1=$(now)
    mapfile -t tars < <(built_airlock_images)
    if ((${#tars[@]})); then
      import_images "${tars[@]}"
      log "imported ${tars[*]##*/} in $(since "$t1")s"
    else
      log "no airlock images built yet; run: $0 images"
    fi
  fi
  log "export KUBECONFIG=$KUBECONFIG_ADMIN"
}

# delete_pods: with kube-controller-manager stopped (nothing recreates them), force-delete every
# pod; the kubelet then stops their containers and sandboxes, and containerd runs the CNI DEL
# (veth, IP) and removes their network namespaces. Bounded wait until no task runs.
delete_pods() {
  alive kube-apiserver && alive kubelet && alive containerd || return 0
  kubectl_ delete pods --all --all-namespaces --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 30))
  while [[ -n $(ctr_ tasks ls -q 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.3; done
  [[ -z $(ctr_ tasks ls -q 2>/dev/null) ]] || log "warning: containers still running after 30s; removing them with runc"
}

# cleanup_host: whatever is left on the host after the processes are gone. Each step is
# idempotent, best effort (errexit off) and only touches what this script (or the components
# it started) creates.
cleanup_host() {
  set +e
  local id m t c d
  # 1. Containers the kubelet did not stop (e.g. it had died): kill and delete them with runc,
  #    whose state is under our state dir; then any shim still serving our containerd.
  if [[ -d $RUNC_ROOT ]]; then
    for d in "$RUNC_ROOT"/*/; do
      [[ -d $d ]] || continue
      for id in $(runc --root "$d" list -q 2>/dev/null); do
        runc --root "$d" kill -a "$id" KILL 2>/dev/null || true
        runc --root "$d" delete -f "$id" 2>/dev/null || true
      done
    done
  fi
  #    gVisor's likewise with runsc, whose root holds the sandboxes' state: kill -all reaches
  #    the processes inside a sandbox, delete -force stops the sandbox and its gofers.
  if [[ -d $RUNSC_ROOT/k8s.io && -x $BIN/runsc ]]; then
    for id in $("$BIN/runsc" --root "$RUNSC_ROOT/k8s.io" list -quiet 2>/dev/null); do
      "$BIN/runsc" --root "$RUNSC_ROOT/k8s.io" kill -all "$id" KILL 2>/dev/null || true
      "$BIN/runsc" --root "$RUNSC_ROOT/k8s.io" delete -force "$id" 2>/dev/null || true
    done
  fi
  local pid
  for pid in $(pgrep -f "containerd-shim-run(c-v2|sc-v1) .*-address $CTRD_SOCK" 2>/dev/null || true); do
    # (a shim started by this node's containerd: its command line names our socket)
    grep -qz -- "$CTRD_SOCK" "/proc/$pid/cmdline" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  done
  # 2. Mounts under the state dir (container rootfs, shm, network namespaces, pod volumes),
  #    deepest first.
  for _ in 1 2 3; do
    mapfile -t m < <(awk -v s="$STATE/" 'index($5, s) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    ((${#m[@]})) || break
    for t in "${m[@]}"; do umount "$t" 2>/dev/null || umount -l "$t" 2>/dev/null || true; done
  done
  # 3. The pod network: the bridge (veths go with their namespaces) and CNI's cached results.
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" || true; fi
  rm -f /var/lib/cni/results/airlock-* /var/lib/cni/results/cni-loopback-* 2>/dev/null || true
  # 4. Rules: kube-network-policies' and kube-proxy's nftables tables; iptables chains made by
  #    the kubelet, kube-proxy or CNI (KUBE-*, CNI-*), with the rules that jump to them.
  nft delete table inet kube-network-policies 2>/dev/null || true
  nft delete table ip kube-proxy 2>/dev/null || true
  nft delete table ip6 kube-proxy 2>/dev/null || true
  local ipt
  for ipt in iptables ip6tables; do
    for t in filter nat mangle; do
      "$ipt" -t "$t" -S 2>/dev/null | grep -E '^-A .* -j (KUBE|CNI)-' | sed 's/^-A/-D/' |
        while read -r rule; do eval "$ipt -t $t $rule" 2>/dev/null; done
      for c in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ { print $2 }'); do
        "$ipt" -t "$t" -F "$c" 2>/dev/null || true
      done
      for c in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ { print $2 }'); do
        "$ipt" -t "$t" -X "$c" 2>/dev/null || true
      done
    done
  done
  # The iptables-nft tables (ip/ip6 filter, nat, mangle) that only exist because of the node
  # (the kubelet's canary chains created them): delete them when they are empty now.
  local fam tbl
  while read -r _ fam tbl; do
    [[ $tbl =~ ^(filter|nat|mangle)$ && $fam =~ ^ip6?$ ]] || continue
    [[ ",${SAVED_NFT_TABLES:-}," == *",$fam $tbl,"* ]] && continue
    if [[ -z $(nft list table "$fam" "$tbl" 2>/dev/null | grep -vE '^\s*(table|chain|type|\}|$)') ]]; then
      nft delete table "$fam" "$tbl"
    fi
  done < <(nft list tables 2>/dev/null)
  conntrack -D -s "$POD_CIDR" >/dev/null 2>&1 || true
  conntrack -D -d "$POD_CIDR" >/dev/null 2>&1 || true
  # 5. The node IP on lo, and the sysctls `up` changed.
  if node_ip_on_lo; then ip addr del "$NODE_IP/32" dev lo || true; fi
  [[ -z ${SAVED_IP_FORWARD:-} ]] || sysctl_set net.ipv4.ip_forward "$SAVED_IP_FORWARD" || true
  [[ -z ${SAVED_BRIDGE_NF:-} ]] || sysctl_set net.bridge.bridge-nf-call-iptables "$SAVED_BRIDGE_NF" || true
  # 6. The kubelet's pod cgroups (cgroup v1: one tree per controller), deepest first.
  for c in /sys/fs/cgroup/*/kubepods; do
    [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # 7. The kubelet's /var/log/containers links into our pod logs.
  for t in /var/log/containers/*.log; do
    [[ -L $t && $(readlink "$t") == "$POD_LOGS/"* ]] && rm -f "$t"
  done
  # 8. Fixed host paths the components use whatever their configuration: shim sockets that no
  #    process listens on any more (left when a shim was killed), then directories that are now
  #    empty (rmdir removes nothing else).
  local listening
  listening=$(ss -xlH 2>/dev/null | awk '{ print $5 }')
  for t in /run/containerd/s/* /var/lib/kubelet/device-plugins/*.sock; do
    [[ -S $t && $'\n'$listening$'\n' != *$'\n'"$t"$'\n'* ]] && rm -f "$t"
  done
  rmdir /var/log/containers /run/containerd/s /run/containerd /var/lib/cni/results /var/lib/cni \
    /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null
  set -e
}

# do_down: pods first (clean CNI teardown), then the node components, then the control plane,
# then the host cleanup and the state (logs are kept).
do_down() {
  stop kube-controller-manager kube-scheduler
  delete_pods
  # Together (their shutdowns overlap: kube-network-policies alone waits 5 s to remove its
  # rules, kube-apiserver drains its requests), then etcd last.
  stop kubelet kube-proxy kube-network-policies containerd kube-apiserver
  stop etcd
  # Also any other pid file (e.g. `up` was interrupted between writing both).
  local f rest=()
  for f in "$STATE"/*.pid; do [[ -e $f ]] && rest+=("$(basename "$f" .pid)"); done
  ((${#rest[@]} == 0)) || stop "${rest[@]}"
  cleanup_host
  if awk -v s="$STATE/" 'index($5, s) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    log "warning: mounts remain under $STATE; not deleting its contents"
  else
    rm -rf "$STATE/etcd-data" "$PKI" "$STATE/serving-certs" "$CTRD" "$STATE/cni" "$STATE/kubelet" "$POD_LOGS"
  fi
  rm -f "$STATE/components" "$STATE/node.env" "$STATE"/*.kubeconfig "$KUBECONFIG_ADMIN" \
    "$STATE"/*.yaml
  if [[ $(cat "$MACHINE_OWNER" 2>/dev/null) == "$STATE" ]]; then rm -f "$MACHINE_OWNER"; fi
}

cmd_down() {
  need_root
  [[ -d $STATE ]] || { log "nothing to stop ($STATE does not exist)"; return 0; }
  machine_lock
  load_settings
  local comps t0
  comps=$(components | xargs)
  t0=$(now)
  do_down
  log "down in $(since "$t0")s${comps:+ (stopped: $comps)}"
}

cmd_env() { print_env hack/local-node.sh; }

cmd_status() {
  load_settings
  local ok=0
  print_status "local node" "$NODE_IP" || ok=$?
  (( ok != 2 )) || return 1
  if apiserver_ready && ! node_ready; then ok=1; fi
  if knp_rules; then echo "  NetworkPolicy enforcement: active"; else echo "  NetworkPolicy enforcement: NOT active"; ok=1; fi
  return $(( ok == 0 ? 0 : 1 ))
}

cmd_images() {
  "$ROOT/hack/imagebuild/build-images.sh" "$@"
  load_settings
  if alive containerd 2>/dev/null && containerd_ready >/dev/null 2>&1; then
    local names=("$@") tars=() n
    ((${#names[@]})) || names=(operator sandbox sandbox-go)
    for n in "${names[@]}"; do tars+=("$IMAGES/$n.tar"); done
    import_images "${tars[@]}"
    log "imported into the node's containerd: ${names[*]}"
  else
    log "the node is not up; \`$0 up\` imports the built images"
  fi
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  images) shift; cmd_images "$@" ;;
  *)
    echo "usage: $0 up|down|env|status|images [image...]" >&2
    exit 2
    ;;
esac
