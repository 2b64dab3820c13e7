#!/usr/bin/env bash
# Builds Dockerfile and Dockerfile.sandbox (targets sandbox and sandbox-go) without Docker and
# without a registry, then runs the images to check that they work. It exists because the images
# this repo deploys are built by hack/imagebuild/build-images.sh, not from the Dockerfiles, so
# nothing else exercises the Dockerfiles' own steps.
#
# How: buildah (Debian package), in a private store under $OUT (--root/--runroot, storage driver
# vfs, chroot isolation: no daemon, no global container storage; RUN steps use the host's network
# to reach deb.debian.org and the module proxy). The
# registry is unreachable, so the three base images the Dockerfiles name are LOCAL STAND-INS,
# built here and tagged with the exact names the Dockerfiles use:
#
#   docker.io/library/debian:bookworm-slim  `debootstrap --variant=minbase bookworm` (rootfs
#                                           cached in $OUT/cache), apt sources as in the real image
#   docker.io/library/golang:1.26           that + this host's Go toolchain at /usr/local/go, env
#                                           as in the official image (GOPATH=/go, GOTOOLCHAIN=local),
#                                           + the host's GOPROXY & co. where they differ from Go's
#                                           defaults, and the host's CA bundle (for the module proxy)
#   gcr.io/distroless/static:nonroot        from scratch: /etc/passwd and /etc/group with nonroot
#                                           (65532), the CA bundle, /tmp 1777, /home/nonroot;
#                                           USER 65532, WORKDIR /home/nonroot
#
# So what this verifies is airlock's own Dockerfile steps (COPY paths, RUN commands, stages and
# targets, USER, ENTRYPOINT, ENV, WORKDIR) and the resulting images' behaviour, not the upstream
# base images. Every stand-in carries the label io.airlock.verify-dockerfiles.stand-in, which the
# built images inherit. The Debian packages the sandbox installs (apt-get in Dockerfile.sandbox)
# are the real ones, from deb.debian.org; Go modules come from the module proxy.
#
# Checks (one PASS/FAIL line each; exit status 1 if any fails):
#   operator    image config User 65532:65532, Entrypoint ["/airlock"]; /airlock is a static ELF
#               (no program interpreter), the rootfs is the distroless base + /airlock;
#               `/airlock version` prints VERSION and COMMIT; `/airlock sync --help` works
#   sandbox     config User/Entrypoint/WorkingDir/HOME; runs as uid/gid 65532 in /workspace;
#               bash, git (init + commit), busybox work; /workspace owned by 65532 and writable,
#               /tmp 1777; CA bundle present; apt lists removed; `/airlock version`; and
#               `airlock sandboxd` really serves: /readyz, MCP initialize, tools/call Bash
#   sandbox-go  the same, plus `gopls version`, `go version` as 65532, GOTOOLCHAIN=local, CGO_ENABLED=0,
#               `go build`/`go vet`/`go test` of dependency-free modules in /tmp, and MCP
#               run_tests passing on a Go workspace
# All checks run with no network (a fresh network namespace; for sandboxd, loopback only).
#
# Then (unless AIRLOCK_DOCKERFILES_EXPORT=0) each image is written as a docker-archive tarball to
# $OUT/images/<image>.tar and the sizes are printed. Built images are named
# localhost/verify-dockerfiles/{airlock,airlock-sandbox}:<VERSION>[-go], never the release names.
#
# usage: hack/verify-dockerfiles.sh          (as root; installs buildah and debootstrap if missing)
#        hack/verify-dockerfiles.sh clean    (removes $OUT: the store, the cached rootfs, tarballs)
#
# Environment: AIRLOCK_DOCKERFILES_DIR ($OUT, default _output/dockerfiles), VERSION and COMMIT
# (build args; default as the Makefile: git describe / git rev-parse --short HEAD),
# DEBIAN_MIRROR (default http://deb.debian.org/debian), AIRLOCK_DOCKERFILES_EXPORT (default 1).
#
# Re-runs keep the rootfs and the stand-ins (rebuilt when their inputs change) and buildah's layer
# cache (--layers), and drop earlier runs' images. Figures on a loaded 2-CPU machine: a first run
# ~20-23 min; a re-run ~13 min when sources changed (go build starts cold: the Dockerfiles keep no
# Go build cache), still ~10 min when nothing changed (vfs copies every stage's rootfs in full).
# $OUT holds ~6.5 GB after a run (peak ~14 GB during one); `clean` frees it.
#
# The in-container scripts below are single-quoted on purpose: they expand in the container
# (SC2016); cleanup, cfg, run and sh_in are called only through trap and the check helpers (SC2317).
# shellcheck disable=SC2016,SC2317
set -euo pipefail
# All of the script is one { ... } block: bash reads it whole before running any of it, so a
# change to this file during a run (an edit, a checkout) cannot break the run.
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${AIRLOCK_DOCKERFILES_DIR:-$ROOT/_output/dockerfiles}
[[ $OUT == /* ]] || OUT=$PWD/$OUT
STORE=$OUT/storage
RUNROOT=$OUT/run
CACHE=$OUT/cache
NONROOT=65532
SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
EXPORT=${AIRLOCK_DOCKERFILES_EXPORT:-1}
VERSION=${VERSION:-$(cd "$ROOT" && git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)}
STAND_IN_LABEL=io.airlock.verify-dockerfiles.stand-in
DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim
GOLANG_IMAGE=docker.io/library/golang:1.26
DISTROLESS_IMAGE=gcr.io/distroless/static:nonroot
OPERATOR_IMAGE=localhost/verify-dockerfiles/airlock:$VERSION
SANDBOX_IMAGE=localhost/verify-dockerfiles/airlock-sandbox:$VERSION
SANDBOX_GO_IMAGE=$SANDBOX_IMAGE-go
BUILD_STAGE_IMAGE=localhost/verify-dockerfiles/build-stage:$VERSION
# Bump when the stand-in recipes below change: the stand-ins are rebuilt when their stamp
# (this, the rootfs tarball, the CA bundle, the host's Go version and module env) changes.
STAND_IN_REV=1

log() { echo "verify-dockerfiles: $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (buildah's chroot isolation, debootstrap and apt-get need it)"

if [[ ${1:-} == clean ]]; then
  log "removing $OUT"
  if [[ -e $OUT/.lock ]]; then # not under a running verification
    exec 9>"$OUT/.lock"
    flock 9
  fi
  if [[ -d $STORE ]] && command -v buildah >/dev/null; then
    buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver vfs rm --all >/dev/null 2>&1 || true
  fi
  rm -rf "$OUT"
  exit 0
fi
[[ $# -eq 0 ]] || die "usage: $0 [clean]"

# --- phase timing -------------------------------------------------------------------------------
PHASES=()
phase_start() { PHASE_NAME=$1; PHASE_T0=$SECONDS; log "== $1"; }
phase_end() { PHASES+=("$(printf '%-28s %4ds' "$PHASE_NAME" $((SECONDS - PHASE_T0)))"); }

# --- results ------------------------------------------------------------------------------------
PASSED=0
FAILED=0
RESULTS=()
pass() { RESULTS+=("PASS  $1"); PASSED=$((PASSED + 1)); echo "PASS  $1"; }
fail() {
  RESULTS+=("FAIL  $1"); FAILED=$((FAILED + 1)); echo "FAIL  $1"
  local line
  [[ -z ${2:-} ]] || while IFS= read -r line; do echo "        | $line"; done < <(head -n 20 <<<"$2")
}
# expect MODE DESC WANT CMD...: CMD exits 0 and its output (stdout+stderr) matches WANT as MODE
# says: ere (the extended regexp WANT), has (contains WANT), line (one line is exactly WANT) or eq
# (is exactly WANT, trailing newline aside).
expect() {
  local mode=$1 desc=$2 want=$3 out ok=1
  shift 3
  if out=$("$@" 2>&1); then
    case $mode in
      ere) grep -Eq -- "$want" <<<"$out" || ok=0 ;;
      has) grep -Fq -- "$want" <<<"$out" || ok=0 ;;
      line) grep -Fxq -- "$want" <<<"$out" || ok=0 ;;
      eq) [[ $out == "$want" ]] || ok=0 ;;
    esac
  else
    ok=0
  fi
  if ((ok)); then
    pass "$desc"
  else
    fail "$desc (want $mode '$want')" "$out"
  fi
}
check() { expect ere "$@"; }
check_has() { expect has "$@"; }
check_line() { expect line "$@"; }
check_eq() { expect eq "$@"; }

# --- tools --------------------------------------------------------------------------------------
phase_start "install tools"
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v readelf >/dev/null || missing+=(binutils)
if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing ${missing[*]} with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; } ||
    die "could not install ${missing[*]}"
fi
command -v go >/dev/null || die "no Go toolchain on PATH (the golang stand-in copies this host's)"
phase_end

mkdir -p "$STORE" "$RUNROOT" "$CACHE"
# One run at a time per $OUT.
exec 9>"$OUT/.lock"
flock -n 9 || { log "another run holds $OUT/.lock; waiting"; flock 9; }

# Short names (FROM golang:1.26) resolve to docker.io, as with Docker. Only this process sees
# this file; --pull=never below means no registry is ever asked.
cat >"$OUT/registries.conf" <<'EOF'
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
EOF
export CONTAINERS_REGISTRIES_CONF=$OUT/registries.conf

bh() { buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver vfs "$@"; }

# The store is this script's alone: working containers left by an interrupted run go now, and
# the ones this run makes go at exit.
bh rm --all >/dev/null 2>&1 || true
CTRS=()
ROOTFS_TMP=
cleanup() {
  local c
  for c in "${CTRS[@]}"; do bh rm "$c" >/dev/null 2>&1 || true; done
  if [[ -n $ROOTFS_TMP && -d $ROOTFS_TMP ]]; then
    umount -R "$ROOTFS_TMP/proc" "$ROOTFS_TMP/sys" >/dev/null 2>&1 || true
    rm -rf --one-file-system "$ROOTFS_TMP"
  fi
}
trap cleanup EXIT
new_ctr() { # IMAGE: a working container from IMAGE, named in $CTR (removed at exit)
  CTR=$(bh from --pull=never --quiet "$1")
  CTRS+=("$CTR")
}

# image_label IMAGE: the stand-in label of IMAGE, empty if IMAGE is absent.
image_label() {
  bh inspect --type image --format "{{index .OCIv1.Config.Labels \"$STAND_IN_LABEL\"}}" "$1" 2>/dev/null || true
}

# --- the build context ---------------------------------------------------------------------------
# A snapshot of the working tree, taken once: all three builds see the same sources (and the
# VERSION/COMMIT computed next to it) even if the tree changes meanwhile, and buildah's layer
# cache can share the build stage between them. Top-level .dockerignore entries are left out of
# the copy only to save time; buildah applies the snapshot's own .dockerignore as Docker would.
phase_start "snapshot build context"
CTX=$OUT/context
rm -rf "$CTX" "$OUT/context.tar"
mkdir -p "$CTX"
excl=(--exclude="./${OUT#"$ROOT"/}")
while IFS= read -r line; do
  line=${line#/}
  line=${line%/}
  [[ $line =~ ^[A-Za-z0-9._-]+$ ]] && excl+=(--exclude="./$line")
done <"$ROOT/.dockerignore"
rc=0
tar -C "$ROOT" "${excl[@]}" --warning=no-file-changed --warning=no-file-removed -cf "$OUT/context.tar" . || rc=$?
[[ $rc -le 1 ]] || die "could not snapshot $ROOT (tar exit $rc)"
tar -C "$CTX" -xf "$OUT/context.tar"
rm -f "$OUT/context.tar"
log "context: $ROOT as of $COMMIT ($VERSION), $(du -sh "$CTX" | cut -f1) (before .dockerignore)"
phase_end

# --- debian:bookworm-slim stand-in --------------------------------------------------------------
phase_start "debian rootfs (debootstrap)"
ROOTFS_TAR=$CACHE/debian-$SUITE-minbase.tar
if [[ ! -s $ROOTFS_TAR ]]; then
  ROOTFS_TMP=$(mktemp -d "$CACHE/.rootfs-XXXXXX")
  log "debootstrap --variant=minbase $SUITE from $DEBIAN_MIRROR (cached in $ROOTFS_TAR)"
  debootstrap --variant=minbase "$SUITE" "$ROOTFS_TMP" "$DEBIAN_MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
  # As the real image: deb822 sources (with updates and security), no package lists or .debs,
  # no resolv.conf/hostname of the build host (the runtime provides them).
  rm -f "$ROOTFS_TMP/etc/apt/sources.list" "$ROOTFS_TMP/etc/resolv.conf" "$ROOTFS_TMP/etc/hostname"
  cat >"$ROOTFS_TMP/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$ROOTFS_TMP"/var/lib/apt/lists/* "$ROOTFS_TMP"/var/cache/apt/*.bin "$ROOTFS_TMP"/var/cache/apt/archives/*.deb
  rm -rf "$ROOTFS_TMP"/var/log/* "$ROOTFS_TMP"/tmp/*
  tar --numeric-owner --xattrs -C "$ROOTFS_TMP" -cf "$ROOTFS_TAR.tmp" .
  mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
  rm -rf --one-file-system "$ROOTFS_TMP"
  ROOTFS_TMP=
else
  log "using the cached rootfs $ROOTFS_TAR"
fi
phase_end

phase_start "stand-in base images"
GOROOT_HOST=$(go env GOROOT)
GOVERSION_HOST=$(go env GOVERSION)
# The host's module-fetching settings, where they differ from Go's defaults (the official image
# sets none of them); GOFLAGS and the like are left out on purpose, so the build sees what it
# would see in the real golang image.
GO_NET_ENV=()
for v in GOPROXY GOSUMDB GONOSUMDB GONOPROXY GOPRIVATE GOINSECURE; do
  val=$(go env "$v")
  case "$v=$val" in
    GOPROXY=https://proxy.golang.org,direct | GOSUMDB=sum.golang.org | *=) ;;
    *) GO_NET_ENV+=("$v=$val") ;;
  esac
done
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
[[ -s $CA_BUNDLE ]] || die "no CA bundle at $CA_BUNDLE (apt-get install ca-certificates)"
inputs() { # the stamp of a stand-in's inputs
  { echo "rev=$STAND_IN_REV $1"; sha256sum "$ROOTFS_TAR.sha256" "$CA_BUNDLE" 2>/dev/null; } | sha256sum | cut -c1-16
}
[[ -s $ROOTFS_TAR.sha256 && $ROOTFS_TAR.sha256 -nt $ROOTFS_TAR ]] || sha256sum "$ROOTFS_TAR" >"$ROOTFS_TAR.sha256"

stamp="stand-in:$(inputs debian)"
if [[ $(image_label "$DEBIAN_IMAGE") != "$stamp" ]]; then
  log "building the stand-in $DEBIAN_IMAGE"
  new_ctr scratch; c=$CTR
  mnt=$(bh mount "$c")
  tar --numeric-owner --xattrs -xpf "$ROOTFS_TAR" -C "$mnt"
  bh config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd '["bash"]' \
    --label "$STAND_IN_LABEL=$stamp" "$c"
  bh commit --quiet --format docker --rm "$c" "$DEBIAN_IMAGE" >/dev/null
else
  log "stand-in $DEBIAN_IMAGE is up to date"
fi

stamp="stand-in:$(inputs "golang $GOVERSION_HOST ${GO_NET_ENV[*]}")"
if [[ $(image_label "$GOLANG_IMAGE") != "$stamp" ]]; then
  log "building the stand-in $GOLANG_IMAGE ($GOVERSION_HOST from $GOROOT_HOST)"
  new_ctr "$DEBIAN_IMAGE"; c=$CTR
  mnt=$(bh mount "$c")
  mkdir -p "$mnt/usr/local/go" "$mnt/go/src" "$mnt/go/bin" "$mnt/etc/ssl/certs"
  tar -C "$GOROOT_HOST" -cf - . | tar -C "$mnt/usr/local/go" --no-same-owner -xf -
  chown -R 0:0 "$mnt/usr/local/go"
  chmod -R 1777 "$mnt/go"
  cp "$CA_BUNDLE" "$mnt/etc/ssl/certs/ca-certificates.crt"
  envs=(--env "GOLANG_VERSION=${GOVERSION_HOST#go}" --env GOTOOLCHAIN=local --env GOPATH=/go
    --env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  for e in "${GO_NET_ENV[@]}"; do envs+=(--env "$e"); done
  bh config "${envs[@]}" --workingdir /go --label "$STAND_IN_LABEL=$stamp" "$c"
  bh commit --quiet --format docker --rm "$c" "$GOLANG_IMAGE" >/dev/null
else
  log "stand-in $GOLANG_IMAGE is up to date"
fi

stamp="stand-in:$(inputs distroless)"
if [[ $(image_label "$DISTROLESS_IMAGE") != "$stamp" ]]; then
  log "building the stand-in $DISTROLESS_IMAGE"
  new_ctr scratch; c=$CTR
  mnt=$(bh mount "$c")
  mkdir -p "$mnt"/{etc/ssl/certs,tmp,root,home/nonroot,var}
  cat >"$mnt/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:$NONROOT:$NONROOT:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$mnt/etc/group" <<EOF
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:$NONROOT:
EOF
  echo "hosts: files dns" >"$mnt/etc/nsswitch.conf"
  printf 'PRETTY_NAME="Distroless (local stand-in, hack/verify-dockerfiles.sh)"\nID=distroless\n' >"$mnt/etc/os-release"
  cp "$CA_BUNDLE" "$mnt/etc/ssl/certs/ca-certificates.crt"
  chmod 1777 "$mnt/tmp"
  chmod 0700 "$mnt/root" "$mnt/home/nonroot"
  chown "$NONROOT:$NONROOT" "$mnt/home/nonroot"
  bh config --user "$NONROOT" --workingdir /home/nonroot \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --label "$STAND_IN_LABEL=$stamp" "$c"
  bh commit --quiet --format docker --rm "$c" "$DISTROLESS_IMAGE" >/dev/null
else
  log "stand-in $DISTROLESS_IMAGE is up to date"
fi
phase_end

# --- the builds ---------------------------------------------------------------------------------
# build NAME TAG ARGS...: buildah bud of the repo as context (.dockerignore applies). FAIL, not an
# abort, when it fails, so that the other images still get built and checked.
BUILT=()
build() {
  local name=$1 tag=$2
  shift 2
  phase_start "build $name"
  log "buildah bud $* -t $tag (VERSION=$VERSION COMMIT=$COMMIT)"
  if bh bud --isolation chroot --pull=never --layers --format docker \
    --build-arg "VERSION=$VERSION" --build-arg "COMMIT=$COMMIT" \
    "$@" -t "$tag" "$CTX" >"$OUT/build-$name.log" 2>&1; then
    pass "$name: buildah bud $*"
    BUILT+=("$name")
  else
    fail "$name: buildah bud $* (log: $OUT/build-$name.log)" "$(tail -n 20 "$OUT/build-$name.log")"
  fi
  phase_end
}
build operator "$OPERATOR_IMAGE" -f "$CTX/Dockerfile"
build sandbox "$SANDBOX_IMAGE" -f "$CTX/Dockerfile.sandbox" --target sandbox
build sandbox-go "$SANDBOX_GO_IMAGE" -f "$CTX/Dockerfile.sandbox" --target sandbox-go
built() { [[ " ${BUILT[*]} " == *" $1 "* ]]; }

# --- the checks ---------------------------------------------------------------------------------
cfg() { bh inspect --type image --format "{{$2}}" "$1"; }
# One element per line (this buildah's templates have no json function).
ENTRYPOINT_FMT='range .Docker.Config.Entrypoint}}{{println .}}{{end'
ENV_FMT='range .Docker.Config.Env}}{{println .}}{{end'
# run CTR CMD...: CMD in the container as the image configures it (its USER, WORKDIR, ENV), with
# no network: chroot isolation cannot make a network namespace itself (buildah refuses
# --network none with it), so buildah runs inside a fresh one (only a down loopback).
run() {
  local c=$1
  shift
  unshare --net -- buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver vfs \
    run --isolation chroot "$c" -- "$@"
}

check_airlock_common() { # image-name ctr
  check_line "$1: /airlock version prints the VERSION build arg ($VERSION)" "Version: $VERSION" run "$2" /airlock version
  check_line "$1: /airlock version prints the COMMIT build arg ($COMMIT)" "Commit: $COMMIT" run "$2" /airlock version
}

# sh_in CTR SCRIPT: SCRIPT under bash in the container.
sh_in() { run "$1" bash -c "$2"; }
# run_lo CTR CMD...: as run, but the network namespace has its loopback up (and nothing else).
run_lo() {
  local c=$1
  shift
  unshare --net -- bash -c 'ip link set lo up && exec "$@"' _ \
    buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver vfs run --isolation chroot "$c" -- "$@"
}

# SANDBOXD_PROBE [go]: run in a sandbox image, as the image's user, with only a loopback. Starts
# `airlock sandboxd` on 127.0.0.1:18080 with its default workspace (/workspace), then speaks MCP
# streamable HTTP to it with busybox wget: initialize, tools/call Bash; with "go", also
# run_tests on a Go module written to /workspace.
# Ends with SIGTERM and prints sandboxd's exit status. (No `wget -T`: Debian bookworm's busybox
# is built without FEATURE_WGET_TIMEOUT and -T segfaults; coreutils timeout bounds it instead.)
read -r -d '' SANDBOXD_PROBE <<'PROBE' || true
set -u
port=18080 url=http://127.0.0.1:18080
/airlock sandboxd --listen 127.0.0.1:$port >/tmp/sandboxd.log 2>&1 &
pid=$!
get() { timeout 5 busybox wget -q -O - "$url$1" 2>/dev/null; }
r=
for _ in $(seq 150); do r=$(get /readyz) && break; sleep 0.1; done
echo "readyz: $r"
echo "healthz: $(get /healthz)"
# post BODY [SESSION]: a streamable-HTTP MCP request; the response body on stdout, headers in /tmp/h.
post() {
  local h=()
  [[ -n ${2:-} ]] && h=(--header "Mcp-Session-Id: $2")
  timeout 120 busybox wget -S -q -O - --header 'Content-Type: application/json' \
    --header 'Accept: application/json, text/event-stream' "${h[@]}" --post-data "$1" "$url/mcp" 2>/tmp/h
}
echo "initialize: $(post '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"verify-dockerfiles","version":"0"}}}')"
sid=$(sed -n 's/^ *[Mm]cp-[Ss]ession-[Ii]d: *//p' /tmp/h | tr -d '\r')
post '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$sid" >/dev/null
echo "bash: $(post '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"id -u; pwd; git --version | cut -d\" \" -f1-2"}}}' "$sid")"
if [[ ${1:-} == go ]]; then
  printf 'module example.com/w\n\ngo 1.26\n' >/workspace/go.mod
  printf 'package w\n\nfunc Add(a, b int) int { return a + b }\n' >/workspace/w.go
  printf 'package w\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal("Add")\n\t}\n}\n' >/workspace/w_test.go
  echo "run_tests: $(post '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_tests","arguments":{}}}' "$sid")"
fi
kill -TERM "$pid"
wait "$pid"
echo "sandboxd exit: $?"
PROBE

check_sandboxd() { # name ctr [go]
  local n=$1 c=$2 log=$OUT/probe-$1.log
  run_lo "$c" bash -c "$SANDBOXD_PROBE" _ "${3:-}" >"$log" 2>&1 || true
  check_line "$n: sandboxd serves /readyz (workspace writable as $NONROOT) [$log]" "readyz: ok" cat "$log"
  check_has "$n: sandboxd answers MCP initialize as airlock-sandboxd $VERSION" \
    "\"serverInfo\":{\"name\":\"airlock-sandboxd\",\"version\":\"$VERSION\"}" cat "$log"
  check_has "$n: MCP tools/call Bash runs as $NONROOT in /workspace, git on PATH" \
    '"output":"65532\n/workspace\ngit version\n"' cat "$log"
  if [[ ${3:-} == go ]]; then
    check_has "$n: MCP tools/call run_tests on a Go workspace runs go test ./..." '"command":"go test ./..."' cat "$log"
    check_has "$n: MCP tools/call run_tests on a Go workspace passes" '"passed":true' cat "$log"
  fi
  check_line "$n: sandboxd exits 0 on SIGTERM" "sandboxd exit: 0" cat "$log"
}

check_sandbox_common() { # name image ctr
  local n=$1 img=$2 c=$3
  check_eq "$n: config User is $NONROOT:$NONROOT" "$NONROOT:$NONROOT" cfg "$img" .Docker.Config.User
  check_eq "$n: config Entrypoint is [\"/airlock\"] (exec form)" /airlock cfg "$img" "$ENTRYPOINT_FMT"
  check_eq "$n: config WorkingDir is /workspace" /workspace cfg "$img" .Docker.Config.WorkingDir
  check_line "$n: config Env has HOME=/home/nonroot" HOME=/home/nonroot cfg "$img" "$ENV_FMT"
  check_eq "$n: runs as uid $NONROOT (id -u)" "$NONROOT" run "$c" id -u
  check_eq "$n: runs as gid $NONROOT (id -g)" "$NONROOT" run "$c" id -g
  check_eq "$n: uid $NONROOT is named nonroot (id -un)" nonroot run "$c" id -un
  check_eq "$n: starts in /workspace (pwd)" /workspace run "$c" pwd
  check "$n: bash --version" '^GNU bash, version 5\.' run "$c" bash --version
  check "$n: git --version" '^git version 2\.' run "$c" git --version
  check "$n: busybox is there and runs (busybox wget --help, busybox --list)" '^wget$' \
    sh_in "$c" 'busybox wget --help >/dev/null 2>&1; busybox --list'
  check_eq "$n: /workspace owned by $NONROOT:$NONROOT" "$NONROOT:$NONROOT" run "$c" stat -c %u:%g /workspace
  check_eq "$n: /workspace writable by uid $NONROOT" ok \
    sh_in "$c" 'f=/workspace/.probe.$$ && : >"$f" && rm "$f" && echo ok'
  check_eq "$n: /tmp is 1777" 1777 run "$c" stat -c %a /tmp
  check_eq "$n: HOME /home/nonroot exists, owned by $NONROOT and writable" "/home/nonroot $NONROOT ok" \
    sh_in "$c" 'echo "$HOME $(stat -c %u "$HOME") $(test -w "$HOME" && echo ok)"'
  check_eq "$n: CA bundle present" ok sh_in "$c" 'test -s /etc/ssl/certs/ca-certificates.crt && echo ok'
  check_eq "$n: apt lists removed" 0 sh_in "$c" 'ls -A /var/lib/apt/lists | wc -l'
  check_eq "$n: git init + commit as $NONROOT in /workspace" ok sh_in "$c" '
    set -e; d=/workspace/.probe-repo; git init -q "$d"; cd "$d"; echo hi >f; git add f
    git -c user.name=t -c user.email=t@example.invalid commit -q -m t; git log --oneline | grep -q " t$"
    cd /; rm -rf "$d"; echo ok'
  check "$n: /airlock sandboxd --help" 'sandboxd' run "$c" /airlock sandboxd --help
  check_airlock_common "$n" "$c"
}

phase_start "checks"
RESOLVER=$(awk '$1 == "nameserver" { print $2; exit }' /etc/resolv.conf)
RESOLVER=${RESOLVER:-1.1.1.1}
if built sandbox; then
  new_ctr "$SANDBOX_IMAGE"; c=$CTR
  check_has "harness: checks run without network (a TCP connect to $RESOLVER:53 is unreachable)" "Network is unreachable" \
    sh_in "$c" "timeout 5 bash -c 'echo >/dev/tcp/$RESOLVER/53' && echo 'network!' || true"
fi
if built operator; then
  n=operator img=$OPERATOR_IMAGE
  check_eq "$n: config User is $NONROOT:$NONROOT" "$NONROOT:$NONROOT" cfg "$img" .Docker.Config.User
  check_eq "$n: config Entrypoint is [\"/airlock\"] (exec form)" /airlock cfg "$img" "$ENTRYPOINT_FMT"
  new_ctr "$img"; c=$CTR
  mnt=$(bh mount "$c")
  check "$n: /airlock is a static ELF executable (file)" 'ELF 64-bit.*statically linked' file -L "$mnt/airlock"
  if readelf -lW "$mnt/airlock" | grep -q 'INTERP'; then
    fail "$n: /airlock has no program interpreter (readelf -l)" "$(readelf -lW "$mnt/airlock" | grep -A1 INTERP)"
  else
    pass "$n: /airlock has no program interpreter (readelf -l)"
  fi
  check_eq "$n: /airlock is root-owned, mode 755" "0:0 755" stat -c '%u:%g %a' "$mnt/airlock"
  new_ctr "$DISTROLESS_IMAGE"; base=$(bh mount "$CTR")
  check_eq "$n: rootfs is exactly the distroless base + /airlock (no shell)" "" \
    diff <(cd "$base" && { find . -mindepth 1; echo ./airlock; } | sort) <(cd "$mnt" && find . -mindepth 1 | sort)
  check_airlock_common "$n" "$c"
  check "$n: /airlock sync --help (the sync Job's command)" 'sync' run "$c" /airlock sync --help
else
  fail "operator: checks skipped (image not built)"
fi

if built sandbox; then
  new_ctr "$SANDBOX_IMAGE"; c=$CTR
  check_sandbox_common sandbox "$SANDBOX_IMAGE" "$c"
  check_sandboxd sandbox "$c"
  check_eq "sandbox: no Go toolchain (that is sandbox-go)" ok sh_in "$c" '! command -v go >/dev/null && test ! -e /usr/local/go && echo ok'
  check_eq "sandbox: no gopls (that is sandbox-go)" ok sh_in "$c" '! command -v gopls >/dev/null && echo ok'
else
  fail "sandbox: checks skipped (image not built)"
fi

if built sandbox-go; then
  n=sandbox-go img=$SANDBOX_GO_IMAGE
  new_ctr "$img"; c=$CTR
  check_sandbox_common "$n" "$img" "$c"
  check_sandboxd "$n" "$c" go
  check_line "$n: config Env has GOTOOLCHAIN=local" GOTOOLCHAIN=local cfg "$img" "$ENV_FMT"
  check_line "$n: config Env has CGO_ENABLED=0" CGO_ENABLED=0 cfg "$img" "$ENV_FMT"
  check "$n: go version as uid $NONROOT" "^go version ${GOVERSION_HOST//./\\.} linux/" run "$c" go version
  check_eq "$n: config Env GOTOOLCHAIN=local, CGO_ENABLED=0 (go env)" "local 0" \
    sh_in "$c" 'echo "$(go env GOTOOLCHAIN) $(go env CGO_ENABLED)"'
  check_eq "$n: /usr/local/go/bin is first on PATH" /usr/local/go/bin/go sh_in "$c" 'command -v go'
  check "$n: gopls on PATH (code navigation)" '^golang.org/x/tools/gopls v' run "$c" gopls version
  check_eq "$n: go build + run of a hello module in /tmp as $NONROOT, no network (GOPROXY=off)" \
    "hello from sandbox-go" sh_in "$c" '
    set -e; export GOPROXY=off GOSUMDB=off; d=$(mktemp -d /tmp/hello.XXXXXX); cd "$d"
    printf "module example.com/hello\n\ngo 1.26\n" >go.mod
    printf "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from sandbox-go\") }\n" >main.go
    go build -o hello . && ./hello; cd /; rm -rf "$d"'
  check_eq "$n: go vet + go test of that module as $NONROOT (run_tests path)" ok sh_in "$c" '
    set -e; export GOPROXY=off GOSUMDB=off; d=$(mktemp -d /tmp/t.XXXXXX); cd "$d"
    printf "module example.com/t\n\ngo 1.26\n" >go.mod
    printf "package t\n\nfunc Add(a, b int) int { return a + b }\n" >t.go
    printf "package t\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) { if Add(1, 2) != 3 { t.Fatal(\"no\") } }\n" >t_test.go
    go vet ./... && go test ./... >/dev/null; cd /; rm -rf "$d"; echo ok'
else
  fail "sandbox-go: checks skipped (image not built)"
fi
phase_end

# --- store housekeeping ------------------------------------------------------------------------
# Keep this run's layer cache, drop earlier runs' images: the build stage gets a tag (a cached
# no-op build) so that its chain survives, other localhost/verify-dockerfiles tags are removed,
# then dangling images are pruned.
phase_start "prune earlier runs"
if built operator; then
  bh bud --isolation chroot --pull=never --layers --format docker \
    --build-arg "VERSION=$VERSION" --build-arg "COMMIT=$COMMIT" \
    -f "$CTX/Dockerfile" --target build -t "$BUILD_STAGE_IMAGE" "$CTX" >"$OUT/build-stage.log" 2>&1 ||
    log "could not tag the build stage (log: $OUT/build-stage.log); the next run rebuilds it"
fi
keep=" $OPERATOR_IMAGE $SANDBOX_IMAGE $SANDBOX_GO_IMAGE $BUILD_STAGE_IMAGE "
while IFS= read -r img; do
  [[ $keep == *" $img "* ]] || bh rmi "$img" >/dev/null 2>&1 || true
done < <(bh images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/verify-dockerfiles/' || true)
for _ in $(seq 20); do # one level of dangling images per pass
  [[ -n $(bh images --filter dangling=true --quiet 2>/dev/null) ]] || break
  bh rmi --prune >/dev/null 2>&1 || break
done
phase_end

# --- export -------------------------------------------------------------------------------------
SIZES=()
if [[ $EXPORT != 0 ]]; then
  phase_start "export docker-archives"
  mkdir -p "$OUT/images"
  for pair in "operator=$OPERATOR_IMAGE" "sandbox=$SANDBOX_IMAGE" "sandbox-go=$SANDBOX_GO_IMAGE"; do
    name=${pair%%=*} img=${pair#*=}
    built "$name" || continue
    tarball=$OUT/images/$name.tar
    rm -f "$tarball"
    if bh push --quiet "$img" "docker-archive:$tarball:$img" >"$OUT/push-$name.log" 2>&1; then
      check_has "$name: docker-archive $tarball has manifest.json naming $img" "\"RepoTags\":[\"$img\"]" \
        tar -xOf "$tarball" manifest.json
      SIZES+=("$(printf '%-11s %8s  %s  (%s)' "$name" "$(du -h "$tarball" | cut -f1)" "$tarball" "$img")")
    else
      fail "$name: export docker-archive (log: $OUT/push-$name.log)" "$(tail -n 5 "$OUT/push-$name.log")"
    fi
  done
  phase_end
fi

# --- summary ------------------------------------------------------------------------------------
echo
echo "== verify-dockerfiles: summary (base images are LOCAL STAND-INS; see the header of $0)"
echo "VERSION=$VERSION COMMIT=$COMMIT  go=$GOVERSION_HOST  store=$STORE ($(du -sh "$STORE" 2>/dev/null | cut -f1))"
echo "-- time per phase"
printf '   %s\n' "${PHASES[@]}"
echo "-- images (buildah images)"
bh images --format '   {{.Name}}:{{.Tag}}  {{.Size}}' 2>/dev/null | grep -v '<none>' || true
if [[ ${#SIZES[@]} -gt 0 ]]; then
  echo "-- docker-archive tarballs"
  printf '   %s\n' "${SIZES[@]}"
fi
echo "-- checks: $PASSED passed, $FAILED failed"
if [[ $FAILED -gt 0 ]]; then
  printf '   %s\n' "${RESULTS[@]}" | grep '^   FAIL'
  echo "FAIL"
  exit 1
fi
echo "PASS"
}; exit
