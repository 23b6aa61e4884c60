"""Reading JSON Lines and Parquet rows: shardstream's ShardDataset against Hugging
Face `datasets` streaming (load_dataset("json"/"parquet", streaming=True)), on the same files,
shuffle on, each in its own process, rounds interleaved; medians of one epoch's
rate, peak RSS of the process tree, and the epoch's CPU seconds (the process and
its DataLoader workers; imports not counted).

Workload: rows {"text": about 1 KiB of text, "label": int, "meta": {...}} in 8
uncompressed .jsonl files. Both read "text" and "label" in batches of 256:
  shardstream  ShardDataset(dir, fields=["text", "label"], batch_size=256)
               and its dataloader() (its defaults: shuffle on, workers by cores)
  datasets     load_dataset("json", data_files=files, streaming=True)
               .shuffle(seed, buffer_size=1000) (its documented default buffer)
               under a torch DataLoader(batch_size=256, num_workers=cores), its
               default collate (lists of str, a tensor of labels)
Measured in rows per second. The first run of shardstream builds the files'
row indexes (<file>.idx); a warm-up run does it before the timed runs.

The same rows as Parquet (8 files written by pyarrow, its default row groups),
read the same two ways (load_dataset("parquet", ...)), and a third way: pyarrow
alone decoding the two columns batch by batch (iter_batches, no rows made), the
floor any reader built on Arrow C++ pays. shardstream reads Parquet through
pyarrow (see docs/formats.md): the gap to that floor is what making rows costs.

  python benchmarks/rows_benchmark.py [--runs 3] [--rows 200000]
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_common  # noqa: E402

BATCH = 256
FILES = 8


def files_of(root, ext=".jsonl"):
    return sorted(os.path.join(root, n) for n in os.listdir(root) if n.endswith(ext))


def write_set(root, rows):
    import random
    params = {"rows": rows, "v": 2}
    stamp = os.path.join(root, "params.json")
    if os.path.exists(stamp) and bench_common.read_json(stamp) == params:
        return
    import shutil
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    per = (rows + FILES - 1) // FILES
    for f in range(FILES):
        with open(os.path.join(root, f"part-{f:05d}.jsonl"), "w") as out:
            for i in range(f * per, min(rows, (f + 1) * per)):
                text = []
                n = 0
                while n < 1024:
                    w = rng.choice(words)
                    text.append(w)
                    n += len(w) + 1
                out.write(json.dumps({"text": " ".join(text), "label": i,
                                      "meta": {"source": "bench", "n": i % 7}}) + "\n")
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    os.makedirs(os.path.join(root, "parquet"))
    for f in files_of(root):
        name = os.path.basename(f).replace(".jsonl", ".parquet")
        pq.write_table(pj.read_json(f), os.path.join(root, "parquet", name))
    bench_common.write_json(stamp, params)


def child(cfg):
    import resource
    import torch
    lib, path, fmt = cfg["lib"], cfg["path"], cfg["format"]

    def cpu():  # this process and its reaped DataLoader workers
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    cpu0 = cpu()
    t0 = time.perf_counter()
    units = 0
    if lib == "arrow":
        import pyarrow.parquet as pq
        for f in files_of(path, ".parquet"):
            for b in pq.ParquetFile(f).iter_batches(columns=["text", "label"], batch_size=BATCH):
                units += b.num_rows
        dl = None
    elif lib == "shardstream":
        from shardstream.torch import ShardDataset
        ds = ShardDataset(path, fields=["text", "label"], batch_size=BATCH, seed=1)
        dl = ds.dataloader()
        for b in dl:
            units += len(b["label"])
    else:
        import datasets
        datasets.disable_progress_bars()
        ds = datasets.load_dataset("json" if fmt == "jsonl" else "parquet",
                                   data_files=files_of(path, "." + fmt), split="train", streaming=True)
        ds = ds.shuffle(seed=1, buffer_size=1000).select_columns(["text", "label"])
        dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=min(os.cpu_count(), FILES))
        for b in dl:
            units += len(b["label"])
    dt = time.perf_counter() - t0
    del dl  # its workers exit and are reaped: their CPU time counts
    print(json.dumps({"units": units, "seconds": dt, "rate": units / dt, "cpu_s": cpu() - cpu0}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--dir", default="/tmp/ss-bench-rows", help="data directory [/tmp/ss-bench-rows]")
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        child(json.loads(a.child))
        return
    write_set(a.dir, a.rows)
    contenders = []
    for fmt in ("jsonl", "parquet"):
        for lib in ("shardstream", "datasets") + (("arrow",) if fmt == "parquet" else ()):
            cfg = {"lib": lib, "format": fmt,
                   "path": a.dir if fmt == "jsonl" else os.path.join(a.dir, "parquet")}
            contenders.append(((fmt, lib), lib, [sys.executable, __file__, "--child", json.dumps(cfg)]))
    # Warm-up (not timed): shardstream's row indexes, the page cache for both.
    for _, _, cmd in contenders:
        bench_common.measure(cmd)
    skipped = {}

    def report(run, key, out):
        if isinstance(out, Exception):
            bench_common.log(f"run {run} {key}: failed: {out}")
            return str(out)
        bench_common.log(f"run {run} {key}: {out['rate']:,.0f}/s, {out['seconds']:.2f} s, "
                         f"cpu {out['cpu_s']:.1f} s, peak RSS {out['peak_rss'] / 2**20:.0f} MiB")

    results = bench_common.interleave(a.runs, contenders, skipped, report)
    summary = {}
    for fmt in ("jsonl", "parquet"):
        row = {}
        for lib in ("shardstream", "datasets", "arrow"):
            rs = results.get((fmt, lib), [])
            if not rs:
                continue
            row[lib] = {"rate": statistics.median(r["rate"] for r in rs),
                        "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                        "peak_rss_mib": statistics.median(r["peak_rss"] for r in rs) / 2**20,
                        "units_per_cpu_s": statistics.median(r["units"] / r["cpu_s"] for r in rs)}
            r = row[lib]
            print(f"{fmt:7s} {lib:12s} {r['rate']:>12,.0f} rows/s  cpu {r['cpu_s']:.1f} s  "
                  f"peak RSS {r['peak_rss_mib']:.0f} MiB")
        if "shardstream" in row and "datasets" in row:
            row["ratio"] = row["shardstream"]["rate"] / row["datasets"]["rate"]
            row["ratio_per_cpu_s"] = (row["shardstream"]["units_per_cpu_s"] /
                                      row["datasets"]["units_per_cpu_s"])
            print(f"{fmt:7s} shardstream / datasets: {row['ratio']:.1f}x "
                  f"({row['ratio_per_cpu_s']:.1f}x per CPU second)")
        if "shardstream" in row and "arrow" in row:
            row["of_arrow"] = row["shardstream"]["rate"] / row["arrow"]["rate"]
            print(f"{fmt:7s} shardstream / pyarrow decode alone: {row['of_arrow']:.2f}")
        summary[fmt] = row
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
