"""The DDP end-of-epoch hang with token packing, on real gloo ranks.

Shards of very uneven token counts over 4 ranks give the ranks different
numbers of packed batches; a rank that finishes early leaves the others in
their next all_reduce forever. With equal batches (the default) every rank
does an all_reduce per batch, as DDP does, and the epoch ends together: for
0 and 2 DataLoader workers, after a resume of each rank's own state under
StatefulDataLoader, and after a resume on another world size. A hang fails
by the timeout.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import shardstream
from conftest import free_port, reaped

WORKER = r"""
import json, os, sys
import torch
import torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader
from shardstream.torch import ShardDataset, gather_state_dict, passthrough
manifest, out, phase, workers, equal = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
ds = ShardDataset(manifest, batch_size=2, seed=7, tokens={
    "field": "tokens.npy", "seq_len": 32, "eod_token": 0, "equal_batches": equal})
dl = StatefulDataLoader(ds, batch_size=None, num_workers=workers, collate_fn=passthrough,
                        **({"multiprocessing_context": "fork"} if workers else {}))
result = {"rank": rank, "world": world}
def step(batch):
    # What DDP does in backward: a collective every rank must join.
    t = torch.ones(1)
    dist.all_reduce(t)
    assert batch["tokens"].shape[1] == 32
    return [k for k in batch["__key__"]]
if phase == "count":              # equal_batches off: no collectives, just the counts
    result["batches"] = sum(1 for _ in dl)
elif phase == "full":
    if workers == 0:
        result["len"] = len(ds)
    n, keys = 0, []
    for b in dl:
        keys += step(b)
        n += 1
    result["batches"], result["keys"] = n, keys
elif phase == "save":             # 3 steps, then each rank's own state and the merged one
    it = iter(dl)
    for _ in range(3):
        step(next(it))
    with open(os.path.join(out, f"own-{rank}.json"), "w") as f:
        json.dump(dl.state_dict(), f)
    if workers == 0:
        merged = gather_state_dict(ds)
        if rank == 0:
            with open(os.path.join(out, "merged.json"), "w") as f:
                json.dump(merged, f)
elif phase == "own":              # each rank its own state back (StatefulDataLoader)
    with open(os.path.join(out, f"own-{rank}.json")) as f:
        dl.load_state_dict(json.load(f))
    result["batches"] = sum(1 for b in dl if step(b) is not None)
elif phase == "merged":           # the merged state on another world size
    with open(os.path.join(out, "merged.json")) as f:
        ds.load_state_dict(json.load(f))
    result["len"] = len(ds)
    result["batches"] = sum(1 for b in ds.dataloader() if step(b) is not None)
with open(os.path.join(out, f"{phase}-{rank}.json"), "w") as f:
    json.dump(result, f)
dist.barrier()
dist.destroy_process_group()
"""



def run_ranks(manifest, out, phase, world, workers, equal=True):
    # MASTER_PORT: rank 0's store binds it and every rank must be told it before it starts,
    # so it cannot be port 0 (reserved here, then released: a small race, left as it is).
    port = free_port()
    # However this ends (a hang, a rank that failed), no rank or DataLoader worker outlives it.
    with reaped() as procs:
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen(
                [sys.executable, "-c", WORKER, manifest, out, phase, str(workers),
                 "1" if equal else "0"], env=env, stderr=subprocess.PIPE, text=True))
        try:
            for p in procs:
                _, err = p.communicate(timeout=150)
                assert p.returncode == 0, err
        except subprocess.TimeoutExpired:
            pytest.fail(f"phase {phase}: the ranks did not finish together (a hang)")
    results = []
    for rank in range(world):
        with open(os.path.join(out, f"{phase}-{rank}.json")) as f:
            results.append(json.load(f))
    return results


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """8 shards, documents from 3 to 1500 tokens: an even split of the
    documents is a very uneven split of the tokens."""
    root = tmp_path_factory.mktemp("uneven")
    g = 0
    entries = []
    for s, (docs, length) in enumerate([(40, 7), (3, 900), (25, 60), (6, 400), (50, 3), (2, 1500),
                                        (30, 41), (9, 222)]):
        with shardstream.ShardWriter(str(root), pattern=f"part{s}-%06d.tar",
                                     manifest_name=f"m{s}.jsonl", write_index=True) as w:
            for _ in range(docs):
                w.write({"__key__": f"d{g:05d}",
                         "tokens.npy": np.arange(length + g % 5, dtype=np.int32) + 1})
                g += 1
        entries.append((root / f"m{s}.jsonl").read_text())
    (root / "manifest.jsonl").write_text("".join(entries))
    return str(root / "manifest.jsonl")


def test_uneven_shards_give_ranks_different_counts_without_equal_batches(uneven, tmp_path):
    counts = [r["batches"] for r in run_ranks(uneven, str(tmp_path), "count", 4, 0, equal=False)]
    assert len(set(counts)) > 1, counts


@pytest.mark.parametrize("workers", [0, 2])
def test_four_ranks_finish_the_epoch_together(uneven, tmp_path, workers):
    results = run_ranks(uneven, str(tmp_path), "full", 4, workers)
    counts = [r["batches"] for r in results]
    assert len(set(counts)) == 1 and counts[0] > 0, counts
    if workers == 0:
        assert [r["len"] for r in results] == counts  # len() answers for token batches
    keys = [k for r in results for k in r["keys"]]
    assert len(keys) == len(set(keys)), "no document is read by two ranks"


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_of_each_ranks_own_state_ends_together(uneven, tmp_path, workers):
    run_ranks(uneven, str(tmp_path), "save", 4, workers)
    full = run_ranks(uneven, str(tmp_path), "full", 4, workers)[0]["batches"]
    counts = [r["batches"] for r in run_ranks(uneven, str(tmp_path), "own", 4, workers)]
    assert counts == [full - 3] * 4, (counts, full)


def test_a_merged_state_resumes_on_another_world_size_together(uneven, tmp_path):
    run_ranks(uneven, str(tmp_path), "save", 4, 0)
    results = run_ranks(uneven, str(tmp_path), "merged", 3, 0)
    counts = [r["batches"] for r in results]
    assert len(set(counts)) == 1 and counts[0] > 0, counts
    assert [r["len"] for r in results] == counts
