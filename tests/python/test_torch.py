"""shardstream.torch.ShardDataset with real torch DataLoaders."""

import gc
import os
import pickle
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

import shardstream
from shardstream.torch import ShardDataset, merge_state_dicts
from conftest import SEQ, sample_ids


def keys_of(loader, epochs=1, ds=None):
    out = []
    for e in range(epochs):
        if ds is not None:
            ds.set_epoch(e)
        for batch in loader:
            out.append(batch["__key__"])
    return out


def test_batches_are_zero_copy_tensors(manifest, total):
    ds = ShardDataset(manifest, fields=["tokens.npy", "cls"], batch_size=10, seed=1)
    assert len(ds) == total // 10
    dl = DataLoader(ds, batch_size=None, num_workers=0)
    n = 0
    for batch in dl:
        t = batch["tokens.npy"]
        assert isinstance(t, torch.Tensor) and t.dtype == torch.int32 and t.shape == (10, SEQ)
        assert t[:, 0].tolist() == sample_ids(batch)
        assert batch["cls"].dtype == torch.int64
        assert len(batch["__url__"]) == 10
        n += 1
    assert n == total // 10
    ds.close()


def test_single_samples_without_batch_size(manifest, total):
    ds = ShardDataset(manifest, fields=["tokens.npy", "txt"], batch_size=None, shuffle=False)
    samples = list(DataLoader(ds, batch_size=None))
    assert len(samples) == total == len(ds)
    s = samples[0]
    assert s["tokens.npy"].shape == (SEQ,) and isinstance(s["__key__"], str)
    assert s["txt"] == f"caption {int(s['__key__'][1:])}"


def test_tensors_outlive_dataset_and_loader(manifest):
    ds = ShardDataset(manifest, fields=["tokens.npy"], batch_size=8, prefetch=3)
    it = iter(DataLoader(ds, batch_size=None))
    kept = [next(it) for _ in range(4)]
    del it
    ds.close()
    del ds
    gc.collect()
    for b in kept:
        assert b["tokens.npy"][:, 0].tolist() == sample_ids(b)
        assert (b["tokens.npy"] + 1).sum().item() > 0


@pytest.mark.parametrize("method,persistent", [
    ("fork", False), ("fork", True), ("forkserver", False), ("spawn", True)])
def test_dataloader_workers_cover_every_sample_once(manifest, total, method, persistent):
    ds = ShardDataset(manifest, fields=["tokens.npy"], batch_size=10, seed=4)
    dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=method,
                    persistent_workers=persistent)
    epochs = []
    for e in range(2):
        ds.set_epoch(e)
        keys = [k for b in dl for k in b["__key__"]]
        assert len(keys) == len(set(keys)) == total
        epochs.append(keys)
    assert epochs[0] != epochs[1]  # set_epoch, or (persistent workers) the automatic advance


def test_dataset_pickles_without_native_handle(manifest):
    ds = ShardDataset(manifest, fields=["cls"], batch_size=5)
    next(iter(ds))
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._loader is None
    assert len(next(iter(clone))["__key__"]) == 5
    ds.close()
    clone.close()


def test_state_dict_round_trip_with_another_world_size(manifest, total):
    # Two ranks read a few batches each and save; three ranks resume.
    delivered, saved = [], []
    for rank in range(2):
        ds = ShardDataset(manifest, fields=["cls"], batch_size=6, seed=11, rank=rank,
                          world_size=2)
        it = iter(ds)
        for _ in range(3 + 2 * rank):
            delivered += next(it)["__key__"]
        saved.append(pickle.loads(pickle.dumps(ds.state_dict())))
        ds.close()
    merged = merge_state_dicts(saved)
    rest = []
    for rank in range(3):
        ds = ShardDataset(manifest, fields=["cls"], batch_size=6, seed=11, rank=rank,
                          world_size=3)
        ds.load_state_dict(merged)
        rest += [k for b in DataLoader(ds, batch_size=None) for k in b["__key__"]]
        assert ds.epoch == 1  # the resumed epoch finished
        ds.close()
    assert not set(delivered) & set(rest)
    assert len(set(delivered) | set(rest)) == len(delivered) + len(rest)
    assert total - 2 <= len(delivered) + len(rest) <= total


def test_shares_of_different_seeds_do_not_merge(manifest):
    # The shares' intersection is computed in C++ (merge_own_states); a share
    # of another seed is a ConfigError (a ValueError), not a silent merge.
    saved = []
    for rank, seed in ((0, 11), (1, 12)):
        ds = ShardDataset(manifest, fields=["cls"], batch_size=6, seed=seed, rank=rank,
                          world_size=2)
        next(iter(ds))
        saved.append(ds.state_dict())
        ds.close()
    with pytest.raises(shardstream.ConfigError, match="different epochs or data sets"):
        merge_state_dicts(saved)
    own = [d["consumers"][0]["state"] for d in saved]
    with pytest.raises(ValueError):
        shardstream.merge_own_states(own)
    assert shardstream.merge_own_states(own[:1]) != ""


def test_state_dict_between_epochs_and_bad_state(manifest):
    ds = ShardDataset(manifest, fields=["cls"], batch_size=50)
    list(ds)
    sd = ds.state_dict()
    assert sd["epoch"] == 1 and sd["consumers"] == []
    with pytest.raises(ValueError):
        ds.load_state_dict({"format": "other"})
    ds.close()


def test_topology_from_environment(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert shardstream.torch.topology() == (2, 4, 0, 1)


FORK_SCRIPT = r"""
import os, sys
import shardstream
from shardstream.torch import ShardDataset
ds = ShardDataset(sys.argv[1], fields=["cls"], batch_size=10, seed=1)
n = len(ds)           # native loader made in the parent, no threads yet
first = next(iter(ds))["__key__"]
pid = os.fork()
if pid == 0:
    keys = [k for b in ds for k in b["__key__"]]   # the child reopens its own
    os._exit(0 if len(keys) == 200 else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), len(first))
"""


def test_fork_after_import_and_iteration(manifest):
    out = subprocess.run([sys.executable, "-c", FORK_SCRIPT, manifest], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "child 0 10"


def test_dataloader_helper_passes_batches_through(manifest, total):
    ds = ShardDataset(manifest, fields=["tokens.npy"], batch_size=20)
    dl = ds.dataloader()
    assert dl.batch_size is None and dl.num_workers == 0
    n = 0
    for b in dl:
        assert type(b["__key__"]) is list and isinstance(b["tokens.npy"], torch.Tensor)
        n += len(b["__key__"])
    assert n == total
    ds.close()


def test_a_list_of_shards_and_a_directory(tmp_path, total):
    # Its own copy: learning counts writes .idx sidecars beside the shards.
    from conftest import make_shards
    d = str(tmp_path)
    make_shards(d)
    shards = sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".tar"))
    ds = ShardDataset(shards[:2], fields=["cls"], batch_size=10, shuffle=False)
    assert len(ds) == 5
    assert sum(len(b["__key__"]) for b in ds) == 50
    whole = ShardDataset(d, fields=["cls"], batch_size=10)
    assert sum(len(b["__key__"]) for b in whole.dataloader()) == total


_DISTRIBUTED_WORKERS = r"""
import logging, sys, torch.distributed as dist
from shardstream.torch import ShardDataset
manifest, store = sys.argv[1], sys.argv[2]

def keys(dl):
    return sorted(k for b in dl for k in b["__key__"])

ds = ShardDataset(manifest, fields=["cls"], batch_size=10, seed=3)
alone = ds.dataloader(num_workers=2)
assert alone.multiprocessing_context is None, alone.multiprocessing_context  # fork, as given
want = keys(ds.dataloader())
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
dl = ds.dataloader(num_workers=2)
assert dl.multiprocessing_context.get_start_method() == "forkserver"
assert keys(dl) == want
assert ds.dataloader(num_workers=2, multiprocessing_context="spawn") \
    .multiprocessing_context.get_start_method() == "spawn"  # a given context stays
records = []

class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())

logging.getLogger("shardstream").addHandler(Keep())
unpicklable = ShardDataset(manifest, fields=["cls"], batch_size=10, seed=3, map=lambda s: s)
assert unpicklable.dataloader(num_workers=2).multiprocessing_context is None
assert any("does not pickle" in m for m in records), records
dist.destroy_process_group()
print("ok", len(want))
"""


def test_dataloader_workers_under_distributed_come_from_a_forkserver(manifest, total, tmp_path):
    # A fork in a process with torch.distributed's threads can hang in the child (CPython
    # gh-112275); ds.dataloader() starts workers from a forkserver there, and keeps the data.
    r = subprocess.run([sys.executable, "-c", _DISTRIBUTED_WORKERS, str(manifest),
                        str(tmp_path / "store")], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["ok", str(total)]
