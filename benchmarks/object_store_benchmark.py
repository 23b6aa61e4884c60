#!/usr/bin/env python3
"""A cold epoch from an object store that caps each connection, against the
store's ceiling.

The store: nginx on loopback with `limit_rate` (a per-connection cap, as S3
and GCS have: 25 and 100 MB/s here), serving token shards (tar, one
`tokens.npy` of 2,048 int32 per sample) listed in a manifest with sizes.

Measured, each the median of --runs runs on the same data in the same run:
  * ceiling: every shard at once with parallel curl (one GET each), MB/s;
  * shardstream: one cold epoch of ShardDataset(manifest, fields=["tokens.npy"],
    batch_size=256) with defaults (shuffle on), without and with cache_dir
    (a new, empty cache each run), MB/s of shard bytes, time to the first
    batch, peak RSS of the process, CPU seconds per GB, and the transfer
    counters (parts, connections at peak, part p50/p99);
  * the same with part_size 0 (one GET per shard, as before ranged parts);
  * time to the first batch from a cold shard of --big-mib (1 GiB), with and without
    cache_dir;
  * the peak RSS of a process that only imports torch and shardstream (the baseline the
    in-flight budget, 512 MiB, adds to).
Prints one JSON object. Usage (after `bash scripts/setup.sh` and `pip install .`):
  .venv/bin/python benchmarks/object_store_benchmark.py --shards 18 --shard-mib 32 --runs 3
"""
import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

from remote_benchmark import free_port, wait_port


def make_shards(root, n, shard_mib, seq=2048, prefix="shard"):
    per = shard_mib * (1 << 20) // (seq * 4 + 1024)
    rng = np.random.default_rng(0)
    rows = []
    for s in range(n):
        name = "%s-%05d.tar" % (prefix, s)
        path = os.path.join(root, name)
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(per):
                buf = io.BytesIO()
                np.save(buf, rng.integers(0, 50000, seq, dtype=np.int32))
                data = buf.getvalue()
                info = tarfile.TarInfo("%05d-%06d.tokens.npy" % (s, i))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        rows.append({"url": name, "size": os.path.getsize(path), "nsamples": per})
    with open(os.path.join(root, prefix + ".jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


def start_nginx(work, root, rate):
    port = free_port()
    conf = os.path.join(work, "nginx-%s.conf" % rate)
    with open(conf, "w") as f:
        f.write("daemon off;\nmaster_process off;\nworker_processes 1;\npid %s/nginx-%s.pid;\n"
                "error_log %s/error.log warn;\nevents { worker_connections 1024; }\n"
                "http {\n  access_log off;\n  sendfile on;\n  default_type application/octet-stream;\n"
                "  client_body_temp_path %s/body;\n  proxy_temp_path %s/proxy;\n"
                "  fastcgi_temp_path %s/fcgi;\n  uwsgi_temp_path %s/uwsgi;\n  scgi_temp_path %s/scgi;\n"
                "  server {\n    listen 127.0.0.1:%d;\n    root %s;\n    limit_rate %s;\n  }\n}\n"
                % (work, rate, work, work, work, work, work, work, port, root, rate))
    proc = subprocess.Popen(["/usr/sbin/nginx", "-p", work, "-e", work + "/error.log", "-c", conf])
    wait_port(port)
    return proc, port


def ceiling(base, rows):
    """Every shard at once with curl: what the store gives this many GETs."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["curl", "-sf", "-o", "/dev/null", base + "/" + r["url"]])
             for r in rows]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("curl failed")
    return sum(r["size"] for r in rows) / (time.perf_counter() - t0) / 1e6


CHILD = r"""
import json, os, resource, sys, tempfile, time, shutil
import shardstream
from shardstream.torch import ShardDataset
cfg = json.loads(sys.argv[1])
if cfg["part_size"] is not None:
    shardstream.set_transfer_options(part_size=cfg["part_size"])
cache = tempfile.mkdtemp(dir=cfg["work"]) if cfg["cache"] else None
ds = ShardDataset(cfg["manifest"], fields=["tokens.npy"], batch_size=256, cache_dir=cache,
                  cache_limit="8GiB" if cache else None)
t0 = time.perf_counter(); c0 = time.process_time(); first = None; samples = 0
if cfg["mode"] != "baseline":
    for batch in ds:
        if first is None:
            first = time.perf_counter() - t0
            if cfg["mode"] == "first":
                break
        samples += batch["tokens.npy"].shape[0]
secs = time.perf_counter() - t0
cpu = time.process_time() - c0
ts = shardstream.transfer_stats()
ds.close()
if cache:
    shutil.rmtree(cache, ignore_errors=True)
print(json.dumps({"seconds": secs, "first_batch_s": first, "samples": samples, "cpu_s": cpu,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "transfer": ts}))
"""


def epoch(python, work, manifest, cache, part_size, total_bytes, mode="epoch"):
    cfg = {"work": work, "manifest": manifest, "cache": cache, "part_size": part_size,
           "mode": mode}
    out = subprocess.run([python, "-c", CHILD, json.dumps(cfg)], check=True, capture_output=True,
                         text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    r["mb_per_s"] = total_bytes / r["seconds"] / 1e6
    r["cpu_s_per_gb"] = r["cpu_s"] / (total_bytes / 1e9)
    return r


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=18)
    ap.add_argument("--shard-mib", type=int, default=32)
    ap.add_argument("--rates", default="25m,100m")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ss-objstore-")
    root = os.path.join(work, "root")
    os.makedirs(root)
    rows = make_shards(root, args.shards, args.shard_mib)
    big = make_shards(root, 1, args.big_mib, prefix="big") if args.big_mib else []
    total = sum(r["size"] for r in rows)
    result = {"shards": args.shards, "shard_mib": args.shard_mib, "total_bytes": total,
              "runs": args.runs, "rates": {}}
    for rate in args.rates.split(","):
        proc, port = start_nginx(work, root, rate)
        try:
            base = "http://127.0.0.1:%d" % port
            manifest = base + "/shard.jsonl"
            if "baseline_rss_mib" not in result:
                result["baseline_rss_mib"] = epoch(args.python, work, manifest, False, None,
                                                   total, "baseline")["rss_mib"]
            ceil = statistics.median(ceiling(base, rows) for _ in range(args.runs))
            entry = {"ceiling_mb_per_s": ceil}
            for name, cache, part in (("uncached", False, None), ("cached", True, None),
                                      ("uncached_one_get", False, 0),
                                      ("cached_one_get", True, 0)):
                rs = [epoch(args.python, work, manifest, cache, part, total)
                      for _ in range(args.runs)]
                entry[name] = {
                    "mb_per_s": med(rs, "mb_per_s"),
                    "of_ceiling": med(rs, "mb_per_s") / ceil,
                    "first_batch_s": med(rs, "first_batch_s"),
                    "rss_mib": max(r["rss_mib"] for r in rs),
                    "cpu_s_per_gb": med(rs, "cpu_s_per_gb"),
                    "peak_connections": max(r["transfer"]["peak_connections"] for r in rs),
                    "parts": rs[0]["transfer"]["parts"],
                    "part_p50_s": med([r["transfer"] for r in rs], "part_p50_s"),
                    "part_p99_s": med([r["transfer"] for r in rs], "part_p99_s"),
                }
                print(rate, name, json.dumps(entry[name]), file=sys.stderr, flush=True)
            if big:
                for name, cache in (("first_batch_1gib_uncached_s", False),
                                    ("first_batch_1gib_cached_s", True)):
                    entry[name] = statistics.median(
                        epoch(args.python, work, base + "/big.jsonl", cache, None, 1,
                              "first")["first_batch_s"] for _ in range(args.runs))
                    print(rate, name, entry[name], file=sys.stderr, flush=True)
            result["rates"][rate] = entry
        finally:
            proc.terminate()
            proc.wait()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
