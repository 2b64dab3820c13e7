#!/usr/bin/env bash
# `make run`. Where this machine can run a real node (root, br_netfilter), it brings one up
# (hack/local-node.sh), installs airlock in-cluster as a user would (`kubectl apply -k
# manifests/`: the operator's 2 replicas from its image, leader election, the Sandbox API Service),
# and runs a short demo: an agent runtime pod acquires a sandbox, makes a few tool calls over MCP,
# closes its session, and the claim is reaped with its work synced back. The node stays up for
# kubectl afterwards (`hack/local-node.sh down` stops it).
#
# Elsewhere (not root, no br_netfilter, or AIRLOCK_RUN_PLANE=api) it says why and falls back to the
# API-only control plane (hack/local-cluster.sh), where the operator runs in the foreground as a
# local process (Ctrl-C stops it; `make cluster-down` stops the cluster).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
KUBECTL=$ROOT/bin/kubectl

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# why_no_node prints why the real node cannot run here (nothing when it can).
why_no_node() {
  if [[ ${AIRLOCK_RUN_PLANE:-} == api ]]; then
    echo "AIRLOCK_RUN_PLANE=api asks for the API-only control plane"
  elif [[ $EUID -ne 0 ]]; then
    echo "a real node needs root (containerd, the kubelet and host networking); this is uid $EUID"
  elif [[ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] && ! modprobe br_netfilter 2>/dev/null; then
    echo "the kernel has no br_netfilter, so NetworkPolicy could not be enforced on the pod bridge"
  fi
}

# ---------------------------------------------------------------------------------------------
# The API-only fallback.

run_api_only() {
  hack/local-cluster.sh up
  eval "$(hack/local-cluster.sh env)"

  echo "installing airlock (kubectl apply -k manifests/)"
  "$KUBECTL" apply --server-side --force-conflicts -k manifests/crd >/dev/null
  "$KUBECTL" wait --for=condition=Established --timeout=60s crd/sandboxclasses.airlock.dev crd/toolregistries.airlock.dev crd/agentruntimes.airlock.dev crd/sandboxclaims.airlock.dev crd/sessionrecords.airlock.dev >/dev/null
  "$KUBECTL" apply --server-side --force-conflicts -k manifests/

  # The API-only control plane has no container runtime: kwok would only pretend to run the
  # operator's pods. Scale them away and run the operator here, out of cluster, instead.
  "$KUBECTL" -n airlock-system scale deployment/airlock-operator --replicas=0 >/dev/null

  make --no-print-directory build
  local api=${AIRLOCK_API_ADDRESS:-127.0.0.1:8443}
  local metrics=${AIRLOCK_METRICS_ADDRESS:-127.0.0.1:8080}
  local health=${AIRLOCK_HEALTH_ADDRESS:-127.0.0.1:8081}
  cat <<MSG

airlock operator starting against the local control plane (API only: kwok plays the pods):
  Sandbox API  https://$api      health http://$health/readyz      metrics http://$metrics/metrics
The Sandbox API serves TLS with the operator's own CA (the Secret airlock-system/airlock-sandbox-api-tls;
every namespace with an AgentRuntime gets it in the ConfigMap airlock-ca). In another shell:
  eval "\$(hack/local-cluster.sh env)"; export PATH=$ROOT/bin:\$PATH
  kubectl get sbc,tr,ar,sbx -A
  kubectl -n airlock-system get secret airlock-sandbox-api-tls -o jsonpath='{.data.ca\.crt}' | base64 -d > /tmp/airlock-ca.crt
  curl --cacert /tmp/airlock-ca.crt --connect-to airlock-sandbox-api.airlock-system.svc:443:$api https://airlock-sandbox-api.airlock-system.svc/healthz
Ctrl-C stops the operator; 'make cluster-down' stops the cluster.

MSG
  exec bin/airlock operator \
    --kubeconfig="$KUBECONFIG" \
    --leader-elect-resource-namespace=airlock-system \
    --api-bind-address="$api" \
    --metrics-bind-address="$metrics" \
    --health-probe-bind-address="$health"
}

# ---------------------------------------------------------------------------------------------
# The real node and the demo.

DEMO_NS=airlock-demo
DEMO_GVISOR=false # true once the node has RuntimeClass gvisor (run_node)
CONTENT=/var/lib/airlock-demo/content

demo_plan() {
  cat <<EOF
{"api": "https://airlock-sandbox-api.airlock-system.svc:8443", "tokenFile": "/var/run/secrets/airlock/token", "caFile": "/var/run/airlock/ca/ca.crt", "namespace": "$DEMO_NS",
 "runtime": "agent", "session": "demo-$(date +%H%M%S)", "handle": "codegen/default", "close": true,
 "verifyIsolation": true, "requireDedicatedKernel": $DEMO_GVISOR,
 "steps": [
  {"name": "write", "tool": "Write", "args": {"file_path": "hello/README.md", "content": "# hello\n\nwritten by an agent in an airlock sandbox\n"}},
  {"name": "read",  "tool": "Read",  "args": {"file_path": "hello/README.md"}},
  {"name": "edit",  "tool": "Edit",  "args": {"file_path": "hello/README.md", "old_string": "an agent", "new_string": "the demo agent"}},
  {"name": "bash",  "tool": "Bash",  "args": {"command": "echo \"uid \$(id -u), kernel \$(uname -r)\"; cat hello/README.md | tail -n 1; ls -la hello"}},
  {"name": "net",   "tool": "Bash",  "args": {"command": "exec 2>/dev/null; if timeout 3 bash -c 'exec 3<>/dev/tcp/10.96.0.1/443'; then echo 'reached the API server'; else echo 'the API server (10.96.0.1:443) is unreachable from the sandbox: NetworkPolicy'; fi"}}
 ]}
EOF
}

# demo_pod: the runtime stand-in (e2e/realnode/runtimeclient) as the agent's ServiceAccount, under
# the restricted Pod Security level; the plan goes in as a YAML block scalar. It calls the Sandbox
# API over TLS, verified with the CA bundle the operator publishes in the namespace (the ConfigMap
# airlock-ca), with a projected ServiceAccount token for airlock's audience (the default token,
# for the API server's audience, is refused), and has no API server token at all.
demo_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: demo-runtime
  namespace: $DEMO_NS
spec:
  serviceAccountName: agent
  automountServiceAccountToken: false
  restartPolicy: Never
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    seccompProfile: {type: RuntimeDefault}
  volumes:
  - name: airlock-token
    projected:
      sources:
      - serviceAccountToken:
          audience: airlock
          expirationSeconds: 3600
          path: token
  - name: airlock-ca
    configMap:
      name: airlock-ca
  containers:
  - name: runtime
    image: localhost/airlock-e2e/runtimeclient:v0.1.0
    imagePullPolicy: IfNotPresent
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
    volumeMounts:
    - name: airlock-token
      mountPath: /var/run/secrets/airlock
      readOnly: true
    - name: airlock-ca
      mountPath: /var/run/airlock/ca
      readOnly: true
    args:
    - session
    - -plan
    - |
$(demo_plan | sed 's/^/      /')
EOF
}

run_node() {
  local t0=$SECONDS
  say "bringing up a real single node (hack/local-node.sh up)"
  if ! AIRLOCK_NODE_IMPORT_IMAGES=0 hack/local-node.sh up; then
    echo
    echo "run: the real node did not come up (see the messages above and _output/local-node/*.log);"
    echo "run: falling back to the API-only control plane."
    run_api_only
  fi
  eval "$(hack/local-node.sh env)"
  export KUBECONFIG

  say "building airlock's images from this tree and importing them (no registry involved)"
  hack/local-node.sh images operator sandbox e2e-client

  say "installing airlock like a user: kubectl apply -k manifests/"
  "$KUBECTL" apply --server-side --force-conflicts -k manifests/crd >/dev/null
  "$KUBECTL" wait --for=condition=Established --timeout=60s crd/sandboxclasses.airlock.dev crd/toolregistries.airlock.dev crd/agentruntimes.airlock.dev crd/sandboxclaims.airlock.dev crd/sessionrecords.airlock.dev >/dev/null
  "$KUBECTL" apply --server-side --force-conflicts -k manifests/
  "$KUBECTL" -n airlock-system rollout status deployment/airlock-operator --timeout=120s
  # The records webhook (docs/security.md) answers before the operator's sandbox pods are admitted.
  "$KUBECTL" -n airlock-system rollout status deployment/airlock-records-webhook --timeout=120s
  "$KUBECTL" -n airlock-system get pods -o wide
  echo "leader: $("$KUBECTL" -n airlock-system get lease airlock-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)"

  say "a demo namespace: content volume (hostPath PV), an agent runtime with its own ServiceAccount"
  mkdir -p "$CONTENT"
  # World-writable, not sticky: the sync-back Job (uid 65532) removes workspace directories that
  # the kubelet made (root's); a sticky parent would forbid it. Directories an older run made
  # sticky are made plain too (docs/decisions.md, "Real node").
  chmod 0777 "$CONTENT"
  find "$CONTENT" -mindepth 1 -maxdepth 3 -type d -perm -1000 -exec chmod -t {} + || true
  "$KUBECTL" apply --server-side --force-conflicts -k hack/local-node/demo
  if "$KUBECTL" get runtimeclass gvisor >/dev/null 2>&1; then
    DEMO_GVISOR=true
    say "the demo's sandbox runs under gVisor (class codegen-gvisor, isolation.kernel Dedicated): the runtime verifies the operator's signed evidence"
  else
    DEMO_GVISOR=false
    say "no RuntimeClass gvisor (AIRLOCK_NODE_GVISOR=0): the demo's sandbox runs under runc (class codegen)"
    "$KUBECTL" -n "$DEMO_NS" patch toolregistry tools --type=json -p '[{"op":"replace","path":"/spec/sandboxes/0/class","value":"codegen"}]' >/dev/null
  fi
  "$KUBECTL" get sbc,tr,ar -A

  say "the agent runtime pod acquires a sandbox through the Sandbox API and calls tools over MCP"
  "$KUBECTL" -n "$DEMO_NS" delete pod demo-runtime --ignore-not-found --wait=true >/dev/null
  "$KUBECTL" -n "$DEMO_NS" get sbx -w --output-watch-events &
  local watcher=$!
  demo_pod | "$KUBECTL" apply -f - >/dev/null
  "$KUBECTL" -n "$DEMO_NS" wait --for=jsonpath='{.status.phase}'=Succeeded pod/demo-runtime --timeout=180s >/dev/null || true
  echo
  "$KUBECTL" -n "$DEMO_NS" logs demo-runtime | grep -v '^RESULT '

  say "the closed session's claim is reaped: sync-back Job, then the claim is deleted"
  "$KUBECTL" -n "$DEMO_NS" wait --for=delete sbx --all --timeout=180s >/dev/null 2>&1 || true
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  echo "synced back to the content volume ($CONTENT/projects/demo on this node):"
  find "$CONTENT/projects/demo" -type f -exec sh -c 'echo "--- $1"; cat "$1"' _ {} \; 2>/dev/null || echo "(nothing yet)"

  cat <<MSG

airlock runs on a real node (demo done in $((SECONDS - t0))s). The node stays up:
  export KUBECONFIG=$KUBECONFIG; export PATH=$ROOT/bin:\$PATH
  kubectl get sbc,tr,ar,sbx -A          kubectl -n airlock-system logs -l app.kubernetes.io/component=operator
  make run                              (again: the demo runs once more)
  hack/local-node.sh down               stops the node and cleans the host
MSG
}

why=$(why_no_node)
if [[ -n $why ]]; then
  cat <<MSG
run: cannot run a real node here: $why.
run: falling back to the API-only control plane (kwok plays the pods; the operator runs as a local
run: process). On a machine where you are root, 'make run' brings up a real node and runs a demo.

MSG
  run_api_only
fi
run_node
