"""An s3:// prefix is listed once per job (shardstream.listing), counted by moto itself
(tests/servers/moto_server.py counts the requests it serves): 2 gloo ranks x 2 DataLoader
workers read a prefix of 60 shards (no manifest: every count comes from the shard's index)
with one listing and one read of each index in all, and every sample once. The control: the
same ranks without torch.distributed list once each (their workers take the rank's listing).
A prefix that lists nothing fails every rank, naming it. Mixing streams keep the key their
inputs came in."""

import json
import os
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

import shardstream
from conftest import free_port, reaped

SHARDS, PER_SHARD = 60, 5

RANK = r"""
import json, os, sys
import torch.distributed as dist
from shardstream.torch import ShardDataset
url, out, use_dist = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
rank = int(os.environ["RANK"])
if use_dist:
    dist.init_process_group("gloo")
result = {"rank": rank}
try:
    ds = ShardDataset(url, fields=["cls"], batch_size=5, seed=3)
    keys = [k for b in ds.dataloader(num_workers=2) for k in b["__key__"]]
    result["keys"] = keys
except Exception as e:
    result["error"] = f"{type(e).__name__}: {e}"
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(result, f)
if use_dist:
    dist.barrier()
    dist.destroy_process_group()
"""


def counts():
    endpoint = os.environ["AWS_ENDPOINT_URL_S3"]
    with urllib.request.urlopen(endpoint + "/_shardstream/requests", timeout=10) as r:
        return json.loads(r.read())


def run_ranks(url, out, use_dist, world=2):
    port = free_port()  # MASTER_PORT must be known to every rank before they start
    os.makedirs(out, exist_ok=True)
    with reaped() as procs:
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen([sys.executable, "-c", RANK, url, str(out),
                                           "1" if use_dist else "0"], env=env,
                                          stderr=subprocess.PIPE, text=True))
        for p in procs:
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def upload(s3, tmp_path):
    root = tmp_path / "set"
    with shardstream.ShardWriter(str(root), max_samples=PER_SHARD, write_index=True) as w:
        for i in range(SHARDS * PER_SHARD):
            w.write({"__key__": f"s{i:05d}", "cls": i % 7, "x.npy": np.full(4, i, np.int32)})
    s3.create_bucket(Bucket="data")
    names = sorted(n for n in os.listdir(root) if n.endswith((".tar", ".idx")))
    assert len(names) == 2 * SHARDS
    for n in names:
        s3.upload_file(str(root / n), "data", f"set/{n}")


def test_a_prefix_is_listed_once_per_job(moto_s3, tmp_path):
    upload(moto_s3, tmp_path)
    # What one resolution of the prefix asks: its list calls (a prefix is told from an object
    # by a listing too).
    before = counts()
    shardstream._core.resolve_listing("s3://data/set/")
    listed = counts()
    one = listed.get("list", 0) - before.get("list", 0)
    assert one >= 1
    # The listing gives each object's size: no HEAD of a shard to check its index against it.
    heads = [k for k, n in listed["by_key"].items()
             if k.startswith("HEAD /data/set/") and k.endswith(".tar")
             and n > before["by_key"].get(k, 0)]
    assert heads == [], heads
    before = counts()
    results = run_ranks("s3://data/set/", tmp_path / "dist", use_dist=True)
    after = counts()
    assert all("error" not in r for r in results), results
    keys = [k for r in results for k in r["keys"]]
    assert sorted(keys) == [f"s{i:05d}" for i in range(SHARDS * PER_SHARD)]  # each once
    assert after.get("list", 0) - before.get("list", 0) == one
    idx_gets = {k: n - before["by_key"].get(k, 0) for k, n in after["by_key"].items()
                if k.startswith("GET /data/set/") and k.endswith(".idx")}
    assert len(idx_gets) == SHARDS and set(idx_gets.values()) == {1}, idx_gets

    # The control: without torch.distributed each rank lists for itself (and its workers).
    before = counts()
    results = run_ranks("s3://data/set/", tmp_path / "solo", use_dist=False)
    after = counts()
    assert all("error" not in r for r in results), results
    assert after.get("list", 0) - before.get("list", 0) == 2 * one
    idx_gets = [n - before["by_key"].get(k, 0) for k, n in after["by_key"].items()
                if k.startswith("GET /data/set/") and k.endswith(".idx")]
    assert sorted(set(idx_gets)) == [2], idx_gets


def test_an_index_the_listed_size_contradicts_is_stale(moto_s3, tmp_path):
    # The size the listing gives is the one each index is checked against, without a HEAD: a
    # shard rewritten after its index (512 more bytes) has no count (its index is stale), so
    # the listing is not shared as a manifest; the same shards as written resolve whole.
    root = tmp_path / "set"
    with shardstream.ShardWriter(str(root), max_samples=PER_SHARD, write_index=True) as w:
        for i in range(2 * PER_SHARD):
            w.write({"__key__": f"s{i:05d}", "cls": i % 7})
    moto_s3.create_bucket(Bucket="stale")
    for prefix, pad in (("good", 0), ("bad", 512)):
        for n in sorted(os.listdir(root)):
            if n.endswith((".tar", ".idx")):
                data = (root / n).read_bytes()
                if n == "shard-000001.tar":
                    data += bytes(pad)
                moto_s3.put_object(Bucket="stale", Key=f"{prefix}/{n}", Body=data)
    before = counts()
    good = shardstream._core.resolve_listing("s3://stale/good/")
    assert good is not None and len(good.splitlines()) == 2
    assert [json.loads(line)["nsamples"] for line in good.splitlines()] == [PER_SHARD] * 2
    assert shardstream._core.resolve_listing("s3://stale/bad/") is None
    after = counts()
    heads = [k for k, n in after["by_key"].items()
             if k.startswith("HEAD /stale/") and k.endswith(".tar") and n > before["by_key"].get(k, 0)]
    assert heads == [], heads


def test_a_prefix_that_lists_nothing_fails_every_rank(moto_s3, tmp_path):
    moto_s3.create_bucket(Bucket="empty")
    results = run_ranks("s3://empty/nothing/", tmp_path / "out", use_dist=True)
    for r in results:
        assert "error" in r and "s3://empty/nothing" in r["error"], r
    # A rank that came while the other listed got its error; one that came after lists again
    # (a failure is not kept for the rest of the job).
    assert sum("listed by another rank" in r["error"] for r in results) <= 1, results


def test_mixing_streams_keep_the_key_their_inputs_came_in(tmp_path):
    # A stream names its data set by "inputs", "urls" or "manifest"; each still reads.
    from conftest import make_shards
    from shardstream.torch import ShardDataset
    a = make_shards(str(tmp_path / "a"), nshards=2, per_shard=10)
    b = make_shards(str(tmp_path / "b"), nshards=2, per_shard=10)
    for key in ("inputs", "urls", "manifest"):
        ds = ShardDataset(streams=[{key: a, "weight": 0.5}, {key: b, "weight": 0.5}],
                          epoch_size=40, fields=["cls"], batch_size=5, seed=1)
        assert sum(len(batch["cls"]) for batch in ds.dataloader()) == 40, key
