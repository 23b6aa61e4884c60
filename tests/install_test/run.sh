#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then configures, builds and
# runs the consumer project against it with find_package(shardstream).
set -euo pipefail
build_dir=$1
src_dir=$2
flags=${3:-}  # compiler/linker flags for the consumer (sanitizer builds)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/shardstream"
"$work/prefix/bin/shardstream" --version
cmake -S "$src_dir/tests/install_test" -B "$work/consumer" -G Ninja \
      -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64:${LD_LIBRARY_PATH:-}" "$work/consumer/consumer"
