"""len() is what arrives, for every topology, and nothing is dropped silently.

A DataLoader asks ``len(dataset)`` in its main process without saying how
many workers will split the data set; each worker's share ends in its own
last batch, so one consumer's count is wrong by up to a batch per worker
(packed tokens: 608 said, 603 arrived with 3 workers). The equal-batches cut
that keeps DDP ranks together leaves documents out of the longer shares:
``stats()`` counts them.
"""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import shardstream
from shardstream.torch import ShardDataset, passthrough

TOKENS = {"field": "tokens.npy", "seq_len": 128, "eod_token": 0}


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """1,000 documents of 20-400 tokens in 10 shards, with sample indexes."""
    root = tmp_path_factory.mktemp("docs")
    rng = np.random.default_rng(0)
    lengths = []
    with shardstream.ShardWriter(str(root), max_samples=100, write_index=True) as w:
        for i in range(1000):
            n = int(rng.integers(20, 400))
            lengths.append(n)
            w.write({"__key__": f"d{i:05d}", "cls": i % 10,
                     "tokens.npy": np.full(n, i + 1, dtype=np.int32)})
    return str(root / "manifest.jsonl"), lengths


def arrived(dl):
    return sum(1 for _ in dl)


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_len_of_a_dataloader_over_packed_tokens_is_what_arrives(documents, workers):
    ds = ShardDataset(documents[0], batch_size=8, seed=1, tokens=TOKENS)
    dl = DataLoader(ds, batch_size=None, num_workers=workers, collate_fn=passthrough,
                    **({"multiprocessing_context": "fork"} if workers else {}))
    said = len(dl)
    assert said == arrived(dl) == arrived(dl)
    if workers:
        # The trap: one consumer's count, which a DataLoader of workers never gives.
        assert len(ds) != said


def test_len_with_equal_batches_off_and_sample_batches(documents):
    ds = ShardDataset(documents[0], batch_size=8, seed=1, tokens=dict(TOKENS, equal_batches=False))
    dl = ds.dataloader(num_workers=2, multiprocessing_context="fork")
    assert len(dl) == arrived(dl)
    samples = ShardDataset(documents[0], batch_size=7, seed=1, fields=["cls"])
    dl = samples.dataloader(num_workers=3, multiprocessing_context="fork")
    assert len(dl) == arrived(dl)
    # The DataLoader batching the samples: each worker's last batch is short.
    single = ShardDataset(documents[0], batch_size=None, seed=1, fields=["cls"])
    for drop in (False, True):
        dl = DataLoader(single, batch_size=7, drop_last=drop, num_workers=3,
                        multiprocessing_context="fork")
        assert len(dl) == arrived(dl)
    assert len(single) == 1000
    dropping = ShardDataset(documents[0], batch_size=7, seed=1, fields=["cls"],
                            drop_last=True)
    dl = dropping.dataloader(num_workers=3, multiprocessing_context="fork")
    assert len(dl) == arrived(dl)


def test_len_under_stateful_dataloader_and_on_two_ranks(documents):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    for rank in range(2):
        ds = ShardDataset(documents[0], batch_size=8, seed=1, tokens=TOKENS, rank=rank,
                          world_size=2)
        dl = stateful.StatefulDataLoader(ds, batch_size=None, num_workers=2,
                                         collate_fn=passthrough, multiprocessing_context="fork")
        assert len(dl) == arrived(dl)


def test_the_equal_batches_cut_is_counted_in_stats(documents):
    manifest, lengths = documents
    consumers = []
    for rank in range(2):
        loader = shardstream.Loader(manifest, batch_size=8, seed=1, tokens=TOKENS, rank=rank,
                                    world_size=2)
        docs = sum(len(b["__key__"]) for b in loader)
        consumers.append((docs, loader.samples_per_epoch, loader.stats()))
    cut = [s["cut_samples"] for _, _, s in consumers]
    assert sum(cut) > 0, "the shares differ, so the longer one is cut"
    for docs, planned, s in consumers:
        assert docs + s["cut_samples"] == planned
        assert 0 <= s["cut_tokens"] <= s["cut_samples"] * max(lengths)
        assert s["cut_tokens"] > 0 or s["cut_samples"] == 0
    cut_consumer = consumers[cut.index(max(cut))][2]
    text = shardstream.metrics.to_prometheus(cut_consumer)
    assert f"shardstream_loader_cut_tokens_total {cut_consumer['cut_tokens']}" in text
