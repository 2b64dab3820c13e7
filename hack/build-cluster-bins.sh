#!/usr/bin/env bash
# Builds the binaries of the local control plane from the Go module proxy, once, into bin/.
# Pins live in hack/tools/{kube,etcd,kwok}/go.mod, and for the real node of hack/local-node.sh
# in hack/tools/{kube-node,coredns,kube-network-policies}/, and for the chart checks (make
# verify-chart, manifests/chart_test.go) helm in hack/tools/helm/, and for `make bench`'s peer
# (hack/bench.sh, issue 40) agent-sandbox-controller in hack/tools/agent-sandbox/, and for the
# local node's RuntimeClass gvisor (docs/isolation.md) runsc and containerd-shim-runsc-v1 in
# hack/tools/gvisor/, and for the tracing e2e (e2e/trace_test.go, docs/record.md §1) the trace
# collector jaeger in hack/tools/jaeger/ (these asked for by name only: never in the default list). A binary is
# rebuilt only when its pin changes (bin/.stamp-<name> records the pin it was built from).
#
# usage: hack/build-cluster-bins.sh [name...]   (default: every binary the local cluster needs)
#        hack/build-cluster-bins.sh --check name...   exit 0 when they are built from their pins,
#                                                     1 when not (builds nothing)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${AIRLOCK_BIN_DIR:-$ROOT/bin}
TOOLS=$ROOT/hack/tools
# shellcheck source=hack/lib/gomod.sh
source "$ROOT/hack/lib/gomod.sh"
KUBE_VERSION=v1.36.3
mkdir -p "$BIN"

stamp_of() { # name -> the pin string for that binary
  case "$1" in
    etcd) sha256sum "$TOOLS/etcd/go.mod" "$TOOLS/etcd/main.go" | sha256sum | cut -c1-16 ;;
    kwok) sha256sum "$TOOLS/kwok/go.mod" | cut -c1-16 ;;
    kubelet | kube-proxy) sha256sum "$TOOLS/kube-node/go.mod" | cut -c1-16 ;;
    coredns) sha256sum "$TOOLS/coredns/go.mod" | cut -c1-16 ;;
    helm) sha256sum "$TOOLS/helm/go.mod" | cut -c1-16 ;;
    agent-sandbox-controller) sha256sum "$TOOLS/agent-sandbox/go.mod" | cut -c1-16 ;;
    runsc) sha256sum "$TOOLS/gvisor/go.mod" | cut -c1-16 ;;
    jaeger) sha256sum "$TOOLS/jaeger/go.mod" | cut -c1-16 ;;
    containerd-shim-runsc-v1)
      sha256sum "$TOOLS/gvisor/go.mod" "$TOOLS/gvisor/local.patch" | sha256sum | cut -c1-16 ;;
    kube-network-policies)
      sha256sum "$TOOLS/kube-network-policies/go.mod" "$TOOLS/kube-network-policies/local.patch" | sha256sum | cut -c1-16 ;;
    *) sha256sum "$TOOLS/kube/go.mod" | cut -c1-16 ;;
  esac
}

kube_ldflags() {
  local v=$KUBE_VERSION major minor
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  local f="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$f"
}

# build_kube_network_policies: the pinned module source, copied out of the module cache,
# with hack/tools/kube-network-policies/local.patch applied, built with its own go.mod.
build_kube_network_policies() {
  local pin=$TOOLS/kube-network-policies src work
  src=$(module_dir "$pin" sigs.k8s.io/kube-network-policies) || return 1
  work=$(mktemp -d)
  cp -r "$src/." "$work/"
  chmod -R u+w "$work"
  (cd "$work" && patch -s -p0 <"$pin/local.patch") || { rm -rf "$work"; return 1; }
  (cd "$work" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/kube-network-policies" ./cmd) ||
    { rm -rf "$work"; return 1; }
  rm -rf "$work"
}

# build_gvisor_shim: containerd-shim-runsc-v1 from the pinned module source, copied out of the
# module cache, with hack/tools/gvisor/local.patch applied; built through the pin's go.mod (a
# copy, -modfile) with gvisor.dev/gvisor replaced by the patched copy, so that the pin still
# decides every other module.
build_gvisor_shim() {
  local pin=$TOOLS/gvisor src work
  src=$(module_dir "$pin" gvisor.dev/gvisor) || return 1
  work=$(mktemp -d)
  mkdir "$work/gvisor"
  cp -r "$src/." "$work/gvisor/"
  chmod -R u+w "$work/gvisor"
  (cd "$work/gvisor" && patch -s -p0 <"$pin/local.patch") || { rm -rf "$work"; return 1; }
  cp "$pin/go.mod" "$work/pin.mod"
  cp "$pin/go.sum" "$work/pin.sum"
  echo "replace gvisor.dev/gvisor => $work/gvisor" >>"$work/pin.mod"
  (cd "$pin" && GOWORK=off CGO_ENABLED=0 go build -modfile "$work/pin.mod" -trimpath -ldflags "-s -w" \
    -o "$BIN/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim) || { rm -rf "$work"; return 1; }
  rm -rf "$work"
}

agent_sandbox_version() { # the sigs.k8s.io/agent-sandbox version hack/tools/agent-sandbox/go.mod pins
  awk '$1 == "sigs.k8s.io/agent-sandbox" { print $2 }' "$TOOLS/agent-sandbox/go.mod"
}

gvisor_version() { # the gvisor.dev/gvisor pseudo-version hack/tools/gvisor/go.mod pins
  awk '$1 == "gvisor.dev/gvisor" { print $2 }' "$TOOLS/gvisor/go.mod"
}

jaeger_version() { # the github.com/jaegertracing/jaeger version hack/tools/jaeger/go.mod pins
  awk '$1 == "github.com/jaegertracing/jaeger" { print $2 }' "$TOOLS/jaeger/go.mod"
}

helm_version() { # the helm.sh/helm/v4 version hack/tools/helm/go.mod pins
  awk '$1 == "helm.sh/helm/v4" { print $2 }' "$TOOLS/helm/go.mod"
}

build_one() {
  local name=$1 want have
  want=$(stamp_of "$name")
  have=$(cat "$BIN/.stamp-$name" 2>/dev/null || true)
  if [[ -x "$BIN/$name" && "$want" == "$have" ]]; then
    return 0
  fi
  echo "building $name (cached in $BIN; the first build takes minutes)" >&2
  local start=$SECONDS
  case "$name" in
    etcd)
      (cd "$TOOLS/etcd" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .) ;;
    kwok)
      (cd "$TOOLS/kwok" && go build -trimpath -ldflags "-s -w" -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok) ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl)
      (cd "$TOOLS/kube" && go build -trimpath -ldflags "$(kube_ldflags)" -o "$BIN/$name" "k8s.io/kubernetes/cmd/$name") ;;
    kubelet|kube-proxy)
      (cd "$TOOLS/kube-node" && go build -trimpath -ldflags "$(kube_ldflags)" -o "$BIN/$name" "k8s.io/kubernetes/cmd/$name") ;;
    coredns) # static: CGO off
      (cd "$TOOLS/coredns" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/coredns" github.com/coredns/coredns) ;;
    kube-network-policies)
      build_kube_network_policies ;;
    helm) # the version helm prints is its pin's
      (cd "$TOOLS/helm" && CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$(helm_version)" \
        -o "$BIN/helm" helm.sh/helm/v4/cmd/helm) ;;
    agent-sandbox-controller) # the peer of make bench; --version prints its pin
      (cd "$TOOLS/agent-sandbox" && GOWORK=off CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/agent-sandbox/internal/version.gitVersion=$(agent_sandbox_version)" \
        -o "$BIN/agent-sandbox-controller" sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller) ;;
    runsc) # static (CGO off), as gVisor releases it; `runsc --version` prints its pin
      (cd "$TOOLS/gvisor" && GOWORK=off CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$(gvisor_version)" \
        -o "$BIN/runsc" gvisor.dev/gvisor/runsc) ;;
    jaeger) # the trace collector of the tracing e2e (OTLP in, the query API out); static
      (cd "$TOOLS/jaeger" && GOWORK=off CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=$(jaeger_version)" \
        -o "$BIN/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger) ;;
    containerd-shim-runsc-v1) # package gvisor.dev/gvisor/shim, patched; containerd finds it by this name
      build_gvisor_shim ;;
    *) echo "unknown binary: $name" >&2; return 2 ;;
  esac
  echo "$want" >"$BIN/.stamp-$name"
  echo "built $name in $((SECONDS - start))s" >&2
}

check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
  [[ $# -gt 0 ]] || { echo "usage: $0 --check name..." >&2; exit 2; }
fi
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  names=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
fi

# Fast path without the lock: everything asked for is built from its current pin (so a long
# build of other binaries, e.g. coredns, does not hold up a cluster whose binaries are ready).
up_to_date() {
  local n
  for n in "$@"; do
    [[ -x "$BIN/$n" && "$(stamp_of "$n")" == "$(cat "$BIN/.stamp-$n" 2>/dev/null)" ]] || return 1
  done
}
if up_to_date "${names[@]}"; then exit 0; fi
if ((check)); then exit 1; fi

# One build at a time per bin dir: a second caller waits, then finds the binaries built.
exec 9>"$BIN/.build.lock"
flock 9
for n in "${names[@]}"; do
  build_one "$n"
done
