"""On a CUDA device: batch slots really page-locked and freed through
cudaFreeHost, `.cuda(non_blocking=True)` copies that never read a slot the
loader has already refilled, and the pageable fallback when CUDA is hidden.

The tests that need a device are skipped, saying so, where PyTorch sees no CUDA
device (the same paths run on every machine against a stand-in runtime,
tests/cuda_stub); the pageable fallback needs none and runs everywhere, a
CPU-only CI machine included. benchmarks/gpu_benchmark.py measures what these check.
"""

import ctypes
import gc
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from shardstream.torch import ShardDataset
from conftest import make_shards

# Only on the tests that use a device: the pageable fallback hides CUDA itself.
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device: torch.cuda.is_available() is False here")

SEQ = 2048


def cudart():
    """The CUDA runtime PyTorch has loaded (the one shardstream uses too)."""
    torch.cuda.init()
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            continue
    pytest.fail("PyTorch uses CUDA, but no libcudart is loaded in this process")


def host_flags(rt, ptr):
    """cudaHostGetFlags: (error, flags); error 0 only for page-locked memory
    the runtime allocated or registered."""
    flags = ctypes.c_uint(0)
    err = rt.cudaHostGetFlags(ctypes.byref(flags), ctypes.c_void_p(ptr))
    return err, flags.value


@pytest.fixture(scope="module")
def token_manifest(tmp_path_factory):
    # 12 shards of 40 samples, each [2048] int32 holding its sample number.
    return make_shards(str(tmp_path_factory.mktemp("gpu")), nshards=12, per_shard=40, seq=SEQ)


def ids_of(batch):
    return [int(k[1:]) for k in batch["__key__"]]


@needs_cuda
def test_batch_slots_are_page_locked_and_freed_through_cuda_free_host(token_manifest):
    rt = cudart()
    ds = ShardDataset(token_manifest, fields=["tokens.npy"],
                                  batch_size=16, shuffle_buffer=0)
    ptrs = set()
    for batch in ds.dataloader():
        t = batch["tokens.npy"]
        assert t.is_pinned(), "a batch tensor is not page-locked"
        err, flags = host_flags(rt, t.data_ptr())
        assert err == 0, f"cudaHostGetFlags on a batch slot failed with error {err}"
        assert flags & 1, f"slot not allocated portable (cudaHostGetFlags {flags:#x})"
        ptrs.add(t.data_ptr() - t.storage_offset() * t.element_size())
        g = t.cuda(non_blocking=True)
        torch.cuda.current_stream().synchronize()
        ids = torch.tensor(ids_of(batch), dtype=torch.int32, device=g.device)
        assert torch.equal(g, ids.view(-1, 1).expand(-1, SEQ))
    assert ds.stats()["memory_kind"] == "cuda_pinned"
    assert 0 < len(ptrs) <= ds.stats()["slots"]
    ds.close()
    del batch, t, g, ds
    gc.collect()
    for p in ptrs:
        err, _ = host_flags(rt, p)
        assert err != 0, "a slot is still page-locked after its loader was freed"
    rt.cudaGetLastError()  # the expected failures above must not reach PyTorch's next check


@needs_cuda
def test_a_dropped_batch_is_not_refilled_while_its_copy_is_queued(token_manifest):
    # The GPU is kept busy (matrix products queued ahead) so every copy waits in the
    # queue while the loop drops the host batch and takes the next ones; with
    # prefetch=1 the loader has 3 slots and must reuse a dropped slot long
    # before its copy has run. Every copied row must still hold its sample.
    ds = ShardDataset(token_manifest, fields=["tokens.npy"],
                                  batch_size=8, shuffle_buffer=0, prefetch=1)
    copies = []
    a = torch.randn(4096, 4096, device="cuda")
    for batch in ds.dataloader():
        for _ in range(20):  # a few milliseconds of GPU work queued before the copy
            a = torch.tanh(a @ a)
        copies.append((ids_of(batch), batch["tokens.npy"].cuda(non_blocking=True)))
        del batch  # the slot goes back now, with the copy still queued
    torch.cuda.synchronize()
    assert len(copies) == 12 * 40 // 8
    seen = []
    for ids, g in copies:
        want = torch.tensor(ids, dtype=torch.int32, device=g.device).view(-1, 1).expand(-1, SEQ)
        bad = (g != want).any(dim=1).nonzero().flatten().tolist()
        assert not bad, f"rows {bad} of the batch with samples {ids} were overwritten"
        seen += ids
    assert sorted(seen) == list(range(12 * 40))
    assert ds.stats()["copy_waits"] > 0, "the loader never waited for a queued copy"


def test_without_a_visible_device_batches_are_pageable_and_the_same(token_manifest):
    code = textwrap.dedent(f"""
        from shardstream.torch import ShardDataset
        ds = ShardDataset({token_manifest!r}, fields=["tokens.npy"],
                                      batch_size=16, shuffle_buffer=0)
        rows = 0
        for batch in ds.dataloader():
            t = batch["tokens.npy"]
            ids = [int(k[1:]) for k in batch["__key__"]]
            assert all(int(t[r].min()) == int(t[r].max()) == ids[r] for r in range(len(ids)))
            rows += len(ids)
        import torch
        assert not torch.cuda.is_available()
        print(ds.stats()["memory_kind"], rows)
        """)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["pageable", str(12 * 40)]


@needs_cuda
def test_headspace_waits_for_the_gpu_work_of_each_step(tmp_path):
    """measure_headspace's sync="auto" counts a step's GPU work in that step (the step
    launches matrix products and returns without waiting): the loop is not called
    input-bound, and its steps take at least the GPU's time; with sync=None that time
    would fall into the next next()."""
    import shardstream
    manifest = make_shards(str(tmp_path / "s"))
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a @ a
    end.record()
    end.synchronize()
    gpu_s = start.elapsed_time(end) / 1e3

    def step(b):
        torch.from_numpy(b["tokens.npy"]).cuda(non_blocking=True)
        for _ in range(20):
            a @ a

    with shardstream.Loader(manifest, batch_size=4, seed=0) as loader:
        h = shardstream.measure_headspace(loader, step, steps=10, warmup=2)
    assert not h.input_bound, h
    assert h.live_step_s >= 0.9 * gpu_s and h.replay_step_s >= 0.9 * gpu_s, (h, gpu_s)
    assert h.wait_share < 0.1, h
