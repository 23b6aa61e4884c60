"""Writes a small WebDataset-style sample tree: for each sample KEY,
KEY.tokens.npy (int32 token ids), KEY.txt (text) and KEY.cls (a label).

    python examples/make_sample_files.py OUT_DIR [--samples N] [--seq-len L] [--seed S]

Deterministic for a given seed, so the demo's checksums repeat.
"""

import argparse
import os

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out_dir, exist_ok=True)
    words = ["tensor", "shard", "cache", "epoch", "gradient", "batch", "token", "stream"]
    for i in range(args.samples):
        key = os.path.join(args.out_dir, f"sample{i:07d}")
        np.save(key + ".tokens.npy", rng.integers(0, 50257, size=args.seq_len, dtype=np.int32))
        with open(key + ".txt", "w") as f:
            f.write(" ".join(rng.choice(words, size=12)) + "\n")
        with open(key + ".cls", "w") as f:
            f.write(str(int(rng.integers(0, 10))))


if __name__ == "__main__":
    main()
