#!/usr/bin/env bash
# The one list of Debian bookworm packages odeserve needs to build, test, train and run.
# Used by the README, .ci/run and the Dockerfiles. Idempotent; run as root.
#   install-deps.sh               build + test + training dependencies (everything below but
#                                 --image-tools)
#   install-deps.sh --build       only what compiling and installing the server and client
#                                 needs (the Dockerfile's build stage)
#   install-deps.sh --runtime     only the shared libraries the server needs at run time
#   install-deps.sh --image-tools podman + debootstrap for docker/build-check.sh
# Add --print to any mode to list the packages and exit without installing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

runtime_pkgs=(
  libtorch1.13 libgrpc++1.51 libprotobuf32 libabsl20220623 libprometheus-cpp-core1.0
  libprometheus-cpp-pull1.0 libsentencepiece0 libicu72 libopenblas0-pthread libtcmalloc-minimal4 ca-certificates
)
# Compiling the server and client (tests and benchmarks may be switched off).
compile_pkgs=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev libsentencepiece-dev libicu-dev
  libopenblas0-pthread libopenblas-dev libgoogle-perftools-dev python3
)
# Tests, training and tooling on top of compile_pkgs.
#   python3-scipy: the evaluation baselines (models/odeserve_models/baselines.py) and their tests;
#   python3-yaml: tests/deploy manifest checks; prometheus: promtool + the real Prometheus of
#   tests/interop; nodejs (+ npm, see below): the independent Node gRPC client of tests/interop;
#   openssl: the test certificates of tests/interop's mutual-TLS checks; clang +
#   libclang-rt-14-dev: libFuzzer and clang's sanitizer runtimes for tests/fuzz.
dev_pkgs=(
  python3-torch python3-sentencepiece python3-numpy python3-scipy python3-grpcio python3-protobuf
  prometheus curl procps python3-yaml nodejs openssl clang libclang-rt-14-dev
)
image_tool_pkgs=(podman debootstrap uidmap fuse-overlayfs)

mode=all print=0
for arg in "$@"; do
  case "$arg" in
    --runtime) mode=runtime ;;
    --build) mode=build ;;
    --image-tools) mode=image-tools ;;
    --print) print=1 ;;
    *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
  esac
done

case "$mode" in
  runtime) pkgs=("${runtime_pkgs[@]}") ;;
  build) pkgs=("${compile_pkgs[@]}") ;;
  image-tools) pkgs=("${image_tool_pkgs[@]}") ;;
  all) pkgs=("${compile_pkgs[@]}" "${dev_pkgs[@]}") ;;
esac

if ((print)); then printf '%s\n' "${pkgs[@]}"; exit 0; fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's nodejs ships without npm; a NodeSource nodejs (which bundles npm) must not get
# Debian's npm on top of it, so npm is asked for only when no npm command exists.
if [[ "$mode" == all ]] && ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
if ((${#missing[@]})); then
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all ${#pkgs[@]} packages present"
