#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz and runs,
# each for a bounded time: the tar reader fuzzer, seeded from our own shards
# (the golden bad shards and small shards made by GNU tar, bsdtar and
# `shardstream pack` in every format and compression, and document groups);
# the image decoding fuzzer, seeded with the test images (every colour mode
# of JPEG, PNG and WebP, and the bad ones); the field decoders (.npy, raw, labels, text,
# JSON) and the .idx parser; the manifest parsers; the resume state parsers; the
# MDS shard reader, seeded with shards MosaicML Streaming's MDSWriter wrote; the JSON Lines
# reader, seeded with rows of every JSON construct, plain and compressed.
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
nice cmake --build "$build" -j2 --target tar_reader_fuzz image_decode_fuzz field_decode_fuzz \
  manifest_fuzz resume_state_fuzz mds_reader_fuzz jsonl_reader_fuzz shardstream_cli

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

# Document groups (docs/shards.md) as convert writes them, with their
# per-document index.
if [[ ! -f "$seeds/groups.tar" ]]; then
  grp="$(mktemp -d)"
  "$build/shardstream" bench-loader --make-tokens "$grp/g" --layout compact --count 300 \
    --mean-tokens 40 --tokens tokens.npy --batch-size 2 --seq-len 64 --runs 1 >/dev/null
  cp "$grp/g/shard-000000.tar" "$seeds/groups.tar"
  cp "$grp/g/shard-000000.tar.idx" "$seeds/groups.tar.idx"
  rm -rf "$grp"
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

# Field decoders and the .idx parser: the first byte picks which
# (field_decode_fuzz.cc); seeds are small valid and broken values of each.
field_seeds="$build/fuzz-seeds/field"
mkdir -p "$field_seeds"
python3 - "$field_seeds" <<'PY'
import io, struct, sys, os
out = sys.argv[1]
def npy(shape, dtype="<i4", body=None):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (dtype, shape)
    header = header.ljust(118) + "\n"
    n = 1
    for d in shape: n *= d
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + (body or b"\x01" * (4 * n))
seeds = {
    "npy-1d": b"\x00" + npy((5,)), "npy-2d": b"\x01" + npy((2, 3)),
    "npy-short": b"\x00" + npy((9,), body=b"\x01" * 7), "raw-i32": b"\x02" + b"\x01\x02\x03\x04" * 3,
    "raw-f32": b"\x03" + b"\x00" * 32, "label": b"\x04" + b" 42\n", "label-bad": b"\x04-x",
    "text": b"\x05caf\xc3\xa9", "text-bad": b"\x05ab\xc3", "json": b'\x06{"a": [1, 2.5, "x"], "b": null}',
    "json-bad": b'\x06{"a": [1, 2,}', "json-deep": b"\x06" + b"[" * 600 + b"]" * 600,
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
PY
idx_src="$(mktemp -d)"
for f in "$seeds"/shard-00000[01].tar "$seeds"/pack.tar.zst; do
  cp "$f" "$idx_src/" && "$build/shardstream" index "$idx_src/$(basename "$f")" >/dev/null &&
    { printf '\007'; cat "$idx_src/$(basename "$f").idx"; } > "$field_seeds/idx-$(basename "$f")"
done
rm -rf "$idx_src"
field_corpus="$build/fuzz-corpus/field"
mkdir -p "$field_corpus"
"$build/tests/fuzz/field_decode_fuzz" "$field_corpus" "$field_seeds" \
  -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
  -artifact_prefix="$artifacts" -print_final_stats=1

# Manifests (JSON Lines, CSV, JSON) and resume states (JSON and binary).
# A brace pattern may expand to 10,000,000 names (brace.cc), about 2 GB of
# strings: the manifest fuzzer gets room for that.
for target in manifest resume_state; do
  seeds_dir="$root/tests/data/fuzz/$target"
  corpus_dir="$build/fuzz-corpus/$target"
  mkdir -p "$corpus_dir"
  "$build/tests/fuzz/${target}_fuzz" "$corpus_dir" $([[ -d "$seeds_dir" ]] && echo "$seeds_dir") \
    -max_total_time="$seconds" -rss_limit_mb=$([[ $target == manifest ]] && echo 4096 || echo 2048) \
    -timeout=10 -max_len=65536 -artifact_prefix="$artifacts" -print_final_stats=1
done

# MDS shards: the first byte picks the layout (mds_reader_fuzz.cc): 0 tokens,
# 1 bytes + int, 2 arrays, json, str, jpeg, 3 str_int, pkl, pil, uint8.
mds_seeds="$build/fuzz-seeds/mds"
if [[ ! -d "$mds_seeds" ]]; then
  mkdir -p "$mds_seeds"
  "$root/.venv/bin/python" - "$mds_seeds" "$root/tests/python" <<'PY'
import os, shutil, sys, tempfile
import numpy as np
from PIL import Image
sys.path.insert(0, sys.argv[2])
from streaming_import import import_streaming
MDSWriter = import_streaming().MDSWriter
out = sys.argv[1]
sets = [
    (0, {"tokens": "ndarray:int32"}, lambda i: {"tokens": np.arange(i + 1, dtype=np.int32)}),
    (1, {"data": "bytes", "label": "int"}, lambda i: {"data": bytes([i]) * i, "label": i}),
    (2, {"any": "ndarray", "f": "float32", "fixed": "ndarray:uint16:2,3", "img": "jpeg",
         "meta": "json", "text": "str"},
     lambda i: {"any": np.ones((2, i + 1)), "f": i / 2, "fixed": np.zeros((2, 3), np.uint16),
                "img": Image.new("RGB", (4, 4)), "meta": {"i": i}, "text": "t" * i}),
    (3, {"n": "str_int", "obj": "pkl", "pix": "pil", "small": "uint8"},
     lambda i: {"n": i, "obj": [i], "pix": Image.new("L", (2, 3)), "small": i}),
]
for which, cols, make in sets:
    d = tempfile.mkdtemp()
    with MDSWriter(out=d, columns=cols) as w:
        for i in range(6):
            w.write(make(i))
    with open(os.path.join(d, "shard.00000.mds"), "rb") as f:
        data = f.read()
    for first in range(3):  # the second byte's bits pick where reading starts
        with open(os.path.join(out, f"set{which}-{first}"), "wb") as f:
            f.write(bytes([which | (first << 2)]) + data)
    shutil.rmtree(d)
PY
fi
mds_corpus="$build/fuzz-corpus/mds"
mkdir -p "$mds_corpus"
"$build/tests/fuzz/mds_reader_fuzz" "$mds_corpus" "$mds_seeds" \
  -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=262144 \
  -artifact_prefix="$artifacts" -print_final_stats=1

# JSON Lines rows: every JSON construct, escapes, blank lines, a last line
# without its newline, and the same rows gzip- and zstd-compressed.
rows_seeds="$build/fuzz-seeds/jsonl"
if [[ ! -d "$rows_seeds" ]]; then
  mkdir -p "$rows_seeds"
  printf '%s\n' '{"text": "a \"q\" \\ \u00e9 \ud83d\ude00", "n": -12, "f": 1.5e-3}' \
    '' '{"o": {"a": [1, 2.0, true, false, null, {"b": []}]}, "s": ""}' '  ' \
    '{"url": "shard-000000.tar", "nsamples": 3}' > "$rows_seeds/rows.jsonl"
  printf '{"x": 1}\n[1]\n{"y": "unterminated\n{"z": 2}' > "$rows_seeds/bad.jsonl"
  gzip -c "$rows_seeds/rows.jsonl" > "$rows_seeds/rows.jsonl.gz"
  zstd -q -c "$rows_seeds/rows.jsonl" > "$rows_seeds/rows.jsonl.zst"
fi
rows_corpus="$build/fuzz-corpus/jsonl"
mkdir -p "$rows_corpus"
"$build/tests/fuzz/jsonl_reader_fuzz" "$rows_corpus" "$rows_seeds" \
  -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=131072 \
  -artifact_prefix="$artifacts" -print_final_stats=1
