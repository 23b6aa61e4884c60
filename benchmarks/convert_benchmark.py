"""Conversion throughput on one machine: text and an ImageFolder, by shardstream on one process,
on worker processes and as Ray tasks on a local Ray instance (engine="ray"), against Ray Data's
own write_webdataset and LitData's optimize of the same input.

    .venv/bin/python benchmarks/convert_benchmark.py [--files 4] [--mb 12] [--images 20000]
                                                     [--runs 3] [--what text,images]

Runs are interleaved; each row gives the median items/s (documents or images), items/s per
worker core, and the ratio to shardstream's process pool of the same size (for engine="ray":
Ray's overhead). Text: JSON Lines, a byte tokenizer (UTF-8 bytes), so the figures show what
conversion costs apart from tokenizing; LitData as its pretraining recipe does it (a function
of a file yielding each document's tokens as a tensor, TokensLoader, chunk_size 2049 * 8012). Images: an ImageFolder tree of JPEGs (quality 90, long
side 256, 100 classes), stored as they are (no re-encoding) in 32 MiB shards by every way: `shardstream pack
--image-folder` (the command, one process, where it is built), convert.images_to_shards, Ray
Data's read_binary_files + write_webdataset (no manifest, no index, no labels file), and
LitData's optimize as its ImageNet recipe does it (a PIL image, whose file bytes its JPEG
serializer stores, and the label; chunk_bytes 64MB, num_workers = the CPUs), which runs in a
process of its own (it forks its workers, which must not inherit Ray's threads). LitData:
`bash scripts/bench_env.sh --peers` installs it (--no-deps: its requirements would replace
torch); a way that cannot run is printed with the reason.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
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


def write_image_folder(folder, n, classes=100):
    """n JPEGs (quality 90, long side 256, the short side 170-256) in <class>/<image>.jpg,
    smooth gradients plus noise, so that they compress as photographs do (about 20-30 KB)."""
    from PIL import Image
    rng = np.random.default_rng(0)
    total = 0
    for i in range(n):
        c = i % classes
        d = os.path.join(folder, f"n{c:08d}")
        if i < classes:
            os.makedirs(d, exist_ok=True)
        short = int(rng.integers(170, 257))
        h, w = (256, short) if i % 2 else (short, 256)
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * rng.uniform(0.3, 1.0) + y * rng.uniform(0, 0.7)) % 256,
                         (y * rng.uniform(0.3, 1.0)) % 256,
                         np.full((h, w), rng.uniform(0, 255))], -1)
        pixels = np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        path = os.path.join(d, f"img_{i:06d}.jpg")
        Image.fromarray(pixels).save(path, format="JPEG", quality=90)
        total += os.path.getsize(path)
    return total


def image_files(folder):
    classes = sorted(os.listdir(folder))
    return [(os.path.join(folder, c, name), label) for label, c in enumerate(classes)
            for name in sorted(os.listdir(os.path.join(folder, c)))]


def litdata_prepare(item):
    from PIL import Image
    path, label = item
    return {"image": Image.open(path), "class": label}


def litdata_optimize(folder, out, workers):
    """LitData's optimize, in a process of its own; returns its seconds."""
    code = ("import json, sys, time\n"
            f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
            "import convert_benchmark as cb\n"
            "from litdata import optimize\n"
            "if __name__ == '__main__':\n"
            f"    files = cb.image_files({folder!r})\n"
            "    t0 = time.perf_counter()\n"
            f"    optimize(fn=cb.litdata_prepare, inputs=files, output_dir={out!r}, "
            f"chunk_bytes='64MB', num_workers={workers}, verbose=False)\n"
            "    print(json.dumps({'seconds': time.perf_counter() - t0}))\n")
    return _timed_subprocess(code)


def litdata_tokenize(path):
    """LitData's pretraining recipe: a function of a file that yields each document's tokens
    as a tensor, written with chunk_size in tokens and read back with TokensLoader."""
    import torch
    with open(path) as f:
        for line in f:
            yield torch.from_numpy(byte_tokenize(json.loads(line)["text"]).astype(np.int32))


def litdata_text_optimize(paths, out, workers):
    """LitData's optimize of the token files, in a process of its own; returns its seconds."""
    code = ("import json, sys, time\n"
            f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
            "import convert_benchmark as cb\n"
            "from litdata import optimize\n"
            "from litdata.streaming.item_loader import TokensLoader\n"
            "if __name__ == '__main__':\n"
            "    t0 = time.perf_counter()\n"
            f"    optimize(fn=cb.litdata_tokenize, inputs={list(paths)!r}, output_dir={out!r}, "
            f"chunk_size=2049 * 8012, item_loader=TokensLoader(), num_workers={workers}, "
            "verbose=False)\n"
            "    print(json.dumps({'seconds': time.perf_counter() - t0}))\n")
    return _timed_subprocess(code)


def _timed_subprocess(code):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"LitData optimize failed: {r.stderr.strip().splitlines()[-1:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["seconds"]


def ray_images(folder, out):
    import ray.data
    classes = {c: i for i, c in enumerate(sorted(os.listdir(folder)))}

    def sample(row):
        rel = os.path.relpath(row["path"], folder)
        cls, name = rel.split(os.sep)
        return {"__key__": f"{cls}/{os.path.splitext(name)[0]}", "jpg": row["bytes"],
                "cls": str(classes[cls]).encode()}

    ray.data.read_binary_files(folder, include_paths=True).map(sample).write_webdataset(
        out, encoder=None)  # the bytes as they are (its default encoder wants PIL images)


def table(title, unit, items, times, base_name, workers, notes):
    base = statistics.median(times[base_name])
    print(f"\n{title}")
    print(f"{'way':<58} {unit + '/s':>11} {'per core':>9} {'vs pool':>8}  runs (s)")
    for name, ts in times.items():
        if not ts:
            print(f"{name:<58} {'-':>11}  {notes.get(name, '')}")
            continue
        med = statistics.median(ts)
        print(f"{name:<58} {items / med:>11,.0f} {items / med / workers[name]:>9,.0f} "
              f"{base / med:>8.2f}  " + " ".join(f"{t:.2f}" for t in ts))


def interleave(ways, runs, work):
    """Runs every way once per round (the first round warms Ray's workers up and is not
    counted); a way that fails is reported with its reason and not run again."""
    times = {name: [] for name in ways}
    notes = {}
    for run in range(runs + 1):
        for name, fn in ways.items():
            if name in notes:
                continue
            out = os.path.join(work, "out")
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            try:
                seconds = fn(out)
            except Exception as e:  # noqa: BLE001 - reported in the table
                notes[name] = f"cannot run here: {str(e).strip().splitlines()[-1][:120]}"
                times[name] = []
                continue
            if run:
                times[name].append(seconds if seconds is not None else time.perf_counter() - t0)
    return times, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--mb", type=int, default=12, help="MiB of JSON Lines per file")
    ap.add_argument("--images", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--what", default="text,images")
    args = ap.parse_args()
    what = set(args.what.split(","))

    import ray
    from shardstream import convert
    cpus = len(os.sched_getaffinity(0))
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    work = tempfile.mkdtemp(prefix="convert-bench-")
    try:
        if "text" in what:
            paths, docs = write_corpus(work, args.files, args.mb)
            print(f"text: {args.files} files, {args.files * args.mb} MiB of JSON Lines, {docs} "
                  f"documents, {cpus} CPUs, byte tokenizer")
            pool = f"text_to_shards, {cpus} processes (files)"
            ways = {
                "text_to_shards, 1 process":
                    lambda out: convert.text_to_shards(paths, out, byte_tokenize, processes=1) and None,
                pool: lambda out: convert.text_to_shards(paths, out, byte_tokenize,
                                                         processes=cpus) and None,
                f"text_to_shards, engine=ray, {cpus} CPUs (files)":
                    lambda out: convert.text_to_shards(paths, out, byte_tokenize,
                                                       engine="ray") and None,
                "Ray Data write_webdataset (no manifest, no index)":
                    lambda out: ray_webdataset(paths, out),
                f"LitData optimize (TokensLoader), {cpus} workers":
                    lambda out: litdata_text_optimize(paths, out, cpus),
            }
            workers = dict(zip(ways, [1, cpus, cpus, cpus, cpus]))
            times, notes = interleave(ways, args.runs, work)
            table("text", "docs", docs, times, pool, workers, notes)
        if "images" in what:
            tree = os.path.join(work, "train")
            nbytes = write_image_folder(tree, args.images)
            print(f"\nimages: an ImageFolder of {args.images} JPEGs in 100 classes, "
                  f"{nbytes / 2**20:.0f} MiB, {cpus} CPUs")
            cli = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "build", "shardstream")

            def pack(out):
                if not os.access(cli, os.X_OK):
                    raise RuntimeError("build/shardstream is not built")
                subprocess.run([cli, "pack", "--image-folder", "--index", "--shard-size", "32MiB",
                                tree, out], check=True,
                               capture_output=True)

            # 32 MiB shards (a dozen here), so that the work spreads over tasks as a real
            # data set's hundreds of 512 MiB shards do.
            shards = dict(max_bytes="32MiB")
            pool = f"images_to_shards, {cpus} processes"
            ways = {
                "shardstream pack --image-folder (1 process)": pack,
                "images_to_shards, 1 process":
                    lambda out: convert.images_to_shards(tree, out, processes=1, **shards) and None,
                pool: lambda out: convert.images_to_shards(tree, out, processes=cpus,
                                                           **shards) and None,
                f"images_to_shards, engine=ray, {cpus} CPUs":
                    lambda out: convert.images_to_shards(tree, out, engine="ray", **shards) and None,
                "Ray Data write_webdataset (no manifest, no index)":
                    lambda out: ray_images(tree, out),
                f"LitData optimize, {cpus} workers": lambda out: litdata_optimize(tree, out, cpus),
            }
            workers = dict(zip(ways, [1, 1, cpus, cpus, cpus, cpus]))
            times, notes = interleave(ways, args.runs, work)
            table("images", "images", args.images, times, pool, workers, notes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        ray.shutdown()


if __name__ == "__main__":
    main()
