"""Sample batches under a skip policy with several ranks: a rank that skipped
a corrupt shard pads up to the batches every rank returns, so DDP ranks end
the epoch together, hooks or not, and after a resume from its own state."""

import pickle

import numpy as np
import pytest

from shardstream import ShardWriter
from shardstream.torch import ShardDataset


@pytest.fixture
def manifest(tmp_path):
    """16 shards of 5 samples; shard 3's second sample has a bad header checksum
    (the shard is skipped whole: its first sample ends where that header is read)."""
    with ShardWriter(str(tmp_path), max_samples=5) as w:
        for g in range(80):
            w.write({"__key__": f"d{g:03d}", "x.npy": np.full(5, g + 1, np.int32), "cls": g % 4})
    shard = tmp_path / "shard-000003.tar"
    data = bytearray(shard.read_bytes())
    at = data.find(b"d016.cls")
    assert at >= 0
    data[at + 148:at + 156] = b"XXXXXXXX"
    shard.write_bytes(bytes(data))
    return str(tmp_path / "manifest.jsonl")


def batches(manifest, rank, **kw):
    ds = ShardDataset(manifest, fields=["x.npy", "cls"], batch_size=4, rank=rank, world_size=4,
                      seed=3, error_policy="skip_shard", **kw)
    out = list(ds)
    ds.close()
    return out


def double(sample):
    return dict(sample, **{"x.npy": sample["x.npy"] * 2})


@pytest.mark.parametrize("hook", [None, "map", "batch_map"])
def test_a_rank_that_skipped_a_shard_pads_up_to_every_ranks_count(manifest, hook):
    kw = {"map": double} if hook == "map" else {"batch_map": lambda b: b} if hook == "batch_map" else {}
    counts, pads, samples = [], [], 0
    for rank in range(4):
        got = batches(manifest, rank, **kw)
        counts.append(len(got))
        padding = [b for b in got if len(b["__key__"]) == 0]
        pads.append(len(padding))
        assert got[len(got) - len(padding):] == padding, "padding comes last"
        for b in padding:
            assert b["x.npy"].shape == (4, 5) and not b["x.npy"].any()  # rows of zeros
        for b in got[:len(got) - len(padding)]:
            assert b["x.npy"].shape[1] == 5 and (b["x.npy"] > 0).all()
            if hook == "map":
                assert (b["x.npy"] % 2 == 0).all()
        samples += sum(len(b["__key__"]) for b in got)
    assert counts == [5, 5, 5, 5]
    assert sorted(pads) == [0, 0, 0, 1]  # the rank that lost a shard: 4, 4, 4, 3, then padding
    assert samples == 75


def test_the_padding_rank_resumes_to_the_same_count(manifest):
    skipper = next(r for r in range(4) if any(len(b["__key__"]) == 0 for b in batches(manifest, r)))
    ds = ShardDataset(manifest, fields=["x.npy", "cls"], batch_size=4, rank=skipper, world_size=4,
                      seed=3, error_policy="skip_shard")
    it = iter(ds)
    head = [next(it), next(it)]
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    ds.close()
    resumed = ShardDataset(manifest, fields=["x.npy", "cls"], batch_size=4, rank=skipper,
                           world_size=4, seed=3, error_policy="skip_shard")
    resumed.load_state_dict(state)
    rest = list(resumed)
    resumed.close()
    assert len(head) + len(rest) == 5
    sizes = [len(b["__key__"]) for b in head + rest]
    assert sizes[-1] == 0 and 0 not in sizes[:-1] and sum(sizes) == 15


WORKER = r"""
import json, os, sys
import torch
import torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader
from shardstream.torch import ShardDataset, passthrough
manifest, out, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
ds = ShardDataset(manifest, fields=["x.npy", "cls"], batch_size=4, seed=3, error_policy="skip_shard")
dl = StatefulDataLoader(ds, batch_size=None, num_workers=workers, collate_fn=passthrough,
                        **({"multiprocessing_context": "fork"} if workers else {}))
keys, batches, pads = [], 0, 0
for b in dl:
    t = torch.ones(1)
    dist.all_reduce(t)  # what DDP does in backward: every rank must join
    batches += 1
    pads += len(b["__key__"]) == 0
    keys += list(b["__key__"])
with open(os.path.join(out, f"{rank}.json"), "w") as f:
    json.dump({"batches": batches, "pads": pads, "keys": keys, "len": len(ds)}, f)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_ddp_ranks_end_the_epoch_together(manifest, tmp_path, workers):
    """4 gloo ranks, an all_reduce per batch: without the padding the rank that
    skipped would end early and leave the others waiting (a hang fails by the
    timeout)."""
    import json
    import os
    import subprocess
    import sys

    from conftest import free_port, reaped
    port = free_port()
    with reaped() as procs:
        for rank in range(4):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen([sys.executable, "-c", WORKER, manifest, str(tmp_path),
                                           str(workers)], env=env, stderr=subprocess.PIPE, text=True))
        try:
            for p in procs:
                _, err = p.communicate(timeout=150)
                assert p.returncode == 0, err
        except subprocess.TimeoutExpired:
            pytest.fail("the ranks did not end the epoch together (a hang)")
    results = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(4)]
    counts = [r["batches"] for r in results]
    assert len(set(counts)) == 1, results
    if workers == 0:
        assert counts == [r["len"] for r in results]  # len() answers, padding included
    assert sum(r["pads"] for r in results) > 0
    keys = [k for r in results for k in r["keys"]]
    assert len(keys) == len(set(keys)) == 75
