#!/usr/bin/env bash
# The tests of the Python and TypeScript clients (`make test-clients`; the Go client, pkg/client,
# is tested by `make test-unit`):
#   python      python3 -B -m unittest in clients/python/tests (standard library only: nothing
#               is installed)
#   typescript  npm ci into _output/clients-typescript (again only when package-lock.json
#               changed, as the conformance suite is installed), tsc, node --test, with the
#               Node.js 22 that package.json pins (the npm package `node`; the system's Node.js
#               only runs npm)
# Without python3 or npm a part is skipped with the reason, except under CI (CI set), where it
# fails. `clients/test.sh python` or `clients/test.sh typescript` runs one part;
# `clients/test.sh typescript-build` installs and compiles the TypeScript client only (the e2e
# suite runs it against the API-only plane).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE_VERSION=v22.23.3 # package.json's "node"

missing() {
  if [[ -n ${CI:-} ]]; then
    echo "clients/test.sh: $1 (CI is set: failing)" >&2
    exit 1
  fi
  echo "clients/test.sh: skipping: $1" >&2
}

python_tests() {
  if ! command -v python3 >/dev/null; then
    missing "no python3 on PATH: the Python client is not tested"
    return
  fi
  echo "--- clients/python: python3 -m unittest"
  (cd "$ROOT/clients/python/tests" && python3 -B -m unittest -v)
}

typescript_tests() {
  if ! command -v npm >/dev/null; then
    missing "no npm on PATH: the TypeScript client is not tested"
    return
  fi
  local src=$ROOT/clients/typescript out=$ROOT/_output/clients-typescript
  echo "--- clients/typescript: npm ci, tsc, node --test in ${out#"$ROOT"/}"
  mkdir -p "$out"
  rm -rf "$out/src" "$out/test" "$out/examples" "$out/dist"
  cp -R "$src/src" "$src/test" "$src/examples" "$src/tsconfig.json" "$src/package.json" "$out/"
  if ! cmp -s "$src/package-lock.json" "$out/package-lock.json" ||
    [[ $("$out/node_modules/node/bin/node" --version 2>/dev/null) != "$NODE_VERSION" ]]; then
    cp "$src/package-lock.json" "$out/package-lock.json"
    if ! (cd "$out" && npm ci --no-audit --no-fund --loglevel=error); then
      rm -f "$out/package-lock.json" # so that the next run installs again
      exit 1
    fi
  fi
  local node_bin=$out/node_modules/node/bin
  [[ $("$node_bin/node" --version) == "$NODE_VERSION" ]] || { echo "clients/test.sh: $node_bin/node is not $NODE_VERSION" >&2; exit 1; }
  (cd "$out" && PATH="$node_bin:$PATH" && export PATH && node node_modules/typescript/bin/tsc -p tsconfig.json)
  [[ ${1:-} == build ]] || (cd "$out" && PATH="$node_bin:$PATH" && export PATH && npm test)
}

case ${1:-all} in
  python) python_tests ;;
  typescript) typescript_tests ;;
  typescript-build) typescript_tests build ;; # installed and compiled, not tested (e2e/clients_test.go)
  all) python_tests && typescript_tests ;;
  *) echo "usage: clients/test.sh [python|typescript|typescript-build]" >&2; exit 2 ;;
esac
