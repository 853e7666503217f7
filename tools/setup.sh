#!/usr/bin/env bash
# Installs every Debian package Strata needs to build and test. Run as root on Debian 12.
# Idempotent: `apt-get update` runs only when something is missing, and a second run is a no-op.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git clang clang-format clang-tidy libclang-rt-14-dev
  # libraries
  libabsl-dev libboost-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libpcre2-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  prometheus-cpp-dev libdnnl-dev libgloo-dev
  # image decoding (engine/media); TLS for fetching allowed remote images (server/http)
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev libssl-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  python3 python3-numpy nodejs npm
  # tests/media/pil_compare_test.py: the image preprocessing against Pillow
  python3-pil
  # bench/long_context.sh's plot
  gnuplot-nox
  # gRPC Python client and its interop test (clients/python)
  python3-grpcio python3-protobuf
  # deploy/ checks: Prometheus server + promtool, Helm chart renderer (Go, sprig, yaml), YAML
  prometheus golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev python3-yaml
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # a preinstalled node/npm (not from Debian) is fine
    case "$p" in
      nodejs) command -v node >/dev/null && continue ;;
      npm) command -v npm >/dev/null && continue ;;
    esac
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}; run this script as root" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
