#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz and runs,
# each for a bounded time: the tar reader fuzzer, seeded from our own shards
# (the golden bad shards and small shards made by GNU tar, bsdtar and
# `shardstream pack` in every format and compression), then the image
# decoding fuzzer, seeded with the test images (every colour mode of JPEG,
# PNG and WebP, and the bad ones).
#
#   scripts/fuzz.sh [SECONDS]      (default 60, per fuzzer)
#
# Exits non-zero if the fuzzer finds a crash, a sanitizer report, a hang or
# an out-of-memory; the reproducer is left in build-fuzz/fuzz-artifacts/.
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"

if [[ ! -x "$build/tests/fuzz/tar_reader_fuzz" || ! -f "$build/build.ninja" ]]; then
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDSTREAM_BUILD_FUZZERS=ON \
    -DSHARDSTREAM_SANITIZE=address,undefined -DSHARDSTREAM_SHARED=OFF \
    -DSHARDSTREAM_BUILD_BENCHMARKS=OFF -DSHARDSTREAM_BUILD_PYTHON=OFF >/dev/null
fi
nice cmake --build "$build" -j2 --target tar_reader_fuzz image_decode_fuzz shardstream_cli

seeds="$build/fuzz-seeds/tar"
if [[ ! -d "$seeds" ]]; then
  mkdir -p "$seeds"
  cp "$root"/tests/data/bad_shards/*.tar "$seeds/"
  src="$(mktemp -d)"
  trap 'rm -rf "$src"' EXIT
  mkdir -p "$src/d/$(printf 'l%.0s' {1..120})"
  printf 'x' > "$src/d/a.jpg"; printf '7' > "$src/d/a.cls"; : > "$src/d/b.txt"
  printf 'long' > "$src/d/$(printf 'l%.0s' {1..120})/c.bin"
  ln -s a.jpg "$src/d/link.jpg"
  (cd "$src" && for f in gnu pax ustar; do
     tar --format=$f -cf "$seeds/gnu-$f.tar" d 2>/dev/null || true
     tar --format=$f --zstd -cf "$seeds/gnu-$f.tar.zst" d 2>/dev/null || true
     tar --format=$f -czf "$seeds/gnu-$f.tar.gz" d 2>/dev/null || true
   done
   for f in pax ustar gnutar; do
     bsdtar --format $f -cf "$seeds/bsd-$f.tar" d 2>/dev/null || true
   done)
  "$build/shardstream" pack "$src/d" "$src/packed" --max-samples 2 >/dev/null
  "$build/shardstream" pack "$src/d" "$src/packed-zstd" --compress zstd >/dev/null
  cp "$src"/packed/*.tar "$seeds/"
  cp "$src"/packed-zstd/shard-000000.tar.zst "$seeds/pack.tar.zst"
fi

# Skips are logged at warning level; the fuzzer would drown in them.
export SHARDSTREAM_LOG_LEVEL=off
corpus="$build/fuzz-corpus/tar"
artifacts="$build/fuzz-artifacts/"
mkdir -p "$corpus" "$artifacts"
# -rss_limit_mb bounds memory per input; -timeout flags hangs (seconds).
"$build/tests/fuzz/tar_reader_fuzz" "$corpus" "$seeds" \
  -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=1048576 \
  -artifact_prefix="$artifacts" -print_final_stats=1

# Images: the first byte of an input picks the geometry (image_decode_fuzz.cc).
image_seeds="$build/fuzz-seeds/image"
mkdir -p "$image_seeds"
for f in "$root"/tests/data/images/*.jpg "$root"/tests/data/images/*.png \
         "$root"/tests/data/images/*.webp; do
  for g in 0 1 2 3; do
    { printf "\\$(printf '%03o' "$g")"; cat "$f"; } > "$image_seeds/$(basename "$f").$g"
  done
done
image_corpus="$build/fuzz-corpus/image"
mkdir -p "$image_corpus"
"$build/tests/fuzz/image_decode_fuzz" "$image_corpus" "$image_seeds" \
  -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=262144 \
  -artifact_prefix="$artifacts" -print_final_stats=1
