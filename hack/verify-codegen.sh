#!/usr/bin/env bash
# Fails when pkg/generated, the deepcopy/register code or the CRD manifests are stale: it
# regenerates into a copy of the repository and compares.
#
# usage: hack/verify-codegen.sh [--cold]
#   --cold  run with an empty, throwaway module cache and bin dir (a fresh machine's), so that a
#           script that takes a module's directory without downloading it first fails here, on
#           any machine, and not only on a new user's. The build cache stays as it is; -trimpath
#           keeps the generators' compiled packages independent of the module cache's path, so
#           only the first such run compiles them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

if [[ ${1:-} == --cold ]]; then
  mkdir -p "$tmp/gomodcache" "$tmp/bin"
  echo "verify-codegen with an empty module cache ($tmp/gomodcache) and bin dir" >&2
  GOMODCACHE="$tmp/gomodcache" AIRLOCK_BIN_DIR="$tmp/bin" GOFLAGS="$(go env GOFLAGS) -modcacherw -trimpath" \
    "$ROOT/hack/verify-codegen.sh"
  exit
fi

# A copy of the tracked and untracked-but-not-ignored files, as they are in the work tree.
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - 2>/dev/null) | tar -xf - -C "$tmp"

"$ROOT/hack/update-codegen.sh" "$tmp" >/dev/null

status=0
for d in pkg/generated pkg/apis manifests/crd; do
  if ! diff -Naupr "$ROOT/$d" "$tmp/$d"; then
    status=1
  fi
done
if [[ $status -ne 0 ]]; then
  echo "generated code or CRDs are stale: run hack/update-codegen.sh" >&2
  exit 1
fi
echo "generated code and CRDs are up to date"
