#!/usr/bin/env python3
"""A cold epoch from an object store that caps each connection, against the
store's ceiling and the peers' S3 clients.

The store: nginx on loopback with `limit_rate` (a per-connection cap, as S3
and GCS have: 25 and 100 MB/s here) that answers every request --latency-ms
(20) late (auth_request to a server that waits that long), serving
token shards (tar, one `tokens.npy` of 2,048 int32 per sample) listed in a
manifest with sizes. The same objects are read as http://HOST/bench/KEY and,
path-style with AWS_ENDPOINT_URL, as s3://bench/KEY (nginx ignores the
signature; S3 signing itself is tested against moto).

Two sets: --shards shards of --shard-mib (18 x 32 MiB), and --big-shards of
--big-mib (2 x 1 GiB). Measured, each the median of --runs runs on the same
data in the same run, each in a fresh process (peak RSS, CPU seconds/GB):
  * ceiling: every object at once with parallel curl (one GET each), MB/s;
  * shardstream: one cold epoch of ShardDataset(manifest, fields=["tokens.npy"],
    batch_size=256) with defaults (shuffle on), http:// and s3://, without and
    with cache_dir (a new, empty cache each run), and the transfer counters;
  * the same over http:// with part_size 0 (one GET per shard);
  * s3torchconnector (the AWS CRT client) reading every object with
    S3IterableDataset.from_objects and its default S3ClientConfig
    (force_path_style for the endpoint): in turn in one process, and through a
    torch DataLoader with a worker per core (enable_sharding), its README's
    training setup;
  * boto3's download manager: download_fileobj of every object in turn with
    the default TransferConfig (8 MiB parts, 10 threads);
  * time to the first batch from a cold big shard, with and without cache_dir;
  * each epoch ends with its last batch (or object): MB/s to there, and apart
    from it what close() or a DataLoader's teardown takes after it (close_s: a
    cache's last fsync and rename) and the MB/s with it;
  * the peak RSS of a process that only imports torch and shardstream (the
    baseline the in-flight budget, 512 MiB, adds to).
--shards 0 runs the big set only. Prints one JSON object. Usage (after `bash scripts/setup.sh`, `pip install .`
and `pip install s3torchconnector==1.5.0`; boto3 comes with the test tools):
  .venv/bin/python benchmarks/object_store_benchmark.py --runs 3
"""
import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

from bench_common import last_json
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


def start_delay_server(latency_ms):
    """Answers every request with 204 after latency_ms: nginx asks it (auth_request) before
    each answer, so every GET and HEAD gets that first-byte latency while nginx itself sends
    the bytes."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def do_GET(self):
            time.sleep(latency_ms / 1000)
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024  # nginx asks for every part at once: no SYN dropped

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_nginx(work, root, rate, delay_port=None):
    port = free_port()
    conf = os.path.join(work, "nginx-%s.conf" % rate)
    delay = ""
    if delay_port:
        delay = ("    location / { auth_request /_delay; }\n"
                 "    location = /_delay { internal; proxy_pass http://127.0.0.1:%d;\n"
                 "      proxy_pass_request_body off; proxy_set_header Content-Length \"\"; }\n"
                 % delay_port)
    with open(conf, "w") as f:
        f.write("daemon off;\nmaster_process off;\nworker_processes 1;\npid %s/nginx-%s.pid;\n"
                "error_log %s/error.log warn;\nevents { worker_connections 1024; }\n"
                "http {\n  access_log off;\n  sendfile on;\n  default_type application/octet-stream;\n"
                "  client_body_temp_path %s/body;\n  proxy_temp_path %s/proxy;\n"
                "  fastcgi_temp_path %s/fcgi;\n  uwsgi_temp_path %s/uwsgi;\n  scgi_temp_path %s/scgi;\n"
                "  server {\n    listen 127.0.0.1:%d;\n    root %s;\n    limit_rate %s;\n%s  }\n}\n"
                % (work, rate, work, work, work, work, work, work, port, root, rate, delay))
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
cfg = json.loads(sys.argv[1])
mode = cfg["mode"]
t0 = c0 = None
first = last = None
samples = 0
nbytes = 0
ts = None
if mode in ("s3torch", "s3torch_dataloader", "boto3"):
    import torch  # the same imports as the shardstream runs
    t0 = time.perf_counter(); c0 = time.process_time()
    if mode in ("s3torch", "s3torch_dataloader"):
        from s3torchconnector import S3IterableDataset, S3ClientConfig

        def size_of(reader):  # reads the whole object, as a training transform would
            n = 0
            while True:
                b = reader.read(8 << 20)
                if not b:
                    return n
                n += len(b)

        ds = S3IterableDataset.from_objects(cfg["uris"], region="us-east-1",
                                            endpoint=os.environ["AWS_ENDPOINT_URL"],
                                            s3client_config=S3ClientConfig(force_path_style=True),
                                            transform=size_of,
                                            enable_sharding=mode == "s3torch_dataloader")
        if mode == "s3torch":
            nbytes = sum(ds)
            last = time.perf_counter() - t0
        else:  # its README's training setup: a DataLoader, a worker per core
            loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=os.cpu_count())
            nbytes = sum(int(n) for n in loader)
            last = time.perf_counter() - t0
            del loader  # the workers exit: their CPU time and RSS are counted below
    else:
        import boto3
        from botocore.config import Config

        class Null:
            def write(self, b):
                global nbytes
                nbytes += len(b)
                return len(b)

        s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
        for uri in cfg["uris"]:
            bucket, key = uri[len("s3://"):].split("/", 1)
            s3.download_fileobj(bucket, key, Null())
        last = time.perf_counter() - t0
else:
    import shardstream
    from shardstream.torch import ShardDataset
    if cfg["part_size"] is not None:
        shardstream.set_transfer_options(part_size=cfg["part_size"])
    cache = tempfile.mkdtemp(dir=cfg["work"]) if cfg["cache"] else None
    ds = ShardDataset(cfg["manifest"], fields=["tokens.npy"], batch_size=256, cache_dir=cache,
                      cache_limit="8GiB" if cache else None)
    t0 = time.perf_counter(); c0 = time.process_time()
    if mode != "baseline":
        for batch in ds:
            if first is None:
                first = time.perf_counter() - t0
                if mode == "first":
                    break
            samples += batch["tokens.npy"].shape[0]
    last = time.perf_counter() - t0
    ts = shardstream.transfer_stats()
    ds.close()
    if cache:
        shutil.rmtree(cache, ignore_errors=True)
secs = time.perf_counter() - t0
if last is None:
    last = secs
kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # DataLoader workers, once they exit
cpu = time.process_time() - c0 + kids.ru_utime + kids.ru_stime
rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, kids.ru_maxrss) / 1024
print(json.dumps({"seconds": secs, "last_batch_s": last, "first_batch_s": first, "samples": samples, "cpu_s": cpu,
                  "bytes": nbytes, "rss_mib": rss, "transfer": ts}))
"""


def run_child(python, cfg, env, total_bytes):
    out = subprocess.run([python, "-c", CHILD, json.dumps(cfg)], check=True, capture_output=True,
                         text=True, env=env).stdout
    r = last_json(out)
    if cfg["mode"] in ("s3torch", "s3torch_dataloader", "boto3") and r["bytes"] != total_bytes:
        raise RuntimeError("%s read %d bytes of %d" % (cfg["mode"], r["bytes"], total_bytes))
    # An epoch ends with its last batch (or object); what close() or the DataLoader's
    # teardown takes after it is reported apart (close_s).
    r["mb_per_s"] = total_bytes / r["last_batch_s"] / 1e6
    r["mb_per_s_with_close"] = total_bytes / r["seconds"] / 1e6
    r["cpu_s_per_gb"] = r["cpu_s"] / (total_bytes / 1e9)
    return r


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def summary(rs, ceil):
    out = {
        "mb_per_s": med(rs, "mb_per_s"),
        "of_ceiling": med(rs, "mb_per_s") / ceil,
        "mb_per_s_with_close": med(rs, "mb_per_s_with_close"),
        "close_s": statistics.median(r["seconds"] - r["last_batch_s"] for r in rs),
        "rss_mib": max(r["rss_mib"] for r in rs),
        "cpu_s_per_gb": med(rs, "cpu_s_per_gb"),
    }
    if rs[0]["transfer"] is not None:
        out.update({
            "first_batch_s": med(rs, "first_batch_s"),
            "peak_connections": max(r["transfer"]["peak_connections"] for r in rs),
            "parts": rs[0]["transfer"]["parts"],
            "part_p50_s": med([r["transfer"] for r in rs], "part_p50_s"),
            "part_p99_s": med([r["transfer"] for r in rs], "part_p99_s"),
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=18, help="0: only the big set")
    ap.add_argument("--shard-mib", type=int, default=32)
    ap.add_argument("--big-shards", type=int, default=2)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--rates", default="25m,100m")
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peers", default="s3torch,s3torch_dataloader,boto3",
                    help="comma-separated; empty: none")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ss-objstore-")
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work):
    root = os.path.join(work, "root")
    bucket = os.path.join(root, "bench")
    os.makedirs(bucket)
    sets = {"small": make_shards(bucket, args.shards, args.shard_mib)} if args.shards else {}
    if args.big_shards:
        sets["big"] = make_shards(bucket, args.big_shards, args.big_mib, prefix="big")
    # The store's files reach its disk before anything is timed: their write-back would
    # otherwise compete with the cache fills of the first runs.
    os.sync()
    peers = [p for p in args.peers.split(",") if p]
    result = {"shards": args.shards, "shard_mib": args.shard_mib, "big_shards": args.big_shards,
              "big_mib": args.big_mib, "latency_ms": args.latency_ms, "runs": args.runs,
              "rates": {}}
    for rate in args.rates.split(","):
        delay = start_delay_server(args.latency_ms) if args.latency_ms > 0 else None
        nginx, port = start_nginx(work, root, rate, delay.server_address[1] if delay else None)
        try:
            base = "http://127.0.0.1:%d" % port
            env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                       AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                       AWS_ENDPOINT_URL=base, AWS_EC2_METADATA_DISABLED="true")
            if "baseline_rss_mib" not in result:
                result["baseline_rss_mib"] = run_child(
                    args.python, {"work": work,
                                  "manifest": base + "/bench/%s.jsonl" % ("shard" if args.shards else "big"),
                                  "cache": False, "part_size": None, "mode": "baseline"},
                    env, 1)["rss_mib"]
            entry = {}
            for set_name, rows in sets.items():
                prefix = "shard" if set_name == "small" else "big"
                total = sum(r["size"] for r in rows)
                ceil = statistics.median(ceiling(base + "/bench", rows) for _ in range(args.runs))
                e = {"total_bytes": total, "ceiling_mb_per_s": ceil}
                runs = []
                for scheme in ("http", "s3"):
                    manifest = (base + "/bench/" if scheme == "http" else "s3://bench/") + prefix + ".jsonl"
                    runs += [("%s_uncached" % scheme, {"manifest": manifest, "cache": False,
                                                        "part_size": None, "mode": "epoch"}),
                             ("%s_cached" % scheme, {"manifest": manifest, "cache": True,
                                                      "part_size": None, "mode": "epoch"})]
                runs.append(("http_uncached_one_get", {"manifest": base + "/bench/" + prefix + ".jsonl",
                                                       "cache": False, "part_size": 0,
                                                       "mode": "epoch"}))
                uris = ["s3://bench/" + r["url"] for r in rows]
                for peer in peers:
                    runs.append((peer, {"uris": uris, "mode": peer}))
                for name, cfg in runs:
                    cfg["work"] = work
                    rs = [run_child(args.python, cfg, env, total) for _ in range(args.runs)]
                    e[name] = summary(rs, ceil)
                    print(rate, set_name, name, json.dumps(e[name]), file=sys.stderr, flush=True)
                if set_name == "big":
                    for scheme in ("http", "s3"):
                        manifest = (base + "/bench/" if scheme == "http" else "s3://bench/") + "big.jsonl"
                        for cached in (False, True):
                            name = "first_batch_%s_%s_s" % (scheme, "cached" if cached else "uncached")
                            e[name] = statistics.median(
                                run_child(args.python, {"work": work, "manifest": manifest,
                                                        "cache": cached, "part_size": None,
                                                        "mode": "first"}, env, 1)["first_batch_s"]
                                for _ in range(args.runs))
                            print(rate, name, e[name], file=sys.stderr, flush=True)
                entry[set_name] = e
            result["rates"][rate] = entry
        finally:
            nginx.terminate()
            nginx.wait()
            if delay:
                delay.shutdown()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
