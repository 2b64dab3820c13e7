# Go module helpers for the hack/ scripts (sourced, not run).
# shellcheck shell=bash

# module_dir DIR MODULE: prints the directory of MODULE, as the go.mod in DIR pins it, downloading
# the module first. `go list -m -f '{{.Dir}}'` alone prints an empty line for a module that is not in
# the module cache yet (a fresh machine), so never use it without the download.
module_dir() {
  local dir
  dir=$(cd "$1" && GOWORK=off go mod download "$2" >&2 && GOWORK=off go list -m -f '{{.Dir}}' "$2") || return 1
  if [[ -z $dir || ! -d $dir ]]; then
    echo "module $2 (pinned in $1/go.mod): no directory after go mod download" >&2
    return 1
  fi
  echo "$dir"
}
