#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for umswap and builds it: installs the Debian packages the
# build needs (if any is missing), checks for the CUDA toolkit, configures and builds with the
# `default` preset into build/.
#
#   ./scripts/setup.sh            install what is missing, configure, build
#   UMSWAP_PRESET=debug ./scripts/setup.sh
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config python3
  libfmt-dev nlohmann-json3-dev libcli11-dev          # formatting, JSON, command line
  libgtest-dev libgmock-dev libbenchmark-dev          # tests and micro-benchmarks
  libunwind-14-dev                                    # LLVM libunwind: PIC static archive
  clang libclang-rt-14-dev                            # the trace reader's fuzzer (libFuzzer)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit (headers; nvcc for samples and GPU tests) is NVIDIA's, not Debian's.
cuda_root=${CUDAToolkit_ROOT:-/usr/local/cuda}
if [ ! -f "$cuda_root/include/cuda.h" ] && ! command -v nvcc >/dev/null 2>&1; then
  echo "setup: the CUDA toolkit (12.4 or newer; 13.0 tested) was not found at $cuda_root." >&2
  echo "       Install it from NVIDIA, or point CUDAToolkit_ROOT at it." >&2
  exit 1
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x "$cuda_root/bin/nvcc" ]; then
  export PATH="$cuda_root/bin:$PATH"
fi

preset=${UMSWAP_PRESET:-default}
cmake --preset "$preset"
cmake --build --preset "$preset"
echo "setup: built into $(sed -n 's/.*"binaryDir": "\${sourceDir}\/\([^"]*\)".*/\1/p' CMakePresets.json | head -1)/ — umswap is build/bin/umswap"
