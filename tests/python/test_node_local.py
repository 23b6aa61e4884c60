"""Node-local shard affinity: two "nodes" on this machine (ranks 0-1 share one
cache directory, ranks 2-3 another), shards served over loopback HTTP by the
test server. From the second epoch on neither node downloads a byte, and every
sample is delivered once per epoch."""

import json
import os
import subprocess
import sys

import pytest
import torch

import shardstream
from shardstream.torch import ShardDataset, ranks_per_node
from conftest import make_shards

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "servers", "http_server.py")


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "www"
    manifest = make_shards(str(root), nshards=12, per_shard=20)
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, SERVER, "--root", str(root), "--log", str(log)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().split()[1])
        yield f"http://127.0.0.1:{port}/manifest.jsonl", log, 12 * 20
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def shard_bytes_sent(log):
    if not log.exists():
        return 0
    total = 0
    with open(log) as f:
        for line in f:
            r = json.loads(line)
            if r["path"].endswith(".tar"):
                total += r.get("sent", 0)
    return total


def test_second_epoch_downloads_nothing_and_every_sample_once(served, tmp_path):
    url, log, total = served
    caches = [str(tmp_path / "node0-cache"), str(tmp_path / "node1-cache")]
    # One data set per rank for the whole run, as in training (closing one
    # mid-run would cancel a download it had already read).
    ranks = [ShardDataset(url, fields=["cls"], batch_size=8, seed=3, rank=rank, world_size=4,
                          node_local=True, local_world_size=2, cache_dir=caches[rank // 2],
                          cache_limit="1GB") for rank in range(4)]
    sent = []
    for epoch in range(3):
        before = shard_bytes_sent(log)
        keys = []
        for ds in ranks:
            ds.set_epoch(epoch)
            keys += [k for b in ds.dataloader() for k in b["__key__"]]
        assert len(keys) == len(set(keys)) == total, epoch
        sent.append(shard_bytes_sent(log) - before)
    for ds in ranks:
        ds.close()
    assert sent[0] > 0
    assert sent[1] == 0 and sent[2] == 0, sent


def test_node_ranks_from_the_environment(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert ranks_per_node(3, 4) == 2
    with pytest.raises(shardstream.ConfigError, match="GROUP_RANK"):
        ranks_per_node(2, 4)   # torchrun would have made it rank 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(shardstream.ConfigError, match="LOCAL_WORLD_SIZE=3 does not divide"):
        ranks_per_node(3, 4)
    for name in ("LOCAL_WORLD_SIZE", "GROUP_RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "4(x2)")
    assert ranks_per_node(5, 8) == 4
    monkeypatch.delenv("SLURM_TASKS_PER_NODE")
    with pytest.raises(shardstream.ConfigError, match="LOCAL_WORLD_SIZE"):
        ranks_per_node(1, 4)
    assert ranks_per_node(0, 1) == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "two")
    with pytest.raises(shardstream.ConfigError, match="LOCAL_WORLD_SIZE='two'"):
        ranks_per_node(0, 2)
