#!/usr/bin/env bash
# The demo: makes a small data set, packs it into shards with a manifest,
# verifies sizes and checksums, lists a shard, reads everything back and
# prints the throughput against a plain read of the same files; then trains a
# small PyTorch model from shards served over loopback through the cache
# (examples/train_demo.py), and a small image classifier from JPEG shards
# decoded and cropped in the loader's C++ threads (examples/train_images_demo.py),
# and mixes two data sets on two torchrun "nodes" with node-local caches,
# interrupted with a sharded checkpoint and resumed (examples/mix_nodes_demo.py).
# Does its own set-up and build. Output goes to ${DEMO_DIR:-/tmp/shardstream-demo}.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target shardstream_cli >/dev/null
ss="$root/build/shardstream"
demo=${DEMO_DIR:-/tmp/shardstream-demo}
rm -rf "$demo"; mkdir -p "$demo"

echo "== 1. a sample tree: 2000 samples of 2048 int32 tokens, a caption and a label"
.venv/bin/python examples/make_sample_files.py "$demo/files" --samples 2000 --seq-len 2048
du -sh "$demo/files" | cut -f1

echo "== 2. pack into 4 MiB shards with a manifest"
"$ss" pack "$demo/files" "$demo/shards" --shard-size 4MiB
head -2 "$demo/shards/manifest.jsonl"
echo "... $(wc -l < "$demo/shards/manifest.jsonl") shards"

echo "== 3. verify sizes and checksums against the manifest"
"$ss" verify "$demo/shards/manifest.jsonl"

echo "== 4. the first samples of the first shard"
first=$(ls "$demo/shards"/*.tar | head -1)
("$ss" ls "$first" || true) | head -8

echo "== 5. read every sample back, against a plain read of the same files"
"$ss" bench "$demo/shards"/*.tar
echo "== 6. train a small PyTorch model from the shards (served over loopback, through the cache)"
.venv/bin/python -m pip install -q --no-build-isolation "$root"
(cd "$demo" && "$root/.venv/bin/python" "$root/examples/train_demo.py" --dir "$demo/train")
echo "== 7. train a small image classifier from JPEG shards, decoded and cropped in the loader's C++ threads"
(cd "$demo" && "$root/.venv/bin/python" "$root/examples/train_images_demo.py" --dir "$demo/images")
echo "== 8. mix two data sets by weight on two nodes (torchrun), each node's shards staying in its own cache;"
echo "      interrupted with a sharded checkpoint (torch.distributed.checkpoint through shardstream.dcp), resumed"
(cd "$demo" && "$root/.venv/bin/python" "$root/examples/mix_nodes_demo.py" --dir "$demo/mix")
echo "files in $demo"
