"""Text conversion throughput: text_to_shards on one process, on worker processes, and as Ray
tasks on a local Ray instance (engine="ray"), against Ray Data's own write_webdataset of the
same tokens, on the same JSON Lines files.

    .venv/bin/python benchmarks/convert_benchmark.py [--files 4] [--mb 12] [--runs 3]

Runs are interleaved; each row gives the median documents/s and tokens/s, and the ratio of
engine="ray" to the process pool of the same size measures Ray's overhead. The tokenizer is
a byte tokenizer (UTF-8 bytes), so the figures show what conversion costs apart from
tokenizing. LitData's optimize is not measured here (not installed in this environment).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def byte_tokenize(text):
    return np.frombuffer(text.encode("utf-8"), np.uint8)


def write_corpus(folder, files, mb):
    rng = np.random.default_rng(0)
    words = np.array("the a shard token stream of data model train loader object store node "
                     "cache epoch batch sample".split())
    paths, docs = [], 0
    for f in range(files):
        path = os.path.join(folder, f"part-{f:03d}.jsonl")
        size = 0
        with open(path, "w") as out:
            while size < mb << 20:
                line = json.dumps({"text": " ".join(rng.choice(words, int(rng.integers(50, 600))))})
                out.write(line + "\n")
                size += len(line) + 1
                docs += 1
        paths.append(path)
    return paths, docs


def ray_webdataset(paths, out):
    import ray.data

    def tokenize(row):
        ids = byte_tokenize(row["text"]).astype(np.int32)
        import io
        buf = io.BytesIO()
        np.save(buf, ids)
        return {"__key__": f"{hash(row['text']) & 0xffffffffffff:012x}",
                "tokens.npy": buf.getvalue()}

    ray.data.read_json(paths).map(tokenize).write_webdataset(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--mb", type=int, default=12, help="MiB of JSON Lines per file")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    import ray
    from shardstream import convert
    cpus = len(os.sched_getaffinity(0))
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    work = tempfile.mkdtemp(prefix="convert-bench-")
    try:
        paths, docs = write_corpus(work, args.files, args.mb)
        print(f"{args.files} files, {args.files * args.mb} MiB of JSON Lines, {docs} documents, "
              f"{cpus} CPUs, byte tokenizer")
        ways = {
            "text_to_shards, 1 process": dict(processes=1),
            f"text_to_shards, {cpus} processes (files)": dict(processes=cpus),
            f"text_to_shards, engine=ray, {cpus} CPUs (files)": dict(engine="ray"),
            "Ray Data write_webdataset (no manifest, no index)": None,
        }
        times = {name: [] for name in ways}
        tokens = {}
        for run in range(args.runs + 1):  # the first round warms Ray's workers up, not counted
            for name, kw in ways.items():
                out = os.path.join(work, "out")
                shutil.rmtree(out, ignore_errors=True)
                t0 = time.perf_counter()
                if kw is None:
                    ray_webdataset(paths, out)
                else:
                    s = convert.text_to_shards(paths, out, byte_tokenize, **kw)
                    tokens[name] = s["tokens"]
                if run:
                    times[name].append(time.perf_counter() - t0)
        base = statistics.median(times[f"text_to_shards, {cpus} processes (files)"])
        print(f"{'way':<52} {'docs/s':>10} {'M tokens/s':>11} {'vs pool':>8}  runs (s)")
        for name, ts in times.items():
            med = statistics.median(ts)
            ntok = tokens.get(name, max(tokens.values()))
            print(f"{name:<52} {docs / med:>10,.0f} {ntok / med / 1e6:>11.1f} {base / med:>8.2f}  "
                  + " ".join(f"{t:.2f}" for t in ts))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        ray.shutdown()


if __name__ == "__main__":
    main()
