#!/usr/bin/env bash
# The one list of Debian bookworm packages odeserve needs to build, test, train and run.
# Used by the README, .ci/run and the Dockerfiles. Idempotent; run as root.
#   install-deps.sh            build + test + training dependencies
#   install-deps.sh --runtime  only the shared libraries the server needs at run time
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

runtime_pkgs=(
  libtorch1.13 libgrpc++1.51 libprotobuf32 libabsl20220623 libprometheus-cpp-core1.0
  libprometheus-cpp-pull1.0 libsentencepiece0 libopenblas0-pthread ca-certificates
)
build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev libsentencepiece-dev
  libopenblas0-pthread libopenblas-dev
  python3 python3-torch python3-sentencepiece python3-numpy python3-grpcio python3-protobuf
  prometheus curl procps
)

pkgs=("${build_pkgs[@]}")
if [[ "${1:-}" == "--runtime" ]]; then pkgs=("${runtime_pkgs[@]}"); fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all ${#pkgs[@]} packages present"
