"""What a DataLoader's worker processes cost at an epoch's start: the time from
iter() to the first batch with 2 workers, forked or from a forkserver that has
imported torch and shardstream (docs/python.md, "DataLoader settings").

    python benchmarks/worker_start_benchmark.py [--runs 6]

Default options (shuffle on), non-persistent workers, so every epoch starts
its workers anew; the two start methods run interleaved, each over eight small
shards like the test suite's. Reports the median over the runs after the first,
and the first apart (a forkserver starts then).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time

import numpy as np
from torch.utils.data import DataLoader

import shardstream
from shardstream.torch import ShardDataset, passthrough


def make_shards(out_dir: str, nshards: int = 8, per_shard: int = 25, seq: int = 16) -> str:
    """Eight small shards (the test suite's): samples "s000123" with tokens.npy = int32
    [seq], cls and txt. The measure is the workers' start, not the data."""
    with shardstream.ShardWriter(out_dir, max_samples=per_shard) as w:
        for i in range(nshards * per_shard):
            w.write({"__key__": f"s{i:06d}", "tokens.npy": np.full(seq, i, dtype=np.int32),
                     "cls": i % 10, "txt": f"caption {i}"})
    return os.path.join(out_dir, "manifest.jsonl")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=6)
    args = ap.parse_args()
    multiprocessing.set_forkserver_preload(["torch", "shardstream.torch"])
    ds = ShardDataset(make_shards(tempfile.mkdtemp()), fields=["tokens.npy"], batch_size=10,
                      seed=1)
    first_batch = {}
    for method in ["fork", "forkserver"] * args.runs:
        dl = DataLoader(ds, batch_size=None, num_workers=2, collate_fn=passthrough,
                        multiprocessing_context=method)
        t = time.perf_counter()
        it = iter(dl)
        next(it)
        first_batch.setdefault(method, []).append(time.perf_counter() - t)
        for _ in it:
            pass
        del it, dl
    for method, s in first_batch.items():
        print(f"{method:>10}: first batch {statistics.median(s[1:]) * 1000:.0f} ms, median of "
              f"{len(s) - 1}; the first epoch {s[0] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
