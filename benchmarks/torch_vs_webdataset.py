"""shardstream vs WebDataset, both feeding a torch DataLoader from the same shards.

    python benchmarks/torch_vs_webdataset.py [--dir /tmp/ss-bench] [--runs 3]

Two data sets: "tokens" (samples of 2048 int32 tokens as .npy, batches
[256, 2048] int32) and "1k" (samples of 256 int32 = 1 KiB, batches [256, 256]).
WebDataset: wds.WebDataset(...).decode().to_tuple().batched(256) under a
DataLoader with num_workers=2 and pin_memory=True (its recommended setup).
shardstream: ShardDataset(batch_size=256) under a DataLoader with
num_workers=0 and collate_fn=passthrough (its recommended setup; C++ threads
do the work, buffers are already pinned when CUDA exists). With the
environment variable SS_DEFAULT_COLLATE=1 the DataLoader keeps its default
collate_fn instead.

Each configuration runs in a fresh process; the driver samples the RSS of
that process and all its children every 5 ms (/proc) for the peak memory of
the whole process tree, and compares it with a process that only imports
torch. Reported: batches/s over whole epochs (after the first batch), time to
first batch, peak tree RSS and its excess over `import torch`. Medians of
--runs runs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

BATCH = 256


def make_data(root: str, kind: str, samples: int) -> str:
    import numpy as np
    import shardstream
    out = os.path.join(root, kind)
    manifest = os.path.join(out, "manifest.jsonl")
    if os.path.exists(manifest):
        return manifest
    seq = 2048 if kind == "tokens" else 256
    rng = np.random.default_rng(0)
    with shardstream.ShardWriter(out, max_bytes="64MiB") as w:
        for i in range(samples):
            w.write({"__key__": f"s{i:08d}",
                     "tokens.npy": rng.integers(0, 50000, size=seq, dtype=np.int32)})
    return manifest


def shard_urls(manifest: str):
    d = os.path.dirname(manifest)
    with open(manifest) as f:
        return [os.path.join(d, json.loads(line)["url"]) for line in f if line.strip()]


def run_one(lib: str, manifest: str, epochs: int, seq: int) -> dict:
    """Runs in the child process: iterates `epochs` epochs, returns timings."""
    import torch
    t_start = time.perf_counter()
    if lib == "webdataset":
        import webdataset as wds
        ds = (wds.WebDataset(shard_urls(manifest), shardshuffle=False, empty_check=False)
              .decode().to_tuple("tokens.npy").batched(BATCH, partial=True))
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, pin_memory=True)
    else:
        from shardstream.torch import ShardDataset
        ds = ShardDataset(manifest, fields=["tokens.npy"], batch_size=BATCH, shuffle_buffer=0,
                          seed=0)
        from shardstream.torch import passthrough
        collate = {} if os.environ.get("SS_DEFAULT_COLLATE") else {"collate_fn": passthrough}
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0, **collate)
    first = None
    batches = 0
    t_after_first = None
    for epoch in range(epochs):
        if lib != "webdataset":
            ds.set_epoch(epoch)
        for b in dl:
            x = b[0] if isinstance(b, (tuple, list)) else b["tokens.npy"]
            if first is None:
                first = time.perf_counter() - t_start
                t_after_first = time.perf_counter()
                assert x.shape[1] == seq and x.dtype == torch.int32, (x.shape, x.dtype)
            else:
                batches += 1
            del b, x
    seconds = time.perf_counter() - t_after_first
    return {"first_batch_s": first, "batches": batches, "batches_per_s": batches / seconds}


def tree_rss(pid: int) -> int:
    """RSS bytes of pid and all its descendants."""
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def measure(cmd) -> tuple:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.005)

    t = threading.Thread(target=sample)
    t.start()
    out, _ = proc.communicate()
    done.set()
    t.join()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed")
    return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/ss-bench")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--token-samples", type=int, default=8192)
    ap.add_argument("--small-samples", type=int, default=65536)
    ap.add_argument("--epochs-ours", type=int, default=16,
                    help="epochs shardstream reads of the token set (4x fewer of the 1 KiB set)")
    ap.add_argument("--child", nargs=4, metavar=("LIB", "MANIFEST", "EPOCHS", "SEQ"))
    args = ap.parse_args()
    if args.child:
        lib, manifest, epochs, seq = args.child
        print(json.dumps(run_one(lib, manifest, int(epochs), int(seq))))
        return
    os.makedirs(args.dir, exist_ok=True)
    me = os.path.abspath(__file__)
    base = [measure([sys.executable, "-c", "import torch, time; time.sleep(0.3); print('{}')"])[1]
            for _ in range(args.runs)]
    torch_rss = statistics.median(base)
    print(f"import torch alone: peak RSS {torch_rss / 2**20:.0f} MiB")
    rows = []
    for kind, samples, seq in (("tokens", args.token_samples, 2048),
                               ("1k", args.small_samples, 256)):
        manifest = make_data(args.dir, kind, samples)
        result = {}
        ours = args.epochs_ours if kind == "tokens" else max(1, args.epochs_ours // 4)
        for lib, epochs in (("webdataset", 1), ("shardstream", ours)):
            runs = [measure([sys.executable, me, "--child", lib, manifest, str(epochs), str(seq)])
                    for _ in range(args.runs)]
            med = {k: statistics.median(r[0][k] for r in runs)
                   for k in ("batches_per_s", "first_batch_s")}
            med["peak_rss"] = statistics.median(r[1] for r in runs)
            per_run = ", ".join(f"{r[0]['batches_per_s']:.0f}" for r in runs)
            result[lib] = med
            print(f"{kind:6s} {lib:11s} {med['batches_per_s']:9.1f} batches/s  first batch "
                  f"{med['first_batch_s'] * 1000:7.1f} ms  peak tree RSS "
                  f"{med['peak_rss'] / 2**20:6.0f} MiB (+{(med['peak_rss'] - torch_rss) / 2**20:.0f}"
                  f" MiB over import torch)  [runs: {per_run}]", flush=True)
        speedup = result["shardstream"]["batches_per_s"] / result["webdataset"]["batches_per_s"]
        print(f"{kind:6s} speed-up {speedup:.1f}x")
        rows.append((kind, result, speedup))
    print(json.dumps({"import_torch_rss": torch_rss,
                      "results": [{"kind": k, **r, "speedup": s} for k, r, s in rows]}))


if __name__ == "__main__":
    main()
