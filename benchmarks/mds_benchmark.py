"""Reading a MosaicML Streaming (MDS) set: shardstream's ShardDataset against
Streaming's own StreamingDataset, on the same set written by Streaming's
MDSWriter, shuffle on, each in its own process, rounds interleaved; medians of
one epoch's rate, peak RSS of the process tree, and the epoch's CPU seconds
(the process and its DataLoader workers; imports not counted).

Workloads:
  tokens  documents of 256..2047 int32 tokens (column "tokens": ndarray:int32),
          zstd-compressed shards. shardstream packs them into [batch, 2048]
          token batches (its defaults otherwise); Streaming yields documents
          through a torch DataLoader whose collate concatenates a batch's tokens.
          Measured in tokens per second.
  1k      1 KiB samples (column "data": bytes) with an int label, uncompressed.
          shardstream batches them (batch_size 256, defaults otherwise);
          Streaming through a DataLoader of batch_size 256 (a list collate:
          bytes do not stack). Samples per second.

Streaming runs as its docs set it up: StreamingDataset(local=..., shuffle=True,
batch_size=B) under a DataLoader with num_workers = the machine's cores.

  python benchmarks/mds_benchmark.py [--runs 3] [--docs 20000] [--samples 200000]
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
import bench_common  # noqa: E402

SEQ = 2048
BATCH_1K = 256
BATCH_DOCS = 8


def write_sets(root, docs, samples):
    import numpy as np
    from streaming_import import import_streaming
    streaming = import_streaming()
    params = {"docs": docs, "samples": samples, "v": 1}
    stamp = os.path.join(root, "params.json")
    if os.path.exists(stamp) and bench_common.read_json(stamp) == params:
        return
    import shutil
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(0)
    with streaming.MDSWriter(out=os.path.join(root, "tokens"), columns={"tokens": "ndarray:int32"},
                             compression="zstd", size_limit=1 << 26) as w:
        for i in range(docs):
            w.write({"tokens": rng.integers(1, 50000, int(rng.integers(256, 2048)), dtype=np.int32)})
    payload = rng.integers(0, 255, 1024 * 64, dtype=np.uint8).tobytes()
    with streaming.MDSWriter(out=os.path.join(root, "1k"), columns={"data": "bytes", "label": "int"},
                             size_limit=1 << 26) as w:
        for i in range(samples):
            at = (i * 1024) % (len(payload) - 1024)
            w.write({"data": payload[at:at + 1024], "label": i})
    bench_common.write_json(stamp, params)


def child(cfg):
    import resource
    import torch
    lib, work, path = cfg["lib"], cfg["work"], cfg["path"]

    def cpu():  # this process and its reaped DataLoader workers
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    cpu0 = cpu()
    t0 = time.perf_counter()
    units = 0
    if lib == "shardstream":
        from shardstream.torch import ShardDataset
        if work == "tokens":
            ds = ShardDataset(path, tokens={"field": "tokens", "seq_len": SEQ, "layout": "pack"},
                              batch_size=BATCH_DOCS, seed=1)
            dl = ds.dataloader()
            for b in dl:
                units += int(b["tokens"].numel())
        else:
            ds = ShardDataset(path, fields=["data", "label"], batch_size=BATCH_1K, seed=1)
            dl = ds.dataloader()
            for b in dl:
                units += len(b["label"])
    else:
        from streaming_import import import_streaming
        streaming = import_streaming()
        import numpy as np
        workers = os.cpu_count()
        if work == "tokens":
            ds = streaming.StreamingDataset(local=path, shuffle=True, shuffle_seed=1,
                                            batch_size=BATCH_DOCS)
            dl = torch.utils.data.DataLoader(
                ds, batch_size=BATCH_DOCS, num_workers=workers,
                collate_fn=lambda rows: torch.from_numpy(np.concatenate([r["tokens"] for r in rows])))
            for b in dl:
                units += int(b.numel())
        else:
            ds = streaming.StreamingDataset(local=path, shuffle=True, shuffle_seed=1,
                                            batch_size=BATCH_1K)
            dl = torch.utils.data.DataLoader(ds, batch_size=BATCH_1K, num_workers=workers,
                                             collate_fn=lambda rows: rows)
            for b in dl:
                units += len(b)
    dt = time.perf_counter() - t0
    del dl  # its workers exit and are reaped: their CPU time counts
    print(json.dumps({"units": units, "seconds": dt, "rate": units / dt, "cpu_s": cpu() - cpu0}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--samples", type=int, default=200000)
    ap.add_argument("--dir", default="/tmp/ss-bench-mds", help="data directory [/tmp/ss-bench-mds]")
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        child(json.loads(a.child))
        return
    write_sets(a.dir, a.docs, a.samples)
    contenders = []
    for work in ("tokens", "1k"):
        for lib in ("shardstream", "streaming"):
            cfg = {"lib": lib, "work": work, "path": os.path.join(a.dir, work)}
            contenders.append(((work, lib), lib, [sys.executable, __file__, "--child", json.dumps(cfg)]))
    skipped = {}

    def report(run, key, out):
        if isinstance(out, Exception):
            bench_common.log(f"run {run} {key}: failed: {out}")
            return str(out)
        bench_common.log(f"run {run} {key}: {out['rate']:,.0f}/s, {out['seconds']:.2f} s, "
                         f"cpu {out['cpu_s']:.1f} s, peak RSS {out['peak_rss'] / 2**20:.0f} MiB")

    results = bench_common.interleave(a.runs, contenders, skipped, report)
    summary = {}
    for work, unit in (("tokens", "tokens/s"), ("1k", "samples/s")):
        row = {}
        for lib in ("shardstream", "streaming"):
            rs = results.get((work, lib), [])
            if not rs:
                continue
            row[lib] = {"rate": statistics.median(r["rate"] for r in rs),
                        "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                        "peak_rss_mib": statistics.median(r["peak_rss"] for r in rs) / 2**20,
                        "units_per_cpu_s": statistics.median(r["units"] / r["cpu_s"] for r in rs)}
        if "shardstream" in row and "streaming" in row:
            row["ratio"] = row["shardstream"]["rate"] / row["streaming"]["rate"]
            row["ratio_per_cpu_s"] = (row["shardstream"]["units_per_cpu_s"] /
                                      row["streaming"]["units_per_cpu_s"])
        summary[work] = row
        for lib, r in row.items():
            if isinstance(r, dict):
                print(f"{work:6s} {lib:12s} {r['rate']:>14,.0f} {unit}  cpu {r['cpu_s']:.1f} s  "
                      f"peak RSS {r['peak_rss_mib']:.0f} MiB")
        if "ratio" in row:
            print(f"{work:6s} shardstream / Streaming: {row['ratio']:.1f}x "
                  f"({row['ratio_per_cpu_s']:.1f}x per CPU second)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
