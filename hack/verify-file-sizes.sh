#!/usr/bin/env bash
# Fails on any file tracked by git (or staged) larger than 1 MiB: build outputs (binaries, image
# tarballs) are built where they are used and never committed (issue 37; .gitignore lists the known
# ones). `make verify` runs it.
#
# usage: hack/verify-file-sizes.sh [max-bytes]   (default 1048576)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
max=${1:-1048576}
big=()
while IFS= read -r -d '' f; do
  [[ -f "$f" ]] || continue # deleted in the work tree: not what will be committed
  size=$(stat -c %s -- "$f")
  if ((size > max)); then big+=("$f ($size bytes)"); fi
done < <(git ls-files -z --cached)
if ((${#big[@]})); then
  printf 'tracked files over %d bytes (build outputs belong in .gitignore, not in git):\n' "$max" >&2
  printf '  %s\n' "${big[@]}" >&2
  exit 1
fi
echo "no tracked file over $max bytes"
