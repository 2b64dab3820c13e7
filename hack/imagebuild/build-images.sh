#!/usr/bin/env bash
# Builds container images without Docker and without a registry: each image is one layer made
# from a root filesystem assembled here, written as a docker-archive tarball by the Go tool in
# this directory (imagebuild). Import them with `ctr -n k8s.io image import` (hack/local-node.sh
# does: `hack/local-node.sh images`). Users with Docker build the same images from Dockerfile and
# Dockerfile.sandbox.
#
# usage: hack/imagebuild/build-images.sh [image...]
#
#   operator     static airlock (CGO_ENABLED=0) at /airlock; ENTRYPOINT ["/airlock"], USER 65532
#   sandbox      airlock + bash + busybox userland + git (with their shared libraries copied
#                from this Debian host) + CA certificates; /workspace and /home/nonroot owned by
#                65532, /tmp 1777; ENTRYPOINT ["/airlock"], USER 65532
#   sandbox-go   sandbox + the Go toolchain at /usr/local/go (this host's), so run_tests works
#                for Go workspaces, and gopls at /usr/local/bin/gopls (static, built from the
#                pin in hack/tools/gopls), for the code navigation tools; tagged <sandbox tag>-go
#   pause        the pod sandbox image containerd's config names (a tiny static Go program)
#   coredns      bin/coredns (hack/build-cluster-bins.sh coredns) at /coredns
#   e2e-client   the real-node e2e suite's runtime stand-in (e2e/realnode/runtimeclient, static)
#                at /runtimeclient; ENTRYPOINT ["/runtimeclient"], USER 65532
#   e2e-python   the real-node e2e's runtime in Python: this host's python3 (Debian's; or
#                AIRLOCK_PYTHON) with its shared libraries and its standard library (without
#                tests, IDLE, tkinter, ensurepip, site-packages), and e2e/realnode/python/
#                runtime.py at /runtime.py with clients/python's airlock_client at
#                /airlock_client; ENTRYPOINT ["/usr/bin/python3", "-I", "/runtime.py"],
#                USER 65532
#                The same image runs clients/python's example: /agent_loop.py beside
#                /airlock_client (command ["/usr/bin/python3", "/agent_loop.py"]).
#   e2e-go-example  clients/go/examples/agentloop (static) at /agentloop; ENTRYPOINT
#                ["/agentloop"], USER 65532; its configuration from AIRLOCK_* (docs/clients.md)
#   e2e-typescript  clients/typescript's example on Node.js 22: the node binary of the npm
#                package `node` that package.json pins (installed by clients/test.sh
#                typescript-build) with its shared libraries from this host, at /usr/bin/node;
#                /app with package.json, the compiled client and example (dist/src,
#                dist/examples) and the production node_modules (@modelcontextprotocol/sdk and
#                its dependencies: npm ci --omit=dev, again only when package-lock.json changed);
#                ENTRYPOINT ["/usr/bin/node", "/app/dist/examples/agent_loop.js"], USER 65532
#   (default: operator sandbox sandbox-go)
#
# Output: $AIRLOCK_IMAGES_DIR/<image>.tar (default _output/images). Names (environment):
#   AIRLOCK_IMAGE          default ghcr.io/airlock-dev/airlock:v0.1.0          (as manifests/ use)
#   AIRLOCK_VERSION        the version built into airlock (default: AIRLOCK_IMAGE's tag, v0.1.0)
#   AIRLOCK_SANDBOX_IMAGE  default ghcr.io/airlock-dev/airlock-sandbox:v0.1.0  (as the sample class)
#   AIRLOCK_PAUSE_IMAGE    default registry.k8s.io/pause:3.10
#   AIRLOCK_COREDNS_IMAGE  default localhost/airlock-node/coredns:v1.14.7
#   AIRLOCK_E2E_CLIENT_IMAGE default localhost/airlock-e2e/runtimeclient:v0.1.0
#   AIRLOCK_E2E_PYTHON_IMAGE default localhost/airlock-e2e/python-runtime:v0.1.0
#   AIRLOCK_E2E_GO_EXAMPLE_IMAGE default localhost/airlock-e2e/go-example:v0.1.0
#   AIRLOCK_E2E_TYPESCRIPT_IMAGE default localhost/airlock-e2e/typescript-example:v0.1.0
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/hack/imagebuild
BIN=${AIRLOCK_BIN_DIR:-$ROOT/bin}
OUT=${AIRLOCK_IMAGES_DIR:-$ROOT/_output/images}
[[ $OUT == /* ]] || OUT=$PWD/$OUT
AIRLOCK_IMAGE=${AIRLOCK_IMAGE:-ghcr.io/airlock-dev/airlock:v0.1.0}
SANDBOX_IMAGE=${AIRLOCK_SANDBOX_IMAGE:-ghcr.io/airlock-dev/airlock-sandbox:v0.1.0}
PAUSE_IMAGE=${AIRLOCK_PAUSE_IMAGE:-registry.k8s.io/pause:3.10}
COREDNS_IMAGE=${AIRLOCK_COREDNS_IMAGE:-localhost/airlock-node/coredns:v1.14.7}
E2E_CLIENT_IMAGE=${AIRLOCK_E2E_CLIENT_IMAGE:-localhost/airlock-e2e/runtimeclient:v0.1.0}
E2E_PYTHON_IMAGE=${AIRLOCK_E2E_PYTHON_IMAGE:-localhost/airlock-e2e/python-runtime:v0.1.0}
E2E_GO_EXAMPLE_IMAGE=${AIRLOCK_E2E_GO_EXAMPLE_IMAGE:-localhost/airlock-e2e/go-example:v0.1.0}
E2E_TYPESCRIPT_IMAGE=${AIRLOCK_E2E_TYPESCRIPT_IMAGE:-localhost/airlock-e2e/typescript-example:v0.1.0}
NONROOT=65532

log() { echo "build-images: $*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$OUT"
WORK=$(mktemp -d "$OUT/.work-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The image writer itself (its own module; standard library only).
(cd "$HERE" && GOWORK=off go build -o "$WORK/imagebuild" .)

imagebuild() { "$WORK/imagebuild" "$@"; }

# airlock_binary [sandbox]: a static airlock, versioned like `make build`, built once per run.
# With "sandbox", the sandbox images' build (-tags sandboxd_only: no operator command, and not
# its client-go, which would add about 14 MiB to sandboxd's resident memory).
airlock_binary() {
  local variant=${1:-} out=$WORK/airlock tags=()
  if [[ $variant == sandbox ]]; then
    out=$WORK/airlock-sandbox tags=(-tags sandboxd_only)
  fi
  if [[ ! -x $out ]]; then
    local version commit
    # The binary's version is the image's tag (as in a release), so that the operator's default
    # --sync-image (ghcr.io/airlock-dev/airlock:<its version>) names this very image.
    version=${AIRLOCK_VERSION:-${AIRLOCK_IMAGE##*:}}
    commit=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
    log "building a static airlock ($version${variant:+, $variant})"
    (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath "${tags[@]}" \
      -ldflags "-s -w -X github.com/airlock-dev/airlock/pkg/version.version=$version -X github.com/airlock-dev/airlock/pkg/version.commit=$commit" \
      -o "$out" .)
  fi
  echo "$out"
}

# base_fs DIR: the skeleton every airlock image has: a merged-/usr layout, /etc/passwd and
# /etc/group with root and nonroot (65532, as distroless names it), a world-writable /tmp and
# the host's CA bundle.
base_fs() {
  local fs=$1
  mkdir -p "$fs"/{etc/ssl/certs,tmp,usr/bin,usr/lib,usr/lib64,usr/sbin,home/nonroot}
  ln -s usr/bin "$fs/bin"
  ln -s usr/lib "$fs/lib"
  ln -s usr/lib64 "$fs/lib64"
  ln -s usr/sbin "$fs/sbin"
  cat >"$fs/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:$NONROOT:$NONROOT:nonroot:/home/nonroot:/bin/bash
EOF
  cat >"$fs/etc/group" <<EOF
root:x:0:
nonroot:x:$NONROOT:
EOF
  chmod 1777 "$fs/tmp"
  chown "$NONROOT:$NONROOT" "$fs/home/nonroot"
  if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    cp /etc/ssl/certs/ca-certificates.crt "$fs/etc/ssl/certs/"
  fi
}

# copy_path FS PATH: copy PATH from the host into FS at the same place, keeping a symlink as a
# symlink and then also copying what it points to (recursively). The directory part is resolved
# on the host first (/lib/x86_64-linux-gnu -> /usr/lib/x86_64-linux-gnu), so files land in FS's
# real directories; FS's /lib, /bin, ... are symlinks into usr/ as on the host.
copy_path() {
  local fs=$1 p=$2 dir base target
  while :; do
    dir=$(realpath "$(dirname "$p")")
    base=$(basename "$p")
    if [[ ! -e $fs$dir/$base && ! -L $fs$dir/$base ]]; then
      mkdir -p "$fs$dir"
      cp -a "$dir/$base" "$fs$dir/$base"
    fi
    [[ -L $dir/$base ]] || break
    target=$(readlink "$dir/$base")
    [[ $target == /* ]] || target=$dir/$target
    p=$(realpath -sm "$target")
  done
}

# copy_tree FS DIR: the host directory DIR (a canonical path) into FS at the same place.
copy_tree() {
  mkdir -p "$1$(dirname "$2")"
  cp -a "$2" "$1$(dirname "$2")/"
}

# copy_elf FS FILE...: FILE and the shared libraries it loads (as ldd resolves them here).
copy_elf() {
  local fs=$1 f
  shift
  for f in "$@"; do
    copy_path "$fs" "$f"
    copy_libs "$fs" "$f"
  done
}

# copy_libs FS FILE: the shared libraries FILE loads (as ldd resolves them here), not FILE.
copy_libs() {
  local fs=$1 lib
  # ldd fails for static binaries and scripts: then there is nothing to copy.
  while read -r lib; do
    [[ -n $lib ]] && copy_path "$fs" "$lib"
  done < <(ldd "$(realpath "$2")" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
}

# gopls_binary: a static gopls from the pin in hack/tools/gopls, built once per run.
gopls_binary() {
  if [[ ! -x $WORK/gopls ]]; then
    log "building gopls (hack/tools/gopls)"
    (cd "$ROOT/hack/tools/gopls" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
      -o "$WORK/gopls" golang.org/x/tools/gopls)
  fi
  echo "$WORK/gopls"
}

# need_host_packages: the Debian packages the sandbox image copies binaries from.
need_host_packages() {
  local missing=()
  command -v bash >/dev/null || missing+=(bash)
  command -v git >/dev/null || missing+=(git)
  [[ -x /bin/busybox ]] && /bin/busybox --list >/dev/null 2>&1 && ! ldd /bin/busybox >/dev/null 2>&1 ||
    missing+=(busybox-static)
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
  if ((${#missing[@]})); then
    log "installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
      die "could not install ${missing[*]}"
  fi
}

sandbox_fs() {
  local fs=$1
  need_host_packages
  base_fs "$fs"
  cp "$(airlock_binary sandbox)" "$fs/airlock"
  mkdir -p "$fs/workspace"
  chown "$NONROOT:$NONROOT" "$fs/workspace"
  # bash (also as /bin/sh) and git with its helpers, templates and shared libraries.
  copy_elf "$fs" /usr/bin/bash /usr/bin/git
  ln -s bash "$fs/usr/bin/sh"
  local f
  for f in /usr/lib/git-core/*; do
    if [[ -d $f && ! -L $f ]]; then copy_tree "$fs" "$f"; else copy_elf "$fs" "$f"; fi
  done
  copy_tree "$fs" /usr/share/git-core
  # The small userland: busybox-static, one symlink per applet that is not there yet.
  cp /bin/busybox "$fs/usr/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [[ -e $fs/usr/bin/$applet || -L $fs/usr/bin/$applet ]] || ln -s busybox "$fs/usr/bin/$applet"
  done
}

# python_fs DIR: a Python interpreter and its standard library, copied from this host at the
# same paths (so that it finds its prefix as on the host), and runtime.py. The interpreter must
# be a real executable, not a wrapper script (pyenv's shims are): /usr/bin/python3 by default.
python_fs() {
  local fs=$1 py=${AIRLOCK_PYTHON:-/usr/bin/python3}
  if [[ ! -x $py ]]; then
    log "no $py: installing python3 with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null; } ||
      die "could not install python3"
  fi
  ldd "$(realpath "$py")" >/dev/null 2>&1 || die "$py is not a dynamically linked executable (a wrapper script?): set AIRLOCK_PYTHON"
  local stdlib dynload
  read -r stdlib dynload < <("$py" -I -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"], sysconfig.get_config_var("DESTSHARED"))')
  [[ -f $stdlib/os.py && -d $dynload ]] || die "$py: no standard library at $stdlib ($dynload)"
  base_fs "$fs"
  copy_elf "$fs" "$py"
  # /usr/bin/python3, whatever the interpreter's own name, for the entrypoint.
  [[ -e $fs/usr/bin/python3 ]] || ln -s "$(realpath "$py")" "$fs/usr/bin/python3"
  mkdir -p "$fs$stdlib"
  (cd "$stdlib" && tar -cf - --exclude=./test --exclude=./idlelib --exclude=./tkinter \
    --exclude=./turtledemo --exclude=./ensurepip --exclude=./lib2to3 --exclude=./site-packages \
    --exclude=./dist-packages --exclude=__pycache__ --exclude="./${dynload#"$stdlib"/}" .) |
    tar -xf - -C "$fs$stdlib"
  # The extension modules with the shared libraries they load (ssl: libssl, libcrypto).
  local so
  for so in "$dynload"/*.so; do
    case $so in *_test*|*xxlimited*|*_ctypes_test*) continue ;; esac
    copy_elf "$fs" "$so"
  done
  cp "$ROOT/e2e/realnode/python/runtime.py" "$fs/runtime.py"
  cp "$ROOT/clients/python/examples/agent_loop.py" "$fs/agent_loop.py"
  chmod 0644 "$fs/runtime.py" "$fs/agent_loop.py"
  # The client package beside it (runtime.py puts its own directory on sys.path).
  mkdir -p "$fs/airlock_client"
  cp "$ROOT"/clients/python/src/airlock_client/*.py "$ROOT/clients/python/src/airlock_client/py.typed" "$fs/airlock_client/"
  chmod 0755 "$fs/airlock_client" && chmod 0644 "$fs"/airlock_client/*
  # The interpreter starts and has what runtime.py imports (as root only: chroot).
  if [[ $EUID -eq 0 ]]; then
    chroot "$fs" /usr/bin/python3 -I -c 'import sys; sys.path.insert(0, "/"); import argparse, json, ssl, urllib.request, airlock_client, airlock_client.mcp; ssl.create_default_context()' ||
      die "the Python image's interpreter does not start or lacks a module"
    # The example imports, as the pod runs it (its directory on sys.path).
    chroot "$fs" /usr/bin/python3 -c 'import sys; sys.argv = ["/agent_loop.py"]; sys.path.insert(0, "/"); import agent_loop' ||
      die "the Python image cannot import its example"
  fi
}

# typescript_fs DIR: Node.js 22 (the pinned npm package's binary) with its shared libraries, and
# /app: the compiled client and example with the production node_modules.
typescript_fs() {
  local fs=$1 built=$ROOT/_output/clients-typescript prod=$ROOT/_output/clients-typescript-prod
  command -v npm >/dev/null || die "the TypeScript image needs npm (Debian: apt-get install npm)"
  "$ROOT/clients/test.sh" typescript-build >&2
  local node=$built/node_modules/node/bin/node
  [[ -x $node ]] && ldd "$node" >/dev/null 2>&1 || die "$node: not the dynamically linked Node.js binary clients/test.sh installs"
  # The production dependencies, installed again only when package-lock.json changed (the
  # stamp, a copy of the lock, is written once the install succeeded).
  mkdir -p "$prod"
  if ! cmp -s "$ROOT/clients/typescript/package-lock.json" "$prod/installed.lock"; then
    log "npm ci --omit=dev for the TypeScript image's node_modules"
    rm -rf "$prod/node_modules" "$prod/installed.lock"
    cp "$ROOT/clients/typescript/package.json" "$ROOT/clients/typescript/package-lock.json" "$prod/"
    (cd "$prod" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error) >&2 ||
      die "npm ci --omit=dev failed"
    cp "$prod/package-lock.json" "$prod/installed.lock"
  fi
  base_fs "$fs"
  cp "$node" "$fs/usr/bin/node"
  copy_libs "$fs" "$node"
  mkdir -p "$fs/app/dist"
  cp "$ROOT/clients/typescript/package.json" "$fs/app/"
  cp -R "$built/dist/src" "$built/dist/examples" "$fs/app/dist/"
  cp -R "$prod/node_modules" "$fs/app/"
  chmod -R a+rX "$fs/app"
  # Node starts, and the example's imports (the client, the SDK) resolve (as root only: chroot).
  if [[ $EUID -eq 0 ]]; then
    chroot "$fs" /usr/bin/node -e 'import("/app/dist/examples/agent_loop.js").then((m) => { if (typeof m.main !== "function") process.exit(1); })' ||
      die "the TypeScript image's node does not start or cannot load the example"
  fi
}

# build IMAGE: assemble its rootfs under $WORK and write $OUT/IMAGE.tar.
build() {
  local name=$1 fs=$WORK/$1
  local -a common=(-user "$NONROOT:$NONROOT" -entrypoint '["/airlock"]')
  case $name in
    operator)
      base_fs "$fs"
      cp "$(airlock_binary)" "$fs/airlock"
      imagebuild -rootfs "$fs" -tag "$AIRLOCK_IMAGE" -o "$OUT/operator.tar" "${common[@]}"
      ;;
    sandbox)
      sandbox_fs "$fs"
      imagebuild -rootfs "$fs" -tag "$SANDBOX_IMAGE" -o "$OUT/sandbox.tar" "${common[@]}" \
        -env HOME=/home/nonroot -workdir /workspace
      ;;
    sandbox-go)
      [[ -x /usr/local/go/bin/go ]] || die "no Go toolchain at /usr/local/go"
      sandbox_fs "$fs"
      mkdir -p "$fs/usr/local"
      cp -a /usr/local/go "$fs/usr/local/go"
      mkdir -p "$fs/usr/local/bin"
      cp "$(gopls_binary)" "$fs/usr/local/bin/gopls"
      # GOTOOLCHAIN=local: never download another toolchain; CGO off: there is no C compiler.
      imagebuild -rootfs "$fs" -tag "$SANDBOX_IMAGE-go" -o "$OUT/sandbox-go.tar" "${common[@]}" \
        -env HOME=/home/nonroot -workdir /workspace \
        -env PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        -env GOTOOLCHAIN=local -env CGO_ENABLED=0
      ;;
    pause)
      mkdir -p "$fs"
      (cd "$HERE" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$fs/pause" ./pause)
      imagebuild -rootfs "$fs" -tag "$PAUSE_IMAGE" -o "$OUT/pause.tar" -user 65535:65535 -entrypoint '["/pause"]'
      ;;
    coredns)
      [[ -x $BIN/coredns ]] || "$ROOT/hack/build-cluster-bins.sh" coredns
      mkdir -p "$fs"
      cp "$BIN/coredns" "$fs/coredns"
      imagebuild -rootfs "$fs" -tag "$COREDNS_IMAGE" -o "$OUT/coredns.tar" -entrypoint '["/coredns"]'
      ;;
    e2e-client)
      base_fs "$fs"
      (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$fs/runtimeclient" ./e2e/realnode/runtimeclient)
      imagebuild -rootfs "$fs" -tag "$E2E_CLIENT_IMAGE" -o "$OUT/e2e-client.tar" -user "$NONROOT:$NONROOT" -entrypoint '["/runtimeclient"]'
      ;;
    e2e-python)
      python_fs "$fs"
      imagebuild -rootfs "$fs" -tag "$E2E_PYTHON_IMAGE" -o "$OUT/e2e-python.tar" -user "$NONROOT:$NONROOT" \
        -env PYTHONDONTWRITEBYTECODE=1 -entrypoint '["/usr/bin/python3", "-I", "/runtime.py"]'
      ;;
    e2e-go-example)
      base_fs "$fs"
      (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$fs/agentloop" ./clients/go/examples/agentloop)
      imagebuild -rootfs "$fs" -tag "$E2E_GO_EXAMPLE_IMAGE" -o "$OUT/e2e-go-example.tar" -user "$NONROOT:$NONROOT" -entrypoint '["/agentloop"]'
      ;;
    e2e-typescript)
      typescript_fs "$fs"
      imagebuild -rootfs "$fs" -tag "$E2E_TYPESCRIPT_IMAGE" -o "$OUT/e2e-typescript.tar" -user "$NONROOT:$NONROOT" \
        -workdir /app -entrypoint '["/usr/bin/node", "/app/dist/examples/agent_loop.js"]'
      ;;
    *) die "unknown image $name (operator, sandbox, sandbox-go, pause, coredns, e2e-client, e2e-python, e2e-go-example, e2e-typescript)" ;;
  esac
}

images=("$@")
((${#images[@]})) || images=(operator sandbox sandbox-go)
for image in "${images[@]}"; do
  build "$image"
done
