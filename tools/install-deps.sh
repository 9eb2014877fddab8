#!/usr/bin/env bash
# Installs every Debian 12 package Backplane needs to build and test.
# Idempotent: packages already present are left alone. Run as root.
set -euo pipefail

packages=(
  # toolchain
  build-essential g++ clang cmake ninja-build pkg-config git
  # libFuzzer and the sanitizer runtimes of clang (tests/fuzz, the fuzz preset)
  libclang-rt-14-dev
  # host: plugin loading (Boost.DLL, header-only), JSON, CLI
  libboost-dev nlohmann-json3-dev libcli11-dev
  # fleet files: a real JSON Schema validator (header-only, nlohmann adapter)
  libvalijson-dev
  # plugin pins: SHA-256 of plugin files from OpenSSL's libcrypto
  libssl-dev
  # SIMD for the CPU plugin's reductions
  libhwy-dev
  # the OpenCL plugin: the Khronos ICD loader and headers; PoCL is the
  # OpenCL device the tests run on (a CPU device), clinfo to look at it
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  # a second OpenCL platform for the tests of groups across platforms:
  # Mesa's rusticl, whose llvmpipe device shows with RUSTICL_ENABLE=llvmpipe
  mesa-opencl-icd
  # the Vulkan plugin: the Khronos loader and headers, glslc and spirv-val to
  # build its shaders, Mesa's lavapipe (a CPU Vulkan device) for the tests,
  # the Khronos validation layer they run under, vulkaninfo to look at it
  libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  # tests and micro-benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the ABI guard (tests/abi/abi_guard.sh): libabigail's abidw and abidiff;
  # without them its tests are skipped
  abigail-tools
  # compiler cache for the several build trees one checkout keeps
  # (-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  ccache
  # the mpi transport plugin and its tests under mpirun (label mpi); also the
  # reference of tools/bench/compare
  libopenmpi-dev openmpi-bin
  # the Python bindings and their tests (bindings/python, label python), on
  # Debian's /usr/bin/python3
  python3-numpy python3-pytest
  # comparisons and plots (tools/bench/compare, a project of its own: the
  # main build never needs these): Gloo, and matplotlib for --plot
  libgloo-dev python3-matplotlib
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run this script as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
