"""ShardDataset honours torch habits: every iter() is a fresh pass over the
current epoch (peeking loses nothing), a DataLoader that would batch the
batches is refused at once, and the keyword arguments are checked."""

import pytest
import torch
from torch.utils.data import DataLoader

import shardstream
from shardstream.torch import ShardDataset
from conftest import SEQ, sample_ids

BATCHING_MESSAGE = "give the DataLoader batch_size=None"


def make_ds(manifest, **kw):
    kw.setdefault("batch_size", 10)
    return ShardDataset(manifest, fields=["tokens.npy", "cls"], seed=3, shuffle_buffer=50, **kw)


def ids(batches):
    return [i for b in batches for i in sample_ids(b)]


def fresh_epoch(manifest, epoch):
    ds = make_ds(manifest)
    ds.set_epoch(epoch)
    out = ids(ds)
    ds.close()
    return out


def test_peek_then_loop_yields_the_whole_epoch_in_order(manifest, total):
    expected = fresh_epoch(manifest, 0)
    assert sorted(expected) == list(range(total))
    ds = make_ds(manifest)
    peeked = next(iter(ds))
    assert sample_ids(peeked) == expected[:10]
    assert ids(ds) == expected, "the loop after a peek reads the whole epoch, from its start"
    assert ds.epoch == 1, "the completed loop moved on to the next epoch"
    ds.close()


def test_peek_through_a_dataloader_loses_nothing(manifest, total):
    expected = fresh_epoch(manifest, 0)
    ds = make_ds(manifest)
    dl = ds.dataloader()
    next(iter(dl))
    assert ids(dl) == expected
    ds.close()


def test_break_then_loop_again_gives_the_whole_epoch(manifest, total):
    expected = fresh_epoch(manifest, 0)
    ds = make_ds(manifest)
    seen = []
    for i, b in enumerate(ds):
        seen += sample_ids(b)
        if i == 6:
            break
    assert seen == expected[:70]
    assert ds.epoch == 0, "a pass left with break does not end the epoch"
    assert ids(ds) == expected
    ds.close()


def test_an_older_iterator_cannot_go_on_after_a_newer_one_started(manifest):
    ds = make_ds(manifest)
    old = iter(ds)
    next(old)
    new = iter(ds)
    next(new)
    with pytest.raises(RuntimeError, match="newer iter"):
        next(old)
    ds.close()


def test_after_a_completed_pass_the_next_iter_reads_the_next_epoch(manifest, total):
    ds = make_ds(manifest)
    first = ids(ds)
    second = ids(ds)
    assert sorted(first) == sorted(second) == list(range(total))
    assert first != second, "another epoch, another order"
    assert second == fresh_epoch(manifest, 1)
    ds.set_epoch(0)
    assert ids(ds) == first, "set_epoch(0) reads epoch 0 again"
    ds.close()


def test_set_epoch_during_a_pass_is_not_overridden_by_its_end(manifest):
    ds = make_ds(manifest)
    for i, _ in enumerate(ds):
        if i == 0:
            ds.set_epoch(5)
    assert ds.epoch == 5
    assert ids(ds) == fresh_epoch(manifest, 5)
    ds.close()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("dl_kwargs", [{"batch_size": 8}, {}], ids=["batch_size=8", "default"])
def test_dataloader_batching_a_batching_dataset_is_refused(manifest, workers, dl_kwargs):
    ds = make_ds(manifest, batch_size=32)
    kw = {"multiprocessing_context": "fork"} if workers else {}
    dl = DataLoader(ds, num_workers=workers, **dl_kwargs, **kw)
    with pytest.raises(shardstream.ConfigError) as err:
        next(iter(dl))  # with workers: the worker's exception, raised again here
    text, is_value_error = str(err.value), isinstance(err.value, ValueError)
    # The traceback holds the DataLoader iterator in a reference cycle; freed
    # by the garbage collector, its worker shutdown would wait 5 s a worker.
    del err
    assert "ShardDataset batches itself (batch_size=32)" in text
    assert BATCHING_MESSAGE in text and "ShardDataset(..., batch_size=None)" in text
    assert is_value_error
    ds.close()


def test_refused_before_any_batch_is_read(manifest, total):
    ds = make_ds(manifest, batch_size=32)
    with pytest.raises(shardstream.ConfigError, match=BATCHING_MESSAGE):
        iter(DataLoader(ds, batch_size=8))  # num_workers=0: at iter() already
    assert ds.stats() == {}, "no native loader was opened"
    # The same data set still works the recommended way.
    assert sorted(ids(ds.dataloader())) == list(range(total))
    ds.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_batches_single_samples(manifest, total, workers):
    ds = make_ds(manifest, batch_size=None)
    kw = {"multiprocessing_context": "fork"} if workers else {}
    dl = DataLoader(ds, batch_size=8, num_workers=workers, **kw)
    got, sizes = [], []
    for b in dl:
        keys = b["__key__"]
        sizes.append(len(keys))
        assert isinstance(keys, list) and all(isinstance(k, str) for k in keys)
        t = b["tokens.npy"]
        assert isinstance(t, torch.Tensor) and t.dtype == torch.int32
        assert t.shape == (len(keys), SEQ) and len(keys) <= 8
        assert t[:, 0].tolist() == sample_ids(b)
        assert b["cls"].tolist() == [i % 10 for i in sample_ids(b)]
        got += sample_ids(b)
    assert len(got) == total and sorted(got) == list(range(total)), "every sample once"
    # Each worker batches its own share (100 samples: 12 batches of 8 and one of 4).
    assert sorted(sizes) == ([8] * 25 if workers == 0 else [4, 4] + [8] * 24)
    ds.close()


def test_dataloader_batch_size_8_gives_batches_of_8(manifest, total):
    ds = make_ds(manifest, batch_size=None)
    sizes = [len(b["__key__"]) for b in DataLoader(ds, batch_size=8)]
    assert sizes == [8] * (total // 8)
    ds.close()


@pytest.mark.parametrize("bad", ["shuffle_bufer", "batchsize", "cache_dri", "no_such_option"])
def test_misspelt_keyword_raises_type_error_at_construction(manifest, bad):
    with pytest.raises(TypeError, match=repr(bad)):
        ShardDataset(manifest, fields=["cls"], **{bad: 1})


def test_misspelt_keyword_suggests_the_name(manifest):
    with pytest.raises(TypeError, match="did you mean 'shuffle_buffer'"):
        ShardDataset(manifest, shuffle_bufer=10)


def test_keyword_arguments_reach_the_loader(manifest, total):
    # shuffle=False with one reader and one open shard: each shard's 25
    # samples in order, one shard after another; drop_last: 6 batches of 30.
    # shuffle_size (the alias) and a passed-through option are accepted.
    ds = ShardDataset(manifest, fields=["cls"], batch_size=30, shuffle=False, shuffle_size=7,
                      drop_last=True, reader_threads=1, open_shards=1, prefetch=2,
                      direct_reads=False)
    got = ids(ds)
    assert len(got) == len(set(got)) == total // 30 * 30
    assert all(b == a + 1 for a, b in zip(got, got[1:]) if b % 25), "no sample shuffle"
    ds.close()
    with pytest.raises(TypeError, match="from the DataLoader"):
        ShardDataset(manifest, num_workers=2)
