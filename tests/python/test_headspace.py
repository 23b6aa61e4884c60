"""Is the job waiting for data? measure_headspace and ReplayLoader, on a real
Loader and on a deliberately slow input (the control that the verdict can
flip)."""

import hashlib
import os
import threading
import time

import numpy as np
import pytest
import torch

import shardstream
from shardstream.torch import ShardDataset
from conftest import sample_ids


def slow(batches, seconds):
    """The batches, each after `seconds`: an input the loop must wait for."""
    for b in batches:
        time.sleep(seconds)
        yield b


def test_replay_gives_live_batches_then_own_copies_of_the_first_ones(manifest):
    with shardstream.Loader(manifest, batch_size=4, seed=1) as loader:
        replay = shardstream.ReplayLoader(loader, keep=3, live=5, replay=4)
        got = []
        for b in replay:
            got.append((replay.replaying, sample_ids(b), b))
        assert [r for r, _, _ in got] == [False] * 5 + [True] * 4
        live_ids = [ids for r, ids, _ in got if not r]
        assert len({tuple(i) for i in live_ids}) == 5        # five different batches
        assert [ids for r, ids, _ in got if r] == [live_ids[0], live_ids[1], live_ids[2], live_ids[0]]
        # The kept batches are copies, not views of the loader's pooled slots.
        assert not np.shares_memory(got[5][2]["tokens.npy"], got[0][2]["tokens.npy"])
        np.testing.assert_array_equal(got[5][2]["tokens.npy"], got[0][2]["tokens.npy"])
    with pytest.raises(ValueError, match="live .* must be at least keep"):
        shardstream.ReplayLoader([], keep=4, live=2)


def test_a_slow_input_is_input_bound_and_a_slow_step_is_not(manifest):
    def step(b):
        np.sort(b["tokens.npy"], axis=None)

    with shardstream.Loader(manifest, batch_size=4, seed=1) as loader:
        h = shardstream.measure_headspace(slow(loader, 0.02), step, steps=15, warmup=2,
                                          loader=loader)
    assert h.input_bound and h.cause == "waiting", h
    assert h.speedup > 3, h
    assert h.wait_share > 0.8 and h.wait_median_s >= 0.019, h
    assert h.loader_stats["batches"] > 0           # the loader's own counters came along
    assert str(h).startswith("input-bound: the loop waits for data in next()")

    with shardstream.Loader(manifest, batch_size=4, seed=1) as loader:
        h = shardstream.measure_headspace(loader, lambda b: time.sleep(0.02), steps=15, warmup=2)
    assert not h.input_bound and h.cause is None, h
    assert 0.9 < h.speedup < 1.05, h
    assert h.wait_share < 0.05, h
    assert "wait_seconds" in h.loader_stats        # batches itself had stats()
    assert str(h).startswith("not input-bound")


def busy(batches, count):
    """The batches at once, while threads burn every CPU (hashing, without the
    GIL) until the last of `count` is taken: a loader that never makes the loop
    wait but takes the step's cores."""
    stop = threading.Event()
    blob = os.urandom(1 << 20)

    def burn():
        while not stop.is_set():
            hashlib.sha256(blob).digest()
    threads = [threading.Thread(target=burn, daemon=True) for _ in range(2 * (os.cpu_count() or 1))]
    for t in threads:
        t.start()
    try:
        for i, b in enumerate(batches):
            if i == count - 1:  # the last one taken: the replay that follows runs alone
                stop.set()
            yield b
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_threads_that_take_the_steps_cpus_are_contention_not_waiting(manifest):
    blob = os.urandom(1 << 20)

    def step(b):
        for _ in range(8):
            hashlib.sha256(blob).digest()

    with shardstream.Loader(manifest, batch_size=4, seed=1) as loader:
        h = shardstream.measure_headspace(busy(loader, 12), step, steps=10, warmup=2, keep=4)
    assert h.input_bound and h.cause == "contention", h
    assert h.speedup > 1.3 and h.wait_share < 0.3, h
    assert "CPU contention" in str(h)


def test_a_dataloader_of_tensors_and_an_input_too_short(manifest):
    dl = torch.utils.data.DataLoader(ShardDataset(manifest, batch_size=4, seed=2),
                                     batch_size=None, num_workers=2)
    seen = []
    h = shardstream.measure_headspace(dl, lambda b: seen.append(b["tokens.npy"].sum().item()),
                                      steps=8, warmup=1, keep=4)
    assert len(seen) == 24 and seen[12:16] == seen[:4]  # 4 + 8 live, then the first 4 again
    assert h.steps == 8 and h.replay_step_s > 0
    with shardstream.Loader(manifest, batch_size=100) as loader:   # 2 batches in all
        with pytest.raises(ValueError, match=r"ended after 2 batches; it needs 21 \(max\(warmup, keep\)"):
            shardstream.measure_headspace(loader, lambda b: None, steps=5, warmup=1)


def test_the_copies_kept_for_the_replay_are_not_timed(manifest, monkeypatch):
    """Keeping a batch costs a copy (pinned memory on a GPU machine: a slow
    allocation); it is the measure's own cost, never the loader's wait."""
    import shardstream.headspace as hs
    real = hs.own_copy
    monkeypatch.setattr(hs, "own_copy", lambda b: (time.sleep(0.05), real(b))[1])
    with shardstream.Loader(manifest, batch_size=4, seed=1) as loader:
        h = shardstream.measure_headspace(loader, lambda b: time.sleep(0.01), steps=10,
                                          warmup=1, keep=8)
    # Timed, the copies would add 0.05 s to 8 of the 10 steps of 0.01 s. (Not input_bound:
    # on 2 busy cores the loader's threads alone once slowed the live steps past its 5%.)
    assert h.live_step_s < h.replay_step_s + 0.02 and h.wait_max_s < 0.04, h
