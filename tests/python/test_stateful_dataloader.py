"""ShardDataset under torchdata's StatefulDataLoader: a state taken after N
batches, loaded into a fresh data set and loader, delivers exactly the rest of
the epoch (every sample once), with 0, 1 and 2 worker processes (fork and
spawn, persistent or not), also when the worker count changes."""

import pickle

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from shardstream.torch import (ShardDataset, merge_state_dicts, passthrough,
                               state_dict_from_stateful_dataloader)

SEED = 5


def make_ds(manifest, **kw):
    return ShardDataset(manifest, fields=["cls"], batch_size=5, seed=SEED, shuffle_buffer=20, **kw)


def make_sdl(ds, workers, persistent=False, ctx=None):
    kw = {}
    if workers:
        kw = dict(persistent_workers=persistent, multiprocessing_context=ctx, prefetch_factor=3)
    return StatefulDataLoader(ds, batch_size=None, num_workers=workers, collate_fn=passthrough,
                              **kw)


def keys(batches):
    return [k for b in batches for k in b["__key__"]]


def take(it, n):
    return keys(next(it) for _ in range(n))


def epoch_keys(total):
    return sorted(f"s{i:06d}" for i in range(total))


def assert_exact(before, after, total):
    assert len(after) == len(set(after)), "a sample repeated after the resume"
    assert not set(before) & set(after), "a sample delivered before was delivered again"
    assert sorted(before + after) == epoch_keys(total), "samples lost"


def save_after(manifest, workers, n, persistent=False, ctx=None, extra=2):
    """Reads n batches, takes the state, reads `extra` more (they are lost
    with the process, as in a crash after the checkpoint); returns the keys of
    the n batches and the state (pickled, as a checkpoint is)."""
    ds = make_ds(manifest)
    sdl = make_sdl(ds, workers, persistent, ctx)
    it = iter(sdl)
    before = take(it, n)
    state = pickle.loads(pickle.dumps(sdl.state_dict()))
    take(it, extra)
    del it, sdl
    ds.close()
    return before, state


CASES = [
    (0, False, None),
    (1, False, "fork"),
    (1, True, "fork"),
    (2, False, "fork"),
    (2, True, "fork"),
    (2, False, "spawn"),
    (2, True, "spawn"),
]


@pytest.mark.parametrize("workers,persistent,ctx", CASES)
def test_resume_mid_epoch_is_exact(manifest, total, workers, persistent, ctx):
    # 7 batches: with two workers one of them is a batch ahead, and each has
    # prefetched batches the loop never saw.
    before, state = save_after(manifest, workers, 7, persistent, ctx)
    ds = make_ds(manifest)
    sdl = make_sdl(ds, workers, persistent, ctx)
    sdl.load_state_dict(state)
    after = keys(sdl)
    assert_exact(before, after, total)
    ds.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_resume_twice_is_exact(manifest, total, workers):
    before, state = save_after(manifest, workers, 3)
    ds = make_ds(manifest)
    sdl = make_sdl(ds, workers, ctx="fork")
    sdl.load_state_dict(state)
    it = iter(sdl)
    middle = take(it, 9)
    state2 = pickle.loads(pickle.dumps(sdl.state_dict()))
    del it, sdl
    ds.close()
    ds = make_ds(manifest)
    sdl = make_sdl(ds, workers, ctx="fork")
    sdl.load_state_dict(state2)
    after = keys(sdl)
    assert_exact(before + middle, after, total)
    ds.close()


@pytest.mark.parametrize("new_workers", [0, 1])
def test_two_workers_resume_on_fewer(manifest, total, new_workers):
    # StatefulDataLoader refuses another worker count; the data set's state,
    # merged over the workers, is loaded into the data set instead.
    before, state = save_after(manifest, 2, 7)
    merged = state_dict_from_stateful_dataloader(state)
    assert merged["consumers"][0]["members"] == [0, 1]
    ds = make_ds(manifest)
    ds.load_state_dict(merged)
    after = keys(make_sdl(ds, new_workers, ctx="fork"))
    assert_exact(before, after, total)
    ds.close()


@pytest.mark.parametrize("saved_workers", [1, 0])
def test_fewer_workers_resume_on_two(manifest, total, saved_workers):
    # One worker: 180 left, 90 per worker, none dropped. No worker: the
    # main-process state converts the same way.
    before, state = save_after(manifest, saved_workers, 4)
    ds = make_ds(manifest)
    ds.load_state_dict(state_dict_from_stateful_dataloader(state))
    after = keys(make_sdl(ds, 2, ctx="fork"))
    assert_exact(before, after, total)
    ds.close()


def test_finished_epoch_with_persistent_workers_goes_on_to_the_next(manifest, total):
    ds = make_ds(manifest)
    sdl = make_sdl(ds, 2, persistent=True, ctx="fork")
    assert sorted(keys(sdl)) == epoch_keys(total)
    state = pickle.loads(pickle.dumps(sdl.state_dict()))
    del sdl
    ds.close()
    ds = make_ds(manifest)
    sdl = make_sdl(ds, 2, persistent=True, ctx="fork")
    sdl.load_state_dict(state)
    assert sorted(keys(sdl)) == epoch_keys(total), "one whole epoch, not an empty one"
    ds.close()


def test_own_share_resumes_without_the_others(manifest, total):
    # Each rank saves its own state (no gather) and resumes it on the same rank.
    before, after = [], []
    saved = []
    for rank in range(2):
        ds = make_ds(manifest, rank=rank, world_size=2)
        it = iter(ds)
        before += take(it, 3 + rank)
        saved.append(ds.state_dict())
        ds.close()
    for rank in range(2):
        ds = make_ds(manifest, rank=rank, world_size=2)
        ds.load_state_dict(saved[rank])
        after += keys(ds)
        ds.close()
    assert_exact(before, after, total)
    # Merged, the same states resume on one rank.
    ds = make_ds(manifest)
    ds.load_state_dict(merge_state_dicts(saved))
    assert_exact(before, keys(ds), total)
    ds.close()


def test_another_consumers_share_alone_is_refused(manifest):
    ds = make_ds(manifest, rank=0, world_size=2)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    ds.close()
    other = make_ds(manifest, rank=1, world_size=2)
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="consumers \\[0\\] of 2"):
        next(iter(other))
    other.close()
