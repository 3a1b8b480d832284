#!/usr/bin/env bash
# Downloads the Debian packages that scripts/gpu_check.sh unpacks on the GPU machine (which has
# torch, cmake and ninja but none of our other dependencies, and no internet) into .debs/, with
# Fashion-MNIST's package. Carried as one path (`carry: [".debs"]`), about 35 MB. The runtime
# packages come with their -dev ones: a -dev package's .so link points at the runtime's file
# (zlib1g-dev's libz.so at zlib1g's libz.so.1.2.13), which the GPU machine may not have.
# A second run downloads nothing when every package is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
packages=(libcli11-dev libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  catch2 libgloo-dev zlib1g-dev zlib1g nlohmann-json3-dev libpcre2-dev libpcre2-8-0
  libturbojpeg0-dev libturbojpeg0 libpng-dev libpng16-16
  dataset-fashion-mnist)  # the quickstart's and the benchmarks' data (30 MB)
mkdir -p "$root/.debs"
cd "$root/.debs"
missing=()
for p in "${packages[@]}"; do ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] || apt-get download "${missing[@]}" >/dev/null
ls -1 "$root/.debs"
