"""Compact token shards against one document per sample: bytes per token and
loader speed, in the same sitting, on the same documents.

Converts the same short documents (default 400,000 of 100-300 tokens, mean
200, and the same count of exactly 200) with shardstream.convert in both
layouts (`layout="compact"`, the default: document groups; and
`layout="documents"`) and both common dtypes, reports the tar bytes per
token and the share of the shard bytes that are tokens, then runs
`shardstream bench-loader` over the int32 sets ([256, 2048] packed batches
with document metadata, medians of --runs epochs after a warm-up) with no
sample shuffle and with the Loader's default shuffle_buffer of 1000.
docs/convert.md quotes it.

    python benchmarks/compact_tokens.py [--docs 400000] [--runs 3] [--cli build/shardstream]
        [--json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from shardstream import convert


def doc_ids(text):
    """A document's ids from its text "<n> <length>": deterministic, quick to make."""
    n, length = (int(v) for v in text.split())
    return (np.arange(length, dtype=np.int64) * 7 + n) % 60000 + 1


def texts(count, exact):
    for n in range(count):
        length = 200 if exact else 100 + (n * 7919) % 201
        yield f"{n} {length}"


def tar_bytes(out):
    return sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".tar"))


def bench_loader(cli, manifest, runs, shuffle):
    cmd = [cli, "bench-loader", manifest, "--tokens", "tokens.npy", "--runs", str(runs),
           "--shuffle", str(shuffle), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=400_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                 "shardstream"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows, speed = [], []
    with tempfile.TemporaryDirectory() as root:
        manifests = {}
        for exact in (False, True):
            for dtype, size in (("uint16", 2), ("int32", 4)):
                sizes = {}
                for layout in ("compact", "documents"):
                    out = os.path.join(root, f"{layout}-{dtype}-{int(exact)}")
                    s = convert.text_to_shards(texts(a.docs, exact), out, doc_ids, dtype=dtype,
                                               layout=layout, processes=1)
                    sizes[layout] = tar_bytes(out)
                    tokens = s["tokens"]
                    if dtype == "int32" and not exact:
                        manifests[layout] = s["manifest"]
                for layout in ("compact", "documents"):
                    rows.append({"documents": "200 tokens" if exact else "100-300 tokens",
                                 "dtype": dtype, "layout": layout, "tokens": tokens,
                                 "bytes": sizes[layout],
                                 "bytes_per_token": sizes[layout] / tokens,
                                 "payload": tokens * size / sizes[layout]})
        for shuffle in (0, 1000):
            for layout in ("compact", "documents"):
                r = bench_loader(a.cli, manifests[layout], a.runs, shuffle)
                speed.append({"layout": layout, "shuffle": shuffle,
                              "batches_per_s": r["batches_per_s"],
                              "tokens_per_s": r["batches_per_s"] * r["batch_size"] * r["seq_len"],
                              "file_gb_per_s": r["loader_file_gb_per_s"],
                              "cpu_cores": r["loader_cpu_cores"],
                              "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
                              "direct_samples": r["direct_samples"]})
    if a.json:
        json.dump({"sizes": rows, "speed": speed}, sys.stdout, indent=1)
        print()
        return
    print("| documents | dtype | layout | bytes per token | tokens / shard bytes |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['documents']} | {r['dtype']} | {r['layout']} | {r['bytes_per_token']:.2f} | "
              f"{r['payload']:.1%} |")
    print()
    print("| layout | shuffle_buffer | batches/s | tokens/s | shard GB/s | CPU cores | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for r in speed:
        print(f"| {r['layout']} | {r['shuffle']} | {r['batches_per_s']:.0f} | "
              f"{r['tokens_per_s'] / 1e6:.0f} M | {r['file_gb_per_s']:.2f} | "
              f"{r['cpu_cores']:.2f} | {r['peak_rss_mib']:.0f} MiB |")


if __name__ == "__main__":
    main()
