#!/usr/bin/env bash
# Prints, one per line, the Debian packages that provide the shared libraries BINARY loads
# (ldd + dpkg -S), for a runtime image that holds only those. Libraries no package owns (the
# GPU driver's libcuda, mounted by the container runtime) are named on stderr and skipped.
# usage: runtime-packages.sh BINARY
set -euo pipefail
binary=${1:?usage: runtime-packages.sh BINARY}

owner() {  # the package owning library path $1 (merged /usr: try /usr/lib and the real path)
  local path=$1 candidate
  for candidate in "$path" "/usr$path" "$(readlink -f "$path")"; do
    if dpkg-query -S "$candidate" 2>/dev/null | head -n 1 | cut -d: -f1; then
      return 0
    fi
  done
  return 1
}

ldd "$binary" | while read -r line; do
  case "$line" in
    *"not found"*) echo "runtime-packages: skipping ${line%% *} (not found here)" >&2 ;;
    *"=> /"*)
      path=$(echo "$line" | sed -E 's/.*=> ([^ ]+) .*/\1/')
      owner "$path" || echo "runtime-packages: no package owns $path" >&2 ;;
    /*) owner "${line%% *}" || true ;;  # the dynamic loader
  esac
done | sort -u
