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

# The C++ training-loop example against the same installed tree, on a small
# token data set made by the installed tool: once on the host, and once with
# the stand-in libcudart (arg 4, tests/cuda_stub) so its CUDA branch (device
# buffers, a stream, cudaMemcpyAsync of every batch) runs too.
stub_dir=${4:-}
cmake -S "$src_dir/examples/cpp_training_loop" -B "$work/example" -G Ninja \
      -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$work/example" >/dev/null
"$work/prefix/bin/shardstream" bench-loader --make-tokens "$work/tokens" --count 400 \
    --mean-tokens 100 --shard-mib 1 >/dev/null
libs="$work/prefix/lib:$work/prefix/lib64:${LD_LIBRARY_PATH:-}"
run_example() {
  "$work/example/train_loop" "$work/tokens/manifest.jsonl" 2 --tokens tokens.npy --seq-len 128 --batch 8
}
host=$(SHARDSTREAM_PINNED=0 LD_LIBRARY_PATH="$libs" run_example 2>&1)
grep -q "batches stay on the host" <<<"$host" || { echo "example (host): $host"; exit 1; }
grep -q "^epoch 1: " <<<"$host" || { echo "example (host): $host"; exit 1; }
if [[ -n "$stub_dir" ]]; then
  dev=$(FAKE_CUDART_REPORT=1 LD_LIBRARY_PATH="$stub_dir:$libs" run_example 2>&1)
  grep -q "cudaMemcpyAsync" <<<"$dev" || { echo "example (cuda): $dev"; exit 1; }
  grep -q "^epoch 1: " <<<"$dev" || { echo "example (cuda): $dev"; exit 1; }
  grep -q "cuda_pinned" <<<"$dev" || { echo "example (cuda): $dev"; exit 1; }
  grep -q "^epoch 1: the last batch's .* bytes read back from the device match" <<<"$dev" ||
    { echo "example (cuda): $dev"; exit 1; }
  # Every batch tensor copied: nonzero copies, and every pinned slot freed.
  report=$(grep "^fake_cudart:" <<<"$dev")
  read -r _ allocs _ frees _ copies _ bytes _ <<<"$report"
  if (( copies == 0 || allocs == 0 || allocs != frees )); then echo "example (cuda): $dev"; exit 1; fi
  echo "example: host and stand-in CUDA runs ok ($report)"
fi
