"""What the equal-batches cut leaves out of an epoch, by topology.

With tokens.equal_batches (the default) every consumer (rank x DataLoader
worker) returns the smallest consumer's batch count, so the longer shares
lose their last documents for that epoch. This writes a data set of
documents of uneven length, runs every consumer of each topology for one
epoch and reports, from each loader's stats(), the documents and tokens cut
and their share of the epoch's tokens (docs/pipeline.md quotes it).

    python benchmarks/equal_batches_cut.py [--docs 3000] [--json]
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np

import shardstream


def write_documents(root, docs, seed=0):
    rng = np.random.default_rng(seed)
    total = 0
    with shardstream.ShardWriter(root, max_samples=300, write_index=True) as w:
        for i in range(docs):
            n = int(rng.integers(20, 400))
            total += n
            w.write({"__key__": f"d{i:05d}", "tokens.npy": rng.integers(1, 1000, n, dtype=np.int32)})
    return os.path.join(root, "manifest.jsonl"), total


def cut_for(manifest, ranks, workers, seq_len, batch_size):
    tokens = {"field": "tokens.npy", "seq_len": seq_len, "eod_token": 0}
    out = {"ranks": ranks, "workers": workers, "documents": 0, "cut_documents": 0,
           "cut_tokens": 0}
    for r in range(ranks):
        for w in range(workers):
            with shardstream.Loader(manifest, batch_size=batch_size, seed=1, tokens=tokens,
                                    rank=r, world_size=ranks, worker=w,
                                    num_workers=workers) as lo:
                for _ in lo:
                    pass
                s = lo.stats()
                out["documents"] += lo.samples_per_epoch
                out["cut_documents"] += s["cut_samples"]
                out["cut_tokens"] += s["cut_tokens"]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=3000)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        manifest, total = write_documents(tmp, a.docs)
        rows = [cut_for(manifest, r, w, a.seq_len, a.batch_size)
                for r, w in ((1, 2), (2, 2), (4, 2), (8, 2))]
    for row in rows:
        row["token_share"] = row["cut_tokens"] / total
    if a.json:
        print(json.dumps({"documents": a.docs, "tokens": total, "rows": rows}))
        return
    print(f"{a.docs} documents, {total} tokens, seq_len {a.seq_len}, batch {a.batch_size}")
    for row in rows:
        print(f"{row['ranks']} ranks x {row['workers']} workers: cut {row['cut_documents']} of "
              f"{row['documents']} documents, {row['cut_tokens']} tokens "
              f"({100 * row['token_share']:.1f}% of the epoch's tokens)")


if __name__ == "__main__":
    sys.exit(main())
