#!/usr/bin/env bash
# Downloads the Debian packages that scripts/gpu_check.sh unpacks on the GPU machine (which has
# torch, cmake and ninja but none of our other dependencies, and no internet) into .debs/, with
# Fashion-MNIST's package. Carried as one path (`carry: [".debs"]`), about 35 MB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.debs"
grep -qx '/.debs/' "$root/.git/info/exclude" 2>/dev/null || echo '/.debs/' >>"$root/.git/info/exclude"
cd "$root/.debs"
apt-get download libcli11-dev libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 \
  catch2 libgloo-dev zlib1g-dev nlohmann-json3-dev libpcre2-dev libpcre2-8-0 \
  libturbojpeg0-dev libturbojpeg0 libpng-dev libpng16-16 \
  dataset-fashion-mnist >/dev/null  # the quickstart's and the benchmarks' data (30 MB)
ls -1 "$root/.debs"
