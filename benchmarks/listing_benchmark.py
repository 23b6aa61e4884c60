#!/usr/bin/env python3
"""What an s3:// prefix costs to resolve, counted by moto's server itself: N shards (each a tiny
tar with its sample index) under a prefix, resolved as the loader resolves it (the listing, then
each shard's index for its count; shardstream.listing does this once per job). Prints the
requests by kind, the seconds, and the resolving process's peak RSS.

  python benchmarks/listing_benchmark.py [--shards 100000] [--threads 32]
"""

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = os.path.join(HERE, "..", "tests", "servers")


def counts(endpoint):
    with urllib.request.urlopen(endpoint + "/_shardstream/requests", timeout=60) as r:
        c = json.loads(r.read())
    c.pop("by_key", None)
    return c


def tiny_shard(tmp):
    """One shard of 4 samples and its index, written once and uploaded N times."""
    import shardstream
    with shardstream.ShardWriter(tmp, max_samples=4, write_index=True) as w:
        for i in range(4):
            w.write({"__key__": f"s{i}", "cls": i})
    with open(os.path.join(tmp, "shard-000000.tar"), "rb") as f:
        tar = f.read()
    with open(os.path.join(tmp, "shard-000000.tar.idx"), "rb") as f:
        idx = f.read()
    return tar, idx


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=32)
    args = ap.parse_args()
    import tempfile
    import boto3
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    moto = subprocess.Popen([sys.executable, os.path.join(SERVERS, "moto_server.py"), "--port-0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        endpoint = f"http://127.0.0.1:{int(moto.stdout.readline().split()[1])}"
        out = subprocess.check_output([sys.executable, os.path.join(SERVERS, "moto_setup.py"),
                                       endpoint], text=True).split()
        keys = dict(zip(out[::2], out[1::2]))
        os.environ.update(AWS_ACCESS_KEY_ID=keys["access_key"],
                          AWS_SECRET_ACCESS_KEY=keys["secret_key"],
                          AWS_ENDPOINT_URL_S3=endpoint, AWS_REGION="us-east-1",
                          AWS_EC2_METADATA_DISABLED="true")
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=keys["access_key"],
                          aws_secret_access_key=keys["secret_key"])
        s3.create_bucket(Bucket="data")
        with tempfile.TemporaryDirectory() as tmp:
            tar, idx = tiny_shard(tmp)
        t0 = time.monotonic()

        def put(i):
            name = f"set/shard-{i:07d}.tar"
            s3.put_object(Bucket="data", Key=name, Body=tar)
            s3.put_object(Bucket="data", Key=name + ".idx", Body=idx)

        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(put, range(args.shards)))
        print(f"uploaded {args.shards} shards and indexes in {time.monotonic() - t0:.0f} s",
              flush=True)
        from shardstream import _core
        before = counts(endpoint)
        t0 = time.monotonic()
        text = _core.resolve_listing("s3://data/set/")
        seconds = time.monotonic() - t0
        after = counts(endpoint)
        entries = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert len(entries) == args.shards and all(e["nsamples"] == 4 for e in entries)
        asked = {k: after.get(k, 0) - before.get(k, 0) for k in after
                 if after.get(k, 0) != before.get(k, 0)}
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"shards": args.shards, "seconds": round(seconds, 1), "requests": asked,
                          "manifest_bytes": len(text), "peak_rss_mib": round(rss, 1)}))
    finally:
        moto.kill()
        moto.wait()


if __name__ == "__main__":
    main()
