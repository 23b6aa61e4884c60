"""ShardDataset(map=..., batch_map=...): Python hooks on each sample and each
batch, collated back into batches, in DataLoader workers too, with the resume
still exact (every sample once across a mid-epoch state_dict)."""

import pickle
import traceback

import pytest
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import shardstream
from shardstream.torch import ShardDataset, passthrough
from conftest import SEQ, make_shards, sample_ids

SEED = 3


# Module-level hooks, so that they pickle into spawned workers too.
def double_and_label(sample):
    """tokens doubled, "id" added (the sample number), "cls" dropped."""
    out = dict(sample)
    out["tokens.npy"] = sample["tokens.npy"] * 2
    out["id"] = int(sample["__key__"][1:])
    out["caption"] = sample["txt"].upper()
    del out["cls"]
    return out


class Box:
    def __init__(self, value):
        self.value = value


def ragged(sample):
    """A tensor whose length depends on the sample, a float, bytes and an object."""
    i = int(sample["__key__"][1:])
    return {"__key__": sample["__key__"], "ragged": sample["tokens.npy"][: 1 + i % 3],
            "same": sample["tokens.npy"][:2], "half": i / 2, "raw": b"x" * (i % 4),
            "box": Box(i), "flag": i % 2 == 0}


def add_sum(batch):
    batch["sum"] = batch["tokens.npy"].sum(dim=1)
    return batch


def ids_of(keys):
    return [int(k[1:]) for k in keys]


def all_keys(total):
    return sorted(f"s{i:06d}" for i in range(total))


def make_ds(manifest, **kw):
    kw.setdefault("batch_size", 5)
    return ShardDataset(manifest, fields=["tokens.npy", "cls", "txt"], seed=SEED,
                        shuffle_buffer=20, **kw)


def ordered_ds(manifest, **kw):
    """Samples in manifest order (eval mode): s000000, s000001, ..."""
    return ShardDataset(manifest, fields=["tokens.npy", "cls", "txt"], batch_size=5, mode="eval",
                        **kw)


def check_mapped(batch, summed=False):
    """The values double_and_label must have made, and with `summed` (batch_map=add_sum) the
    "sum" add_sum must have added; without it, no "sum"."""
    ids = sample_ids(batch)
    assert batch["id"].dtype == torch.int64 and batch["id"].tolist() == ids
    t = batch["tokens.npy"]
    assert isinstance(t, torch.Tensor) and t.shape == (len(ids), SEQ)
    assert t[:, 0].tolist() == [2 * i for i in ids] and (t == t[:, :1]).all()
    assert batch["caption"] == [f"CAPTION {i}" for i in ids]
    assert batch["txt"] == [f"caption {i}" for i in ids]
    assert "cls" not in batch
    assert isinstance(batch["__url__"], list) and len(batch["__url__"]) == len(ids)
    if summed:
        assert "sum" in batch, "batch_map did not run"
        assert isinstance(batch["sum"], torch.Tensor)
        assert batch["sum"].tolist() == [2 * i * SEQ for i in ids]
    else:
        assert "sum" not in batch
    return batch["__key__"]


def test_map_changes_values_adds_and_drops_keys(manifest, total):
    ds = make_ds(manifest, map=double_and_label)
    seen = []
    for batch in ds.dataloader():
        assert isinstance(batch["__key__"], list)
        seen += check_mapped(batch)
    assert sorted(seen) == all_keys(total)
    ds.close()


def test_collate_keeps_differing_shapes_and_objects_as_lists(manifest, total):
    ds = make_ds(manifest, batch_size=6, map=ragged)
    n = 0
    for batch in ds:
        ids = sample_ids(batch)
        assert isinstance(batch["ragged"], list)
        assert [len(t) for t in batch["ragged"]] == [1 + i % 3 for i in ids]
        assert [t.tolist() for t in batch["ragged"]] == [[i] * (1 + i % 3) for i in ids]
        assert batch["same"].shape == (len(ids), 2), "equal shapes are stacked"
        assert batch["half"].dtype == torch.float64
        assert batch["half"].tolist() == [i / 2 for i in ids]
        assert batch["flag"].dtype == torch.bool
        assert batch["raw"] == [b"x" * (i % 4) for i in ids]
        assert [b.value for b in batch["box"]] == ids
        assert set(batch) == {"__key__", "ragged", "same", "half", "raw", "box", "flag"}
        n += len(ids)
    assert n == total
    ds.close()


def test_samples_with_different_keys_are_refused(manifest):
    def some_add(sample):
        if sample["__key__"].endswith("3"):
            sample["extra"] = 1
        return sample
    ds = ShardDataset(manifest, fields=["cls"], batch_size=20, mode="eval", map=some_add)
    with pytest.raises(ValueError, match="s000003.*same keys"):
        next(iter(ds))
    ds.close()


def test_batch_map_runs_after_map(manifest, total):
    ds = make_ds(manifest, map=double_and_label, batch_map=add_sum)
    seen = [k for batch in ds for k in check_mapped(batch, summed=True)]
    assert sorted(seen) == all_keys(total)
    # batch_map alone, returning something other than a dict.
    ds2 = make_ds(manifest, batch_map=lambda b: (b["tokens.npy"], b["__key__"]))
    x, keys = next(iter(ds2))
    assert x[:, 0].tolist() == ids_of(keys) and len(keys) == 5
    ds.close()
    ds2.close()


def test_single_samples_with_map(manifest, total):
    ds = make_ds(manifest, batch_size=None, map=double_and_label)
    samples = list(ds)
    assert len(samples) == total
    for s in samples[:20]:
        i = int(s["__key__"][1:])
        assert isinstance(s["__key__"], str) and isinstance(s["__url__"], str)
        assert s["tokens.npy"].shape == (SEQ,) and s["tokens.npy"][0].item() == 2 * i
        assert s["id"] == i and s["caption"] == f"CAPTION {i}" and "cls" not in s
    # A DataLoader batches the mapped samples.
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert batch["id"].tolist() == ids_of(batch["__key__"])
    assert batch["tokens.npy"][:, 0].tolist() == [2 * i for i in batch["id"].tolist()]
    ds.close()


def test_bad_arguments_are_refused(manifest):
    with pytest.raises(shardstream.ConfigError, match="batch_map"):
        make_ds(manifest, batch_size=None, batch_map=add_sum)
    with pytest.raises(shardstream.ConfigError, match="token"):
        ShardDataset(manifest, tokens={"field": "tokens.npy", "seq_len": 8}, map=double_and_label)
    with pytest.raises(TypeError, match="callable"):
        make_ds(manifest, map="not a function")
    with pytest.raises(TypeError, match="'batch_map'"):
        make_ds(manifest, batchmap=add_sum)


def fail_on_13(sample):
    if sample["__key__"] == "s000013":
        raise ValueError("bad pixels")
    return sample


def test_an_exception_in_map_names_the_sample_and_a_fresh_iter_works(manifest, total):
    ds = ordered_ds(manifest, map=fail_on_13)
    it = iter(ds)
    before = []
    with pytest.raises(RuntimeError, match=r"ValueError on sample 's000013'.*bad pixels") as err:
        for batch in it:
            before += batch["__key__"]
    assert isinstance(err.value.__cause__, ValueError)
    assert ".tar" in str(err.value), "the shard url is named"
    assert before == all_keys(10), "the batches before the failing one were delivered"
    # The state does not count the failed batch as delivered.
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    with pytest.raises(StopIteration):
        next(it)
    # A fresh iter() starts the epoch again (and fails on the same sample again).
    again = next(iter(ds))
    assert again["__key__"] == all_keys(5)
    ds.close()
    # The state resumes with the failed batch, on a data set whose map works.
    ds = ordered_ds(manifest, map=double_and_label)
    ds.load_state_dict(state)
    after = [k for b in ds for k in check_mapped(b)]
    assert after[:5] == [f"s{i:06d}" for i in range(10, 15)]
    assert sorted(before + after) == all_keys(total) and len(set(after)) == len(after)
    ds.close()


def drop_every_third(sample):
    """None for samples 0, 3, 6, ...: dropped, as WebDataset's select."""
    return None if int(sample["__key__"][1:]) % 3 == 0 else sample


def fail_on_multiples_of_7(sample):
    i = int(sample["__key__"][1:])
    if i % 7 == 0:
        raise ValueError(f"cannot decode {i}")
    return sample


def test_map_returning_none_drops_the_sample_and_counts_it(manifest, total):
    ds = ordered_ds(manifest, map=drop_every_third)
    keys = [k for b in ds for k in b["__key__"]]
    assert keys == [k for k in all_keys(total) if int(k[1:]) % 3]
    dropped = sum(1 for i in range(total) if i % 3 == 0)
    assert ds.stats()["map_dropped"] == dropped and ds.stats()["map_errors"] == 0
    # Single samples: dropped ones are not yielded.
    single = ShardDataset(manifest, fields=["tokens.npy", "cls", "txt"], batch_size=None,
                          mode="eval", map=drop_every_third)
    assert [s["__key__"] for s in single] == keys
    ds.close()
    single.close()


@pytest.mark.parametrize("policy", ["skip_sample", "skip_shard"])
def test_an_exception_in_map_under_a_skip_policy_skips_the_sample(manifest, total, policy, caplog):
    ds = ordered_ds(manifest, map=fail_on_multiples_of_7, error_policy=policy)
    with caplog.at_level("WARNING", logger="shardstream"):
        it = iter(ds)
        head = [k for _ in range(4) for k in next(it)["__key__"]]
        # A state mid-epoch counts the skipped samples as delivered: the
        # resume neither repeats nor loses any sample.
        state = pickle.loads(pickle.dumps(ds.state_dict()))
        rest = [k for b in it for k in b["__key__"]]
    assert head + rest == [k for k in all_keys(total) if int(k[1:]) % 7]
    assert ds.stats()["map_errors"] == sum(1 for i in range(total) if i % 7 == 0)
    logged = [r.getMessage() for r in caplog.records if "ShardDataset map raised" in r.getMessage()]
    assert len(logged) == 3 and "ValueError on sample 's000000'" in logged[0]
    assert ".tar" in logged[0] and policy in logged[0]
    ds.close()
    resumed = ordered_ds(manifest, map=fail_on_multiples_of_7, error_policy=policy)
    resumed.load_state_dict(state)
    assert [k for b in resumed for k in b["__key__"]] == rest
    resumed.close()
    # Under "raise" (the default) it stops the epoch, naming the sample.
    raising = ordered_ds(manifest, map=fail_on_multiples_of_7)
    with pytest.raises(RuntimeError, match="ValueError on sample 's000000'"):
        next(iter(raising))
    raising.close()


def test_map_returning_no_dict_and_batch_map_errors(manifest):
    ds = ordered_ds(manifest, map=lambda s: s["tokens.npy"])
    with pytest.raises(TypeError, match="returned Tensor for sample 's000000'"):
        next(iter(ds))
    ds.close()

    def bad_batch(batch):
        raise KeyError("input_ids")
    ds = ordered_ds(manifest, batch_map=bad_batch)
    with pytest.raises(RuntimeError, match="batch_map raised KeyError on the batch of 5 samples "
                                           "'s000000', 's000001', 's000002', ..."):
        next(iter(ds))
    ds.close()


def test_an_exception_in_a_worker_names_the_sample(manifest):
    ds = ordered_ds(manifest, map=fail_on_13)
    dl = ds.dataloader(num_workers=2, multiprocessing_context="fork")
    it = iter(dl)
    with pytest.raises(RuntimeError, match="s000013") as err:
        for _ in it:
            pass
    # The traceback holds the DataLoader iterator in a reference cycle: free
    # it (and stop its workers) now, not in the garbage collection of a later
    # test's forked worker, where its finalizer's imports break CPython 3.11's
    # import locks.
    traceback.clear_frames(err.tb)
    del err, it
    ds.close()


def test_state_dict_resume_is_exact_with_hooks(manifest, total):
    ds = make_ds(manifest, map=double_and_label, batch_map=add_sum)
    it = iter(ds)
    before = [k for _ in range(7) for k in check_mapped(next(it), summed=True)]
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    next(it)  # read after the state: lost, as in a crash
    ds.close()
    ds = make_ds(manifest, map=double_and_label, batch_map=add_sum)
    ds.load_state_dict(state)
    after = [k for b in ds.dataloader() for k in check_mapped(b, summed=True)]
    assert len(after) == len(set(after)) and not set(before) & set(after)
    assert sorted(before + after) == all_keys(total)
    ds.close()


def sdl_for(ds, ctx):
    return StatefulDataLoader(ds, batch_size=None, num_workers=2, collate_fn=passthrough,
                              multiprocessing_context=ctx, prefetch_factor=3)


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_stateful_dataloader_two_workers_resume_is_exact(manifest, total, ctx):
    ds = make_ds(manifest, map=double_and_label, batch_map=add_sum)
    sdl = sdl_for(ds, ctx)
    it = iter(sdl)
    before = [k for _ in range(7) for k in check_mapped(next(it), summed=True)]
    state = pickle.loads(pickle.dumps(sdl.state_dict()))
    for _ in range(2):
        next(it)  # lost with the process
    del it, sdl
    ds.close()
    ds = make_ds(manifest, map=double_and_label, batch_map=add_sum)
    sdl = sdl_for(ds, ctx)
    sdl.load_state_dict(state)
    after = [k for b in sdl for k in check_mapped(b, summed=True)]
    assert len(before) == 35
    assert len(after) == len(set(after)), "a sample repeated after the resume"
    assert not set(before) & set(after), "a sample delivered before was delivered again"
    assert sorted(before + after) == all_keys(total), "samples lost"
    ds.close()


def test_images_as_objects(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    manifest = make_shards(str(tmp_path), nshards=2, per_shard=4)

    def to_image(sample):
        i = int(sample["__key__"][1:])
        return {"image": Image.new("L", (4 + i, 4), color=i), "label": sample["cls"]}
    ds = ShardDataset(manifest, fields=["cls"], batch_size=4, mode="eval", map=to_image)
    batches = list(ds)
    assert [img.size for b in batches for img in b["image"]] == [(4 + i, 4) for i in range(8)]
    assert torch.cat([b["label"] for b in batches]).tolist() == [i % 10 for i in range(8)]
    assert "__key__" not in batches[0], "map dropped the key"
    ds.close()


def test_hooks_run_on_a_data_set_without_sample_counts(tmp_path):
    # A brace pattern with learning off: no counts, so no resume state to
    # keep before each batch; the hooks run all the same.
    with shardstream.ShardWriter(str(tmp_path), max_samples=5) as w:
        for i in range(10):
            w.write({"__key__": f"n{i}", "cls": i})
    ds = ShardDataset(str(tmp_path / "shard-{000000..000001}.tar"), batch_size=5, shuffle=False,
                      fields=["cls"], learn_sample_counts=False,
                      map=lambda s: {**s, "cls": s["cls"] * 10})
    got = sorted(int(v) for b in ds for v in b["cls"])
    assert got == [10 * i for i in range(10)]
