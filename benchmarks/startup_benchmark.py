"""Start-up over a data set of a million shards: what one process (a rank, or
one of its DataLoader workers) pays before its first batch.

    python benchmarks/startup_benchmark.py [--shards 1000000] [--runs 5]

Each run is a fresh process that imports shardstream, then makes a Loader
as rank 0 of 8 with 2 workers (worker 0; default options otherwise:
shuffle on) over the data set's manifest and takes one batch. It reports
the time to the first batch, the resident memory the process gained over
`import shardstream`, and its peak. The manifest's own cost is the
difference from the same runs over a data set of 20,000 of those shards
(every consumer's share still fills its shuffle buffer), run interleaved.

The shards are one small tar (4 samples) under a million names (symbolic
links), listed by a manifest as `shardstream manifest` writes it (url,
size, nsamples, checksum): 123 MB of JSON Lines. They are made once in
--work and kept.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time

CHILD = r"""
import json, sys, time
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
import shardstream
base = status("VmRSS")
t0 = time.perf_counter()
loader = shardstream.Loader(sys.argv[1], batch_size=4, rank=0, world_size=8, num_workers=2, worker=0)
t1 = time.perf_counter()
batch = next(iter(loader))
t2 = time.perf_counter()
assert len(batch["__key__"]) == 4
print(json.dumps({"create_s": t1 - t0, "first_batch_s": t2 - t0,
                  "rss_mib": status("VmRSS") - base, "peak_mib": status("VmHWM") - base}))
"""


def make_dataset(work: str, shards: int) -> tuple[str, str]:
    manifest = os.path.join(work, f"manifest-{shards}.jsonl")
    baseline = os.path.join(work, "manifest-20000.jsonl")
    if os.path.exists(manifest) and os.path.exists(baseline):
        return manifest, baseline
    os.makedirs(os.path.join(work, "shards"), exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(4):
            data = b"x" * 100
            info = tarfile.TarInfo(f"s{i:03d}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    os.makedirs(os.path.join(work, "one"), exist_ok=True)
    with open(os.path.join(work, "one", "one.tar"), "wb") as f:
        f.write(data)
    # Its size and checksum as `shardstream manifest` writes them.
    subprocess.run([sys.executable, "-m", "shardstream", "manifest", os.path.join(work, "one"),
                    "--out", os.path.join(work, "one", "manifest.jsonl")], check=True, capture_output=True)
    with open(os.path.join(work, "one", "manifest.jsonl")) as f:
        entry = json.loads(f.readline())
    checksum = entry["checksum"]
    t0 = time.time()
    lines = []
    for i in range(max(shards, 20000)):
        name = f"shards/train-{i:07d}.tar"
        path = os.path.join(work, name)
        if not os.path.lexists(path):
            os.symlink("../one/one.tar", path)
        lines.append(json.dumps({"url": name, "size": entry["size"], "nsamples": entry["nsamples"],
                                  "checksum": checksum}))
    for path, n in ((baseline, 20000), (manifest, shards)):
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(lines[:n]) + "\n")
        os.replace(path + ".tmp", path)
    print(f"made {shards:,} shard names and their manifest in {time.time() - t0:.0f} s", file=sys.stderr)
    return manifest, baseline


def run(manifest: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, manifest], capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"the run over {manifest} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "shardstream-startup"))
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    manifest, baseline = make_dataset(a.work, a.shards)
    big, small = [], []
    for _ in range(a.runs):  # interleaved
        small.append(run(baseline))
        big.append(run(manifest))

    def med(rows: list, key: str) -> float:
        return statistics.median(r[key] for r in rows)

    size_mb = os.path.getsize(manifest) / 1e6
    print(f"manifest: {a.shards:,} shards, {size_mb:.0f} MB of JSON Lines; "
          f"rank 0 of 8, worker 0 of 2, default options; medians of {a.runs} runs")
    print(f"{'data set':>16} | {'Loader()':>9} | {'first batch':>11} | {'RSS gained':>10} | {'peak':>8}")
    for name, rows in ((f"{a.shards:,} shards", big), ("20,000 shards", small)):
        print(f"{name:>16} | {med(rows, 'create_s'):8.2f}s | {med(rows, 'first_batch_s'):10.2f}s | "
              f"{med(rows, 'rss_mib'):6.1f} MiB | {med(rows, 'peak_mib'):4.1f} MiB")
    cost_rss = med(big, "rss_mib") - med(small, "rss_mib")
    cost_peak = med(big, "peak_mib") - med(small, "peak_mib")
    cost_s = med(big, "first_batch_s") - med(small, "first_batch_s")
    print(f"the manifest's cost per process: {cost_s:.2f} s, {cost_rss:.1f} MiB resident "
          f"({cost_peak:.1f} MiB at the peak); goal <= 1 s and <= 64 MiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"shards": a.shards, "runs": {"big": big, "small": small},
                       "cost_s": cost_s, "cost_rss_mib": cost_rss, "cost_peak_mib": cost_peak}, f, indent=1)


if __name__ == "__main__":
    main()
