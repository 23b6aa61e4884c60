#!/usr/bin/env bash
# Gathers what scripts/gpu_checks.sh needs on a CUDA machine that cannot reach
# a package registry: the Debian 12 packages shardstream builds against (with
# every library they need, less the C runtime) and the wheels of WebDataset,
# the peer the GPU benchmark compares with. Run it on a Debian 12 machine with
# registry access; carry DIR to the CUDA machine.
#
#   bash scripts/gpu_deps.sh [DIR]        # DIR defaults to .gpu-deps
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=${1:-.gpu-deps}
mkdir -p "$dir/debs" "$dir/wheels"
dev="libarchive-dev libzstd-dev libxxhash-dev libcurl4-openssl-dev libssl-dev libjpeg62-turbo-dev
     libspng-dev libwebp-dev nlohmann-json3-dev libspdlog-dev libfmt-dev pkgconf"
# The C library, the compiler's runtime and kernel headers are the CUDA
# machine's own; unpacked beside them they would only be shadowed or clash.
skip='^(gcc-[0-9]+-base|libc-dev-bin|libc6|libc6-dev|libcrypt-dev|libcrypt1|libgcc-s1|libstdc\+\+6|linux-libc-dev|libnsl-dev|libnsl2|libtirpc-common|libtirpc-dev|libtirpc3|rpcsvc-proto|catch2)$'
# shellcheck disable=SC2086
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
         --no-replaces --no-enhances $dev | grep -v '^ ' | grep -v '^<' | sort -u | grep -Ev "$skip")
(cd "$dir/debs" && rm -f ./*.deb && apt-get download $pkgs >/dev/null)
echo "gpu_deps: $(ls "$dir/debs" | wc -l) Debian packages in $dir/debs"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux2014_x86_64 -d "$dir/wheels" \
  webdataset==1.0.2 braceexpand==0.1.7
echo "gpu_deps: wheels in $dir/wheels: $(ls "$dir/wheels" | tr '\n' ' ')"
