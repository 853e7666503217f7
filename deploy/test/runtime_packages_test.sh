#!/usr/bin/env bash
# deploy/docker/runtime-packages.sh on a binary built here: every line is an installed Debian
# package, and the packages of its known shared libraries are among them.
# usage: runtime_packages_test.sh BINARY   (a binary linking prometheus-cpp-core)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v dpkg-query > /dev/null; then echo "SKIP: not a Debian system"; exit 77; fi
packages=$(bash "$here/../docker/runtime-packages.sh" "$1")
echo "$packages"
status=0
for p in $packages; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "FAIL: '$p' is not an installed package"; status=1
  fi
done
for want in libc6 libstdc++6 libprometheus-cpp-core1.0; do
  grep -qx "$want" <<< "$packages" || { echo "FAIL: $want missing"; status=1; }
done
exit $status
