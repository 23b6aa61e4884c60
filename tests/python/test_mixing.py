"""Mixing data sets with ShardDataset(streams=...): shares by weight, repeat and
choose, per-stream counts, exact resume under StatefulDataLoader with 2
workers, and packed token batches from mixed streams."""

import collections

import numpy as np
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

import shardstream
from shardstream.torch import ShardDataset, passthrough


def write(root, prefix, n, per):
    with shardstream.ShardWriter(str(root), max_samples=per, write_index=True) as w:
        for i in range(n):
            w.write({"__key__": f"{prefix}{i:03d}", "cls": i,
                     "tokens.npy": np.full(5 + (i * 37) % 90, i + 1, dtype=np.int32)})
    return str(root / "manifest.jsonl")


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    return write(root / "a", "a", 100, 25), write(root / "b", "b", 40, 20)


def keys_of(loader):
    return [k for b in loader for k in b["__key__"]]


def test_weights_take_their_shares_and_name_them_in_stats(sets):
    a, b = sets
    ds = ShardDataset(streams=[{"inputs": a, "weight": 0.7, "name": "web"},
                               {"inputs": b, "weight": 0.3, "name": "code"}],
                      fields=["cls"], batch_size=10, epoch_size=200, seed=1)
    keys = keys_of(ds.dataloader())
    counts = collections.Counter(k[0] for k in keys)
    assert counts == {"a": 140, "b": 60}
    assert ds.stats()["stream_samples"] == {"web": 140, "code": 60}
    assert len(ds) == 20


def test_repeat_and_choose(sets):
    a, b = sets
    ds = ShardDataset(streams=[{"inputs": [a], "repeat": 2}, {"inputs": b, "choose": 10}],
                      fields=["cls"], batch_size=10)
    counts = collections.Counter(keys_of(ds))
    assert sum(n for k, n in counts.items() if k[0] == "a") == 200
    assert all(n == 2 for k, n in counts.items() if k[0] == "a")
    assert sum(n for k, n in counts.items() if k[0] == "b") == 10


def test_stateful_dataloader_with_two_workers_resumes_the_mix_exactly(sets):
    a, b = sets
    def loader():
        ds = ShardDataset(streams=[{"inputs": a, "weight": 3}, {"inputs": b, "weight": 1}],
                          fields=["cls"], batch_size=8, epoch_size=160, seed=4)
        return StatefulDataLoader(ds, batch_size=None, num_workers=2, collate_fn=passthrough,
                                  multiprocessing_context="fork")
    full = collections.Counter(keys_of(loader()))
    assert sum(full.values()) == 160
    dl = loader()
    it = iter(dl)
    seen = [k for _ in range(7) for k in next(it)["__key__"]]
    state = dl.state_dict()
    del it, dl
    dl = loader()
    dl.load_state_dict(state)
    rest = keys_of(dl)
    assert collections.Counter(seen) + collections.Counter(rest) == full


def test_packed_tokens_from_mixed_streams(sets):
    a, b = sets
    ds = ShardDataset(streams=[{"inputs": a, "weight": 1}, {"inputs": b, "weight": 1}],
                      tokens={"field": "tokens.npy", "seq_len": 32, "eod_token": 0},
                      batch_size=4, seed=2)
    widths, docs = [], []
    for t in ds:  # batches view pool slots: keep what is needed, not the batches
        widths.append(t["tokens"].shape[1])
        docs += t["__key__"]
    assert len(widths) == len(ds) > 0 and set(widths) == {32}
    assert collections.Counter(k[0] for k in docs) == {"a": 70, "b": 70}


def test_bad_streams(sets):
    a, b = sets
    with pytest.raises(shardstream.ConfigError, match="every stream or for none"):
        next(iter(ShardDataset(streams=[{"inputs": a, "weight": 1}, {"inputs": b}],
                               fields=["cls"])))
    with pytest.raises(shardstream.ConfigError, match="unknown key 'weigth'"):
        next(iter(ShardDataset(streams=[{"inputs": a, "weigth": 1}], fields=["cls"])))
    with pytest.raises(TypeError, match="urls, or streams"):
        ShardDataset(fields=["cls"])
