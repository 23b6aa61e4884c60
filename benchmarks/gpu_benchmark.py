"""shardstream on a GPU: copy rate, copy/compute overlap, and two training loops vs WebDataset.

    python benchmarks/gpu_benchmark.py --dir DATA_DIR --json OUT.json [--device cuda] [--tiny]
        [--parts copy,overlap,transformer,resnet,cpu] [--threads 16]

One script, one run, sized to take about two minutes on one GPU (H100/H200 class) with 16
cores, data generation included. `--device cpu --tiny` runs every code path except the
CUDA-specific calls on a CPU in well under a minute (that is how it is tested without a GPU).

Data (written into --dir once, reused while their parameters match):
- tokens: --token-samples samples of --seq int32 tokens in [0, 32000), one .npy each, in
  shards of --tokens-per-shard samples (several shards per WebDataset worker);
- images: --images samples of synthetic natural-statistics JPEGs (vision_benchmark.synth_jpeg,
  300..640 px, quality 90; --unique-images distinct pictures, repeated under other keys and
  labels, which costs a loader the same decode work and saves generation time), labels
  0..999, in shards of --images-per-shard samples, generated on --threads processes.

Parts (each in try/except: one failing part leaves the others' figures; the JSON is rewritten
after every part, so a run cut short keeps what it measured):
1. copy: host->device copy rate of a pinned [256, 2048] int32 shardstream batch
   (`.cuda(non_blocking=True)`, and `dst.copy_(..., non_blocking=True)`), against a torch
   pinned buffer of the same bytes (`.cuda`, `copy_`) and a raw `cudaMemcpyAsync` on torch's
   current stream (libcudart through ctypes, when found), and a pageable tensor. CUDA events
   around --copy-reps copies, median of --copy-rounds rounds; GB/s = 1e9 bytes/s.
2. overlap: a measured timeline. Batch n+1 (shardstream, [256, 2048]) is copied on a side
   stream while the compute stream runs a matmul-heavy step on batch n; the loop waits for the
   step at its end (as `loss.item()` does). CUDA events give each copy and each step as an
   interval from one origin; reported: the share of copy time inside compute intervals, and
   the same loop with the copy on the compute stream (serial) for contrast.
3. transformer: a decoder-only transformer (d 1024, 24 layers, 16 heads, vocab 32000, ~370M
   parameters; SDPA causal attention; bf16 autocast; AdamW, fused on CUDA) trained on token
   batches [B, seq] (inputs tokens[:, :-1], targets tokens[:, 1:]): shardstream as users run it
   (ShardDataset(manifest, fields=["tokens.npy"], batch_size=B, seed=0), shuffle on with its
   default buffer, ds.dataloader()) vs WebDataset's recommended setup
   (WebDataset(urls, shardshuffle=len(urls)).shuffle(1000).decode().to_tuple("tokens.npy")
   .batched(B) under DataLoader(batch_size=None, num_workers=--wds-token-workers,
   pin_memory=True, persistent_workers=True)), plus a reference with the batch already on the
   GPU (no loader).
4. resnet: ResNet-50 (torchvision's, or the same network defined here when torchvision is
   missing), bf16 autocast, channels_last, SGD, batch 256 of 224x224: shardstream with JPEG
   decode, random-resized crop and flip on its C++ reader threads (reader_threads=--threads)
   giving uint8 [B, 224, 224, 3], which the step makes NCHW channels_last float and normalises
   on the GPU, vs WebDataset (WebDataset(urls, shardshuffle=len(urls)).shuffle(1000)
   .decode("pil").to_tuple("jpg", "cls").map_tuple(RandomResizedCrop(224) + RandomHorizontalFlip
   + PILToTensor, identity).batched(B) under DataLoader(batch_size=None, num_workers=--threads,
   pin_memory=True, persistent_workers=True)); torchvision.transforms.v2 when torchvision is
   there, else vision_benchmark's equivalent PIL code), plus the GPU-only reference.

5. cpu: the CPU controls on the ResNet-50 loop of 4 (shardstream only): the default threads,
   reader_nice=10, the training thread alone on the first CPU with reader_cpus the others, and
   half the reader threads, on an idle node and again with one neighbour process per two CPUs
   decoding the same images flat out (other ranks' loaders); then shardstream.measure_headspace (the live loop against the same
   batches replayed from memory: is the loop input-bound?).

Training loops (3, 4, 5): --warmup steps not counted, then --steps timed steps. Per step: wait =
time in next(iterator) plus issuing the host->device copies (non_blocking); step = wall time
from the start of next() to the end of the step, which ends with loss.item() (a synchronisation,
as a logging loop has). Reported: median step ms, wait share = sum(wait) / sum(step) (goal for
shardstream: <= 1%), median and max wait, tokens/s or images/s over the timed steps. Each
loader is closed (threads joined, workers shut down) before the next one runs.
"""

import argparse
import contextlib
import ctypes
import gc
import math
import multiprocessing
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench_common import finish_dir, prepare_dir, shard_paths, write_json  # noqa: E402

T0 = time.perf_counter()
VOCAB = 32000
# torch.from_numpy of a PIL image's read-only array (WebDataset's transform, in its workers).
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def log(*a) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s]", *a, flush=True)


class PartTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise PartTimeout("part timed out (--part-timeout)")


# -- sizes ---------------------------------------------------------------------------------

FULL = dict(seq=2048, token_samples=8192, tokens_per_shard=512,
            copy_batch=256, copy_reps=200, copy_rounds=5,
            overlap_batch=256, overlap_iters=20, overlap_n=8192, overlap_mm=4,
            tf_dim=1024, tf_layers=24, tf_heads=16, tf_batch=8,
            images=16384, unique_images=4096, images_per_shard=256, rn_batch=256, rn_size=224,
            warmup=5, steps=30, ref_steps=10)
TINY = dict(seq=128, token_samples=1024, tokens_per_shard=64,
            copy_batch=32, copy_reps=20, copy_rounds=3,
            overlap_batch=32, overlap_iters=6, overlap_n=128, overlap_mm=2,
            tf_dim=64, tf_layers=2, tf_heads=2, tf_batch=4,
            images=256, unique_images=64, images_per_shard=16, rn_batch=8, rn_size=64,
            warmup=2, steps=5, ref_steps=3)


# -- data ----------------------------------------------------------------------------------

def make_tokens(root: str, samples: int, seq: int, per_shard: int) -> str:
    import shardstream
    params = {"kind": "tokens", "version": 1, "samples": samples, "seq": seq, "vocab": VOCAB,
              "per_shard": per_shard, "seed": 0}
    out = os.path.join(root, f"tokens_n{samples}_s{seq}_p{per_shard}")
    manifest = os.path.join(out, "manifest.jsonl")
    if prepare_dir(out, params) is not None:
        log(f"data: reusing {out}")
        return manifest
    t = time.perf_counter()
    rng = np.random.default_rng(0)
    with shardstream.ShardWriter(out, max_bytes="4GiB", max_samples=per_shard,
                                 write_index=True) as w:
        for start in range(0, samples, 1024):
            n = min(1024, samples - start)
            block = rng.integers(0, VOCAB, size=(n, seq), dtype=np.int32)
            for i in range(n):
                w.write({"__key__": f"s{start + i:08d}", "tokens.npy": block[i]})
    finish_dir(out, params)
    log(f"data: {samples} token samples [{seq}] in {len(shard_paths(manifest))} shards, "
        f"{time.perf_counter() - t:.1f} s")
    return manifest


def make_images(root: str, images: int, unique: int, per_shard: int, procs: int) -> str:
    import shardstream
    import vision_benchmark as vb
    unique = max(1, min(unique, images))
    params = {"kind": "images", "version": 1, "images": images, "unique": unique,
              "per_shard": per_shard, "generator": dict(vb.DATA_PARAMS)}
    out = os.path.join(root, f"images_n{images}_u{unique}_p{per_shard}")
    manifest = os.path.join(out, "manifest.jsonl")
    if prepare_dir(out, params) is not None:
        log(f"data: reusing {out}")
        return manifest
    t = time.perf_counter()
    log(f"data: generating {unique} distinct JPEGs on {procs} processes")
    labels = np.random.default_rng(1).integers(0, 1000, size=images)
    jpegs = []
    total = 0
    with shardstream.ShardWriter(out, max_bytes="4GiB", max_samples=per_shard,
                                 write_index=True) as w:

        def put(i: int) -> None:
            nonlocal total
            jpeg = jpegs[i % unique]
            total += len(jpeg)
            w.write({"__key__": f"img{i:08d}", "jpg": jpeg, "cls": int(labels[i])})

        with multiprocessing.get_context("fork").Pool(procs) as pool:
            for n, (_key, jpeg, _label, _w, _h) in enumerate(
                    pool.imap(vb.synth_jpeg, range(unique), chunksize=4)):
                jpegs.append(jpeg)
                put(n)  # sample n < unique is picture n: written while the others are drawn
                if (n + 1) % 1000 == 0:
                    log(f"data: {n + 1}/{unique} JPEGs")
        for i in range(unique, images):
            put(i)
    finish_dir(out, params)
    log(f"data: {images} images ({unique} distinct, {total / images / 1024:.0f} KiB mean), "
        f"{total / 2**20:.0f} MiB in {len(shard_paths(manifest))} shards, "
        f"{time.perf_counter() - t:.1f} s")
    return manifest


# -- helpers -------------------------------------------------------------------------------

class Feed:
    """Batches from a DataLoader across epochs (set_epoch before each, when given)."""

    def __init__(self, dl, set_epoch=None):
        self.dl, self.set_epoch = dl, set_epoch
        self.it = None
        self.epoch = 0
        self.in_epoch = 0

    def next(self):
        while True:
            if self.it is None:
                if self.set_epoch is not None:
                    self.set_epoch(self.epoch)
                self.it = iter(self.dl)
                self.in_epoch = 0
            try:
                b = next(self.it)
            except StopIteration:
                if self.in_epoch == 0:
                    raise RuntimeError("the loader yielded no batch in an epoch")
                self.it = None
                self.epoch += 1
                continue
            self.in_epoch += 1
            return b

    def close(self):
        for it in (self.it, getattr(self.dl, "_iterator", None)):
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                try:
                    shutdown()
                except Exception:  # noqa: BLE001 - best effort
                    pass
        self.it = None


class Clock:
    """CUDA events on a GPU; perf_counter stamps (of synchronous work) on a CPU."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"

    def mark(self, stream=None):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record(stream)
            return e
        return time.perf_counter()

    def ms(self, a, b) -> float:
        if self.cuda:
            return a.elapsed_time(b)
        return (b - a) * 1000.0

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def wait(self, e):
        if self.cuda:
            e.synchronize()


def scalars(d: dict) -> dict:
    return {k: v for k, v in (d or {}).items()
            if isinstance(v, (int, float, str, bool)) or v is None}


def fmt(v, spec: str, scale: float = 1.0) -> str:
    """A number formatted, or "-" for None (a figure that could not be computed)."""
    return "-" if v is None else format(v * scale, spec)


def find_loaded_lib(stem: str, names: tuple):
    """(ctypes library, path or name) of a shared library this process has already loaded
    whose file name starts with `stem` (found in /proc/self/maps, else by the sonames in
    `names`), or (None, why)."""
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                p = fields[5] if len(fields) >= 6 else ""
                if os.path.basename(p).startswith(stem) and p not in paths:
                    paths.append(p)
    except OSError:
        pass
    for name in paths + list(names):
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL), name
        except OSError:
            pass
    return None, f"no {stem}* loaded in this process"


def find_cudart():
    """(ctypes library, how) for the CUDA runtime torch already loaded, or (None, why)."""
    return find_loaded_lib("libcudart.so", ("libcudart.so.13", "libcudart.so.12",
                                            "libcudart.so"))


def summarize_loop(rec: list, warmup: int, items: int, unit: str, first_batch_s) -> dict:
    timed = rec[warmup:]
    waits = [r[0] for r in timed]
    steps = [r[1] for r in timed]
    total = sum(steps)
    return {
        "steps": len(timed), "warmup": warmup,
        "median_step_ms": statistics.median(steps) * 1e3,
        "mean_step_ms": total / len(steps) * 1e3,
        "wait_share": sum(waits) / total if total > 0 else None,
        "median_wait_ms": statistics.median(waits) * 1e3,
        "max_wait_ms": max(waits) * 1e3,
        "sum_wait_s": sum(waits), "sum_step_s": total,
        f"{unit}_per_s": items * len(timed) / total if total > 0 else None,
        "first_batch_s": first_batch_s,
        "warmup_s": sum(r[1] for r in rec[:warmup]),
        "loss_first": rec[0][2], "loss_last": rec[-1][2],
        "wait_ms": [w * 1e3 for w in waits], "step_ms": [s * 1e3 for s in steps],
    }


def run_loop(next_batch, to_dev, step, warmup: int, steps: int):
    """[(wait_s, step_s, loss)] per step, and the time to the first batch."""
    rec = []
    t_start = time.perf_counter()
    first = None
    for _ in range(warmup + steps):
        t0 = time.perf_counter()
        b = next_batch()
        xs = to_dev(b)
        t1 = time.perf_counter()
        if first is None:
            first = t1 - t_start
        loss = step(*xs)
        lv = float(loss.item())  # the step's end: a synchronisation, as logging does
        t2 = time.perf_counter()
        del b, xs, loss
        rec.append((t1 - t0, t2 - t0, lv))
    return rec, first


def guarded(out: dict, name: str, fn) -> None:
    """Runs one loader's measurement; an exception is recorded in out["errors"][name] and the
    part goes on with the next loader (a part timeout still ends the part)."""
    try:
        fn()
    except PartTimeout:
        raise
    except Exception:  # noqa: BLE001
        out.setdefault("errors", {})[name] = traceback.format_exc()
        log(f"{name}: FAILED\n{out['errors'][name]}")


def wds_webdataset(wds, urls):
    try:
        return wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
    except TypeError:  # an older WebDataset without empty_check
        return wds.WebDataset(urls, shardshuffle=len(urls))


def free_memory(dev):
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# -- part 1: copy --------------------------------------------------------------------------

def part_copy(args, S, dev, tok_manifest, out: dict) -> None:
    from shardstream.torch import ShardDataset
    clock = Clock(dev)
    cuda = dev.type == "cuda"
    ds = ShardDataset(tok_manifest, fields=["tokens.npy"], batch_size=S["copy_batch"], seed=0)
    feed = Feed(ds.dataloader(), ds.set_epoch)
    t = feed.next()["tokens.npy"]
    nbytes = t.numel() * t.element_size()
    pinned_ss = bool(t.is_pinned())
    log(f"copy: shardstream batch {list(t.shape)} {t.dtype}, {nbytes / 2**20:.1f} MiB, "
        f"is_pinned={pinned_ss}")
    pageable = torch.empty(t.shape, dtype=t.dtype)
    pageable.copy_(t)
    pinned = torch.empty(t.shape, dtype=t.dtype, pin_memory=cuda)
    pinned.copy_(t)
    dst = torch.empty(t.shape, dtype=t.dtype, device=dev)

    def h2d(x):
        # On a CPU .to("cpu") copies nothing: clone stands in, to run the code path.
        return x.to(dev, non_blocking=True) if cuda else x.clone()

    variants = [
        ("shardstream_cuda", "shardstream batch .cuda(non_blocking=True)", lambda: h2d(t)),
        ("shardstream_copy_", "shardstream batch dst.copy_(non_blocking=True)",
         lambda: dst.copy_(t, non_blocking=True)),
        ("pinned_cuda", "torch pinned .cuda(non_blocking=True)", lambda: h2d(pinned)),
        ("pinned_copy_", "torch pinned dst.copy_(non_blocking=True)",
         lambda: dst.copy_(pinned, non_blocking=True)),
        ("pageable_cuda", "pageable .cuda(non_blocking=True)", lambda: h2d(pageable)),
    ]
    cudart_how = None
    if cuda:
        cudart, cudart_how = find_cudart()
        if cudart is not None:
            memcpy_async = cudart.cudaMemcpyAsync
            memcpy_async.restype = ctypes.c_int
            memcpy_async.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_int, ctypes.c_void_p]
            stream_handle = torch.cuda.current_stream().cuda_stream  # torch's stream: 0, legacy

            def memcpy(src):
                # cudaMemcpyHostToDevice = 1
                err = memcpy_async(dst.data_ptr(), src.data_ptr(), nbytes, 1, stream_handle)
                if err != 0:
                    raise RuntimeError(f"cudaMemcpyAsync returned error {err}")

            variants.insert(2, ("shardstream_memcpy", "shardstream batch cudaMemcpyAsync",
                                lambda: memcpy(t)))
            variants.insert(5, ("pinned_memcpy", "torch pinned cudaMemcpyAsync",
                                lambda: memcpy(pinned)))
        log(f"copy: cudart {'found: ' if cudart is not None else 'not found: '}{cudart_how}")

    reps, rounds = S["copy_reps"], S["copy_rounds"]
    out.update({"bytes": nbytes, "shape": list(t.shape), "dtype": str(t.dtype),
                "shardstream_is_pinned": pinned_ss,
                "torch_pinned_is_pinned": bool(pinned.is_pinned()),
                "pageable_is_pinned": bool(pageable.is_pinned()), "reps": reps,
                "rounds": rounds, "cudart": cudart_how, "variants": {}})
    for key, label, copy_once in variants:
        for _ in range(10):
            copy_once()
        clock.sync()
        gbs = []
        for _ in range(rounds):
            a = clock.mark()
            for _ in range(reps):
                copy_once()
            b = clock.mark()
            clock.sync()
            ms = clock.ms(a, b)
            gbs.append(reps * nbytes / (ms / 1e3) / 1e9 if ms > 0 else None)
        med = statistics.median([g for g in gbs if g is not None]) if any(gbs) else None
        out["variants"][key] = {"label": label, "gb_per_s": med, "rounds_gb_per_s": gbs,
                                "us_per_copy": nbytes / (med * 1e9) * 1e6 if med else None}
        log(f"copy: {label:48s} {fmt(med, '8.2f')} GB/s")
    out["copy_correct"] = bool(torch.equal(h2d(t).cpu(), t))  # the bytes arrived intact
    v = out["variants"]

    def rate(k):
        return (v.get(k) or {}).get("gb_per_s")

    base_key = "pinned_memcpy" if rate("pinned_memcpy") else "pinned_copy_"
    out["baseline"] = base_key
    out["ratio_to_baseline"] = (rate("shardstream_cuda") / rate(base_key)
                                if rate("shardstream_cuda") and rate(base_key) else None)
    out["ratio_to_pinned_cuda"] = (rate("shardstream_cuda") / rate("pinned_cuda")
                                   if rate("shardstream_cuda") and rate("pinned_cuda") else None)
    out["ratio_copy__to_baseline"] = (rate("shardstream_copy_") / rate(base_key)
                                      if rate("shardstream_copy_") and rate(base_key) else None)
    out["goal_ratio"] = 0.8
    out["shardstream_stats"] = scalars(ds.stats())
    del t
    feed.close()
    ds.close()


# -- part 2: overlap -----------------------------------------------------------------------

def interval_overlap(intervals, covers) -> float:
    """Length of `intervals` lying inside the union of `covers` (all (start, end) in ms)."""
    merged = []
    for s, e in sorted(covers):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    total = 0.0
    for s, e in intervals:
        for cs, ce in merged:
            total += max(0.0, min(e, ce) - max(s, cs))
    return total


def part_overlap(args, S, dev, tok_manifest, out: dict) -> None:
    from shardstream.torch import ShardDataset
    clock = Clock(dev)
    cuda = dev.type == "cuda"
    n = S["overlap_n"]
    gen = torch.Generator(device=dev).manual_seed(0)
    A = torch.randn(n, n, device=dev, generator=gen).to(torch.bfloat16)
    Bm = torch.randn(n, n, device=dev, generator=gen).to(torch.bfloat16)
    inv = 1.0 / math.sqrt(n)

    def compute(x):
        s = x[:, :8].float().mean() * 1e-9  # depends on the batch
        y = A * (1.0 + s).to(torch.bfloat16)
        for _ in range(S["overlap_mm"]):
            y = torch.mm(y, Bm)
            y.mul_(inv)
        return y

    def one(mode: str) -> dict:
        ds = ShardDataset(tok_manifest, fields=["tokens.npy"], batch_size=S["overlap_batch"],
                          seed=1 if mode == "pipelined" else 2)
        feed = Feed(ds.dataloader(), ds.set_epoch)
        comp = torch.cuda.current_stream() if cuda else None
        side = (torch.cuda.Stream() if mode == "pipelined" else comp) if cuda else None

        def copy_on(stream, host):
            ctx = torch.cuda.stream(stream) if cuda else contextlib.nullcontext()
            with ctx:
                k0 = clock.mark(stream)
                g = host.to(dev, non_blocking=True) if cuda else host.clone()
                k1 = clock.mark(stream)
            return g, k0, k1

        # Warm up (kernels, allocator) outside the timeline.
        for _ in range(2):
            compute(feed.next()["tokens.npy"].to(dev))
        clock.sync()
        iters = S["overlap_iters"]
        origin = clock.mark(comp)
        hosts = [feed.next()["tokens.npy"]]
        cur, k0, k1 = copy_on(side, hosts[-1])
        copies = [(k0, k1)]
        computes = []
        t_loop = time.perf_counter()
        for i in range(iters):
            if cuda:
                comp.wait_event(copies[-1][1])  # batch n is on the GPU
                cur.record_stream(comp)
            c0 = clock.mark(comp)
            compute(cur)
            c1 = clock.mark(comp)
            computes.append((c0, c1))
            nxt = None
            if i + 1 < iters:
                hosts.append(feed.next()["tokens.npy"])  # host batch n+1, kept until done
                nxt, k0, k1 = copy_on(side, hosts[-1])
                copies.append((k0, k1))
            clock.wait(c1)  # the step's end (loss.item() in a training loop)
            hosts = hosts[-2:]
            cur = nxt
        clock.sync()
        loop_s = time.perf_counter() - t_loop
        del hosts, cur
        feed.close()
        ds.close()
        rel = [(clock.ms(origin, a), clock.ms(origin, b)) for a, b in copies]
        crel = [(clock.ms(origin, a), clock.ms(origin, b)) for a, b in computes]
        timeline, own = [], []
        for j in range(len(crel)):
            entry = {"n": j, "compute_n": list(crel[j])}
            if j + 1 < len(rel):
                cp = rel[j + 1]
                entry["copy_n_plus_1"] = list(cp)
                length = cp[1] - cp[0]
                inside = max(0.0, min(cp[1], crel[j][1]) - max(cp[0], crel[j][0]))
                entry["copy_inside_compute_n"] = inside / length if length > 0 else None
                own.append(inside)
            timeline.append(entry)
        next_copies = rel[1:]
        copy_total = sum(e - s for s, e in next_copies)
        inside_any = interval_overlap(next_copies, crel)
        compute_ms = [e - s for s, e in crel]
        return {
            "mode": mode, "iters": iters, "batch": S["overlap_batch"],
            "matmuls_per_step": S["overlap_mm"], "matmul_n": n,
            "overlap_share": inside_any / copy_total if copy_total > 0 else None,
            "overlap_share_own_step": sum(own) / copy_total if copy_total > 0 else None,
            "median_copy_ms": statistics.median([e - s for s, e in next_copies])
            if next_copies else None,
            "median_compute_ms": statistics.median(compute_ms),
            "timeline_span_ms": crel[-1][1] - rel[0][0],
            "loop_wall_s": loop_s,
            "first_copy": list(rel[0]),
            "timeline": timeline,
        }

    for mode in ("pipelined", "serial"):
        r = one(mode)
        out[mode] = r
        log(f"overlap: {mode:9s} copy {fmt(r['median_copy_ms'], '.3f')} ms, compute "
            f"{fmt(r['median_compute_ms'], '.2f')} ms, overlap share "
            f"{fmt(r['overlap_share'], '.2f')}, span {fmt(r['timeline_span_ms'], '.1f')} ms")


# -- part 3: transformer -------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d, bias=False)
        self.fc2 = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d: int, layers: int, heads: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def part_transformer(args, S, dev, tok_manifest, out: dict) -> None:
    import webdataset as wds
    from shardstream.torch import ShardDataset
    cuda = dev.type == "cuda"
    B, seq = S["tf_batch"], S["seq"]
    t = time.perf_counter()
    with torch.device(dev):
        model = GPT(VOCAB, seq - 1, S["tf_dim"], S["tf_layers"], S["tf_heads"])
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True if cuda else None)
    log(f"transformer: {params / 1e6:.0f}M parameters, batch [{B}, {seq}], "
        f"made in {time.perf_counter() - t:.1f} s")

    def step(x):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1).long())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    items = B * (seq - 1)
    W, N = S["warmup"], S["steps"]
    out.update({"parameters": params, "batch": B, "seq": seq, "tokens_per_step": items,
                "d_model": S["tf_dim"], "layers": S["tf_layers"], "heads": S["tf_heads"],
                "vocab": VOCAB, "loaders": {}})

    fixed = torch.randint(0, VOCAB, (B, seq), dtype=torch.int32, device=dev)
    pinned = []

    def reference():
        # The batch already on the GPU (also warms kernels up for both loaders).
        rec, first = run_loop(lambda: fixed, lambda b: (b,), step, min(W, 3), S["ref_steps"])
        out["loaders"]["reference"] = summarize_loop(rec, min(W, 3), items, "tokens", first)
        report_loop("transformer", "reference (on GPU)", out["loaders"]["reference"], "tokens")

    def shardstream_run():
        # shardstream, as users run it.
        ds = ShardDataset(tok_manifest, fields=["tokens.npy"], batch_size=B, seed=0)
        feed = Feed(ds.dataloader(), ds.set_epoch)
        pinned.clear()

        def ss_dev(b):
            x = b["tokens.npy"]
            if not pinned:
                pinned.append(bool(x.is_pinned()))
                assert tuple(x.shape) == (B, seq) and x.dtype == torch.int32, (x.shape, x.dtype)
            return (x.to(dev, non_blocking=True),)

        try:
            rec, first = run_loop(feed.next, ss_dev, step, W, N)
            r = summarize_loop(rec, W, items, "tokens", first)
            r.update(is_pinned=pinned[0], epochs_started=feed.epoch + 1,
                     stats=scalars(ds.stats()))
            out["loaders"]["shardstream"] = r
            report_loop("transformer", "shardstream", r, "tokens")
        finally:
            feed.close()
            ds.close()

    def webdataset_run():
        # WebDataset, its recommended setup.
        urls = shard_paths(tok_manifest)
        workers = args.wds_token_workers
        wds_ds = (wds_webdataset(wds, urls).shuffle(1000).decode().to_tuple("tokens.npy")
                  .batched(B, partial=False))
        dl = torch.utils.data.DataLoader(wds_ds, batch_size=None, num_workers=workers,
                                         pin_memory=cuda, persistent_workers=True)
        feed = Feed(dl)
        pinned.clear()

        def wds_dev(b):
            x = b[0]
            if not pinned:
                pinned.append(bool(x.is_pinned()))
                assert tuple(x.shape) == (B, seq) and x.dtype == torch.int32, (x.shape, x.dtype)
            return (x.to(dev, non_blocking=True),)

        try:
            rec, first = run_loop(feed.next, wds_dev, step, W, N)
            r = summarize_loop(rec, W, items, "tokens", first)
            r.update(is_pinned=pinned[0], epochs_started=feed.epoch + 1, num_workers=workers,
                     shards=len(urls))
            out["loaders"]["webdataset"] = r
            report_loop("transformer", "webdataset", r, "tokens")
        finally:
            feed.close()

    for name, fn in (("reference", reference), ("shardstream", shardstream_run),
                     ("webdataset", webdataset_run)):
        guarded(out, name, fn)
        gc.collect()
    ratio(out)
    del model, opt, fixed


def ratio(out: dict) -> None:
    lo = out["loaders"]
    ss, wd, ref = lo.get("shardstream"), lo.get("webdataset"), lo.get("reference")
    if ss and wd:
        out["step_ratio_webdataset_over_shardstream"] = (wd["median_step_ms"]
                                                         / ss["median_step_ms"])
    if ss and ref:
        out["shardstream_over_reference_step"] = ss["median_step_ms"] / ref["median_step_ms"]
    if wd and ref:
        out["webdataset_over_reference_step"] = wd["median_step_ms"] / ref["median_step_ms"]
    out["goal_wait_share"] = 0.01


def report_loop(part: str, name: str, r: dict, unit: str) -> None:
    log(f"{part}: {name:20s} step {fmt(r['median_step_ms'], '8.1f')} ms (median), wait share "
        f"{fmt(r['wait_share'], '6.2f', 100)}%, wait median {fmt(r['median_wait_ms'], '.3f')} ms "
        f"max {fmt(r['max_wait_ms'], '.1f')} ms, {fmt(r[unit + '_per_s'], '.0f')} {unit}/s, "
        f"first batch {fmt(r['first_batch_s'], '.2f')} s")


# -- part 4: resnet ------------------------------------------------------------------------

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + idt)


class ResNet50(nn.Module):
    """torchvision's resnet50 (v1.5: stride on the 3x3), for when torchvision is missing."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            mods = []
            for i in range(blocks):
                mods.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
            layers.append(nn.Sequential(*mods))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class PilRRCFlip:
    """torchvision v2 RandomResizedCrop(size, antialias=True) + RandomHorizontalFlip() on a PIL
    image as vision_benchmark.rrc_flip_to_tensor does it, for any size: [size, size, 3] uint8."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img):
        import vision_benchmark as vb
        if self.size == vb.SIZE:
            return vb.rrc_flip_to_tensor(img)
        from PIL import Image
        width, height = img.size
        area = height * width
        for _ in range(10):
            target = area * torch.empty(1).uniform_(0.08, 1.0).item()
            ar = math.exp(torch.empty(1).uniform_(math.log(3 / 4), math.log(4 / 3)).item())
            w = int(round(math.sqrt(target * ar)))
            h = int(round(math.sqrt(target / ar)))
            if 0 < w <= width and 0 < h <= height:
                i = int(torch.randint(0, height - h + 1, size=(1,)).item())
                j = int(torch.randint(0, width - w + 1, size=(1,)).item())
                break
        else:
            w, h = min(width, height), min(width, height)
            i, j = (height - h) // 2, (width - w) // 2
        img = img.crop((j, i, j + w, i + h)).resize((self.size, self.size), Image.BILINEAR)
        if torch.rand(1) < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(img))


def image_transform(size: int):
    """(transform, description): torchvision v2 when torchvision imports, else the PIL code."""
    try:
        from torchvision.transforms import v2
        return (v2.Compose([v2.RandomResizedCrop(size, antialias=True),
                            v2.RandomHorizontalFlip(), v2.PILToTensor()]),
                "torchvision.transforms.v2 RandomResizedCrop+RandomHorizontalFlip+PILToTensor")
    except Exception:  # noqa: BLE001 - torchvision missing or broken
        return PilRRCFlip(size), "vision_benchmark.rrc_flip_to_tensor (PIL, as torchvision v2)"


def identity(x):
    return x


def resnet_model(S, dev):
    """ResNet-50 and its training step (x, y) -> loss: (model, opt, step, which, params)."""
    cuda = dev.type == "cuda"
    B, size = S["rn_batch"], S["rn_size"]
    t = time.perf_counter()
    try:
        from torchvision.models import resnet50
        with torch.device(dev):
            model = resnet50(weights=None)
        which = "torchvision.models.resnet50"
    except Exception:  # noqa: BLE001 - missing, or not matching this torch
        with torch.device(dev):
            model = ResNet50()
        which = "ResNet50 defined in gpu_benchmark.py (torchvision missing)"
    model = model.to(memory_format=torch.channels_last)
    params = sum(p.numel() for p in model.parameters())
    if cuda:
        torch.backends.cudnn.benchmark = True
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    log(f"resnet: {which}, {params / 1e6:.1f}M parameters, batch {B} x {size}px, made in "
        f"{time.perf_counter() - t:.1f} s")

    def step(x, y):
        if x.shape[-1] == 3:  # [B, H, W, 3]: an NCHW view in channels_last memory
            x = x.permute(0, 3, 1, 2)
        x = x.contiguous(memory_format=torch.channels_last).float()
        x = x.sub_(mean).div_(std)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step, which, params


def image_fields(size: int) -> list:
    return [{"name": "jpg", "decode": "image", "size": [size, size], "crop": "random_resized",
             "flip": True}, "cls"]


def part_resnet(args, S, dev, img_manifest, out: dict) -> None:
    import webdataset as wds
    from shardstream.torch import ShardDataset
    cuda = dev.type == "cuda"
    B, size = S["rn_batch"], S["rn_size"]
    model, opt, step, which, params = resnet_model(S, dev)
    W, N = S["warmup"], S["steps"]
    out.update({"model": which, "parameters": params, "batch": B, "size": size,
                "loaders": {}})
    fx = torch.randint(0, 256, (B, size, size, 3), dtype=torch.uint8, device=dev)
    fy = torch.randint(0, 1000, (B,), device=dev)
    pinned = []

    def reference():
        rec, first = run_loop(lambda: (fx, fy), lambda b: b, step, min(W, 3), S["ref_steps"])
        out["loaders"]["reference"] = summarize_loop(rec, min(W, 3), B, "images", first)
        report_loop("resnet", "reference (on GPU)", out["loaders"]["reference"], "images")

    def shardstream_run():
        ds = ShardDataset(img_manifest, batch_size=B, reader_threads=args.threads, seed=0,
                          fields=image_fields(size))
        feed = Feed(ds.dataloader(), ds.set_epoch)
        pinned.clear()

        def ss_dev(b):
            x, y = b["jpg"], b["cls"]
            if not pinned:
                pinned.append(bool(x.is_pinned()))
                assert tuple(x.shape) == (B, size, size, 3) and x.dtype == torch.uint8, x.shape
            return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

        try:
            rec, first = run_loop(feed.next, ss_dev, step, W, N)
            r = summarize_loop(rec, W, B, "images", first)
            r.update(is_pinned=pinned[0], epochs_started=feed.epoch + 1,
                     reader_threads=args.threads, stats=scalars(ds.stats()))
            out["loaders"]["shardstream"] = r
            report_loop("resnet", "shardstream", r, "images")
        finally:
            feed.close()
            ds.close()

    def webdataset_run():
        transform, how = image_transform(size)
        out["webdataset_transform"] = how
        urls = shard_paths(img_manifest)
        wds_ds = (wds_webdataset(wds, urls).shuffle(1000).decode("pil").to_tuple("jpg", "cls")
                  .map_tuple(transform, identity).batched(B, partial=False))
        dl = torch.utils.data.DataLoader(wds_ds, batch_size=None, num_workers=args.threads,
                                         pin_memory=cuda, persistent_workers=True)
        feed = Feed(dl)
        pinned.clear()

        def wds_dev(b):
            x, y = b[0], b[1]
            if not pinned:
                pinned.append(bool(x.is_pinned()))
                assert x.dtype == torch.uint8 and x.shape[0] == B, (x.shape, x.dtype)
            return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

        try:
            rec, first = run_loop(feed.next, wds_dev, step, W, N)
            r = summarize_loop(rec, W, B, "images", first)
            r.update(is_pinned=pinned[0], epochs_started=feed.epoch + 1,
                     num_workers=args.threads, shards=len(urls), transform=how)
            out["loaders"]["webdataset"] = r
            report_loop("resnet", "webdataset", r, "images")
        finally:
            feed.close()

    for name, fn in (("reference", reference), ("shardstream", shardstream_run),
                     ("webdataset", webdataset_run)):
        guarded(out, name, fn)
        gc.collect()
    ratio(out)
    del model, opt, fx, fy


def part_cpu(args, S, dev, img_manifest, out: dict) -> None:
    """CPU controls and headspace, on the ResNet-50 loop with image decoding on the reader
    threads: the same loop under the default threads, with reader_nice, with the training
    thread on CPU 0 and the readers on the others (reader_cpus), and with half the threads;
    then measure_headspace (live batches against the same batches replayed from memory)."""
    import shardstream
    from shardstream.torch import ShardDataset
    B, size = S["rn_batch"], S["rn_size"]
    model, opt, step, which, params = resnet_model(S, dev)
    W, N = S["warmup"], S["steps"]
    allowed = sorted(os.sched_getaffinity(0))
    main_cpu, rest = allowed[0], allowed[1:] or allowed
    out.update({"model": which, "batch": B, "size": size, "cpus": len(allowed), "configs": {},
                "busy": {}})

    def to_dev(b):
        return b["jpg"].to(dev, non_blocking=True), b["cls"].to(dev, non_blocking=True)

    configs = [
        ("defaults", dict(reader_threads=args.threads), False),
        ("reader_nice=10", dict(reader_threads=args.threads, reader_nice=10), False),
        (f"main on CPU {main_cpu}, reader_cpus={len(rest)} others",
         dict(reader_threads=args.threads, reader_cpus=rest), True),
        (f"reader_threads={max(1, args.threads // 2)}",
         dict(reader_threads=max(1, args.threads // 2)), False),
    ]
    def measure(into, label, name, opts, pin_main):
        def run():
            ds = ShardDataset(img_manifest, batch_size=B, seed=0, fields=image_fields(size), **opts)
            feed = Feed(ds.dataloader(), ds.set_epoch)
            if pin_main:
                os.sched_setaffinity(0, {main_cpu})  # this thread only (Linux: per thread)
            try:
                c0 = time.process_time()
                rec, first = run_loop(feed.next, to_dev, step, W, N)
                r = summarize_loop(rec, W, B, "images", first)
                r["cpu_s_per_step"] = (time.process_time() - c0) / (W + N)
                r.update(options={k: (f"{v[0]}-{v[-1]}" if isinstance(v, list) else v)
                                  for k, v in opts.items()},
                         main_thread_cpus=[main_cpu] if pin_main else "all")
                into[name] = r
                report_loop("cpu", label + name, r, "images")
            finally:
                if pin_main:
                    os.sched_setaffinity(0, allowed)
                feed.close()
                ds.close()
        guarded(out, label + name, run)
        gc.collect()

    for name, opts, pin_main in configs:
        measure(out["configs"], "", name, opts, pin_main)

    # A busy node: the other ranks' loaders, as processes decoding the same images flat
    # out (2 reader threads each, one process per two CPUs), take every core.
    neighbours = []
    code = ("import sys, shardstream\n"
            "f = [{'name': 'jpg', 'decode': 'image', 'size': [int(sys.argv[2])] * 2,"
            " 'crop': 'random_resized', 'flip': True}, 'cls']\n"
            "e = 0\n"
            "while True:\n"
            "    with shardstream.Loader(sys.argv[1], batch_size=64, fields=f, reader_threads=2,"
            " pinned=False, epoch=e) as l:\n"
            "        for b in l: pass\n"
            "    e += 1\n")
    try:
        for _ in range(max(1, len(allowed) // 2)):
            neighbours.append(subprocess.Popen([sys.executable, "-c", code, img_manifest,
                                                str(size)]))
        out["busy_neighbours"] = len(neighbours)
        time.sleep(2)
        for name, opts, pin_main in configs:
            measure(out["busy"], "busy node: ", name, opts, pin_main)
    finally:
        for n in neighbours:
            n.kill()
        for n in neighbours:
            n.wait()

    def headspace():
        ds = ShardDataset(img_manifest, batch_size=B, seed=0, fields=image_fields(size),
                          reader_threads=args.threads)
        try:
            h = shardstream.measure_headspace(ds.dataloader(),
                                              lambda b: step(*to_dev(b)).item(),
                                              steps=N, warmup=W, loader=ds)
            out["headspace"] = {"live_step_ms": h.live_step_s * 1e3,
                                "replay_step_ms": h.replay_step_s * 1e3,
                                "speedup": h.speedup, "wait_share": h.wait_share,
                                "input_bound": h.input_bound, "text": str(h)}
            log(f"cpu: headspace: {h}")
        finally:
            ds.close()
    guarded(out, "headspace", headspace)
    del model, opt


# -- driver --------------------------------------------------------------------------------

def table(res: dict) -> str:
    lines = []
    env = res["env"]
    lines.append(f"device {env.get('gpu') or env['device']}, torch {env['torch']}, "
                 f"{env['cpus']} CPUs, --threads {res['args']['threads']}"
                 + (" (tiny)" if res["args"]["tiny"] else ""))
    parts = res["parts"]

    def copy_lines(c):
        lines.append(f"copy [{', '.join(map(str, c['shape']))}] {c['dtype']} "
                     f"({c['bytes'] / 2**20:.1f} MiB), shardstream is_pinned="
                     f"{c['shardstream_is_pinned']}, copy correct: {c.get('copy_correct')}")
        for v in c["variants"].values():
            lines.append(f"  {v['label']:50s} {fmt(v['gb_per_s'], '8.2f')} GB/s")
        lines.append(f"  shardstream .cuda / {c.get('baseline')}: "
                     f"{fmt(c.get('ratio_to_baseline'), '.2f')}, / pinned .cuda: "
                     f"{fmt(c.get('ratio_to_pinned_cuda'), '.2f')} (goal >= 0.8)")

    def overlap_lines(o):
        for mode in ("pipelined", "serial"):
            m = o.get(mode)
            if m:
                lines.append(f"overlap {mode:9s}: copy(n+1) {fmt(m['median_copy_ms'], '.3f')} ms, "
                             f"compute(n) {fmt(m['median_compute_ms'], '.2f')} ms, copy time "
                             f"inside compute {fmt(m['overlap_share'], '.0f', 100)}% (inside "
                             f"step n {fmt(m['overlap_share_own_step'], '.0f', 100)}%), span "
                             f"{fmt(m['timeline_span_ms'], '.1f')} ms")

    def loop_lines(part, p, unit):
        head = (f"{p['parameters'] / 1e6:.0f}M params, batch [{p['batch']}, {p['seq']}]"
                if part == "transformer" else f"{p['parameters'] / 1e6:.1f}M params, batch "
                f"{p['batch']} x {p['size']}px")
        lines.append(f"{part} ({head})")
        lines.append(f"  {'loader':12s} {'step ms':>9s} {'wait %':>8s} {'wait med':>9s} "
                     f"{'wait max':>9s} {unit + '/s':>11s} {'pinned':>7s} {'1st batch':>9s}")
        for name, r in p["loaders"].items():
            lines.append(f"  {name:12s} {fmt(r['median_step_ms'], '9.1f')} "
                         f"{fmt(r['wait_share'], '7.2f', 100)}% "
                         f"{fmt(r['median_wait_ms'], '7.3f')}ms {fmt(r['max_wait_ms'], '7.1f')}ms "
                         f"{fmt(r[unit + '_per_s'], '11.0f')} {str(r.get('is_pinned', '-')):>7s} "
                         f"{fmt(r['first_batch_s'], '8.2f')}s")

    def cpu_lines(p):
        lines.append(f"cpu controls (ResNet-50 loop, {p['cpus']} CPUs)")
        lines.append(f"  {'setting':40s} {'step ms':>9s} {'wait %':>8s} {'wait max':>9s} "
                     f"{'images/s':>9s} {'CPU s/step':>10s}")
        for name, r in p["configs"].items():
            lines.append(f"  {name:40s} {fmt(r['median_step_ms'], '9.1f')} "
                         f"{fmt(r['wait_share'], '7.2f', 100)}% {fmt(r['max_wait_ms'], '7.1f')}ms "
                         f"{fmt(r['images_per_s'], '9.0f')} {fmt(r.get('cpu_s_per_step'), '10.3f')}")
        if p.get("busy"):
            lines.append(f"  with {p.get('busy_neighbours')} neighbour processes decoding "
                         f"images on every core (the other ranks' loaders):")
            for name, r in p["busy"].items():
                lines.append(f"  {name:40s} {fmt(r['median_step_ms'], '9.1f')} "
                             f"{fmt(r['wait_share'], '7.2f', 100)}% "
                             f"{fmt(r['max_wait_ms'], '7.1f')}ms {fmt(r['images_per_s'], '9.0f')} "
                             f"{fmt(r.get('cpu_s_per_step'), '10.3f')}")
        if p.get("headspace"):
            lines.append(f"  headspace: {p['headspace']['text']}")

    for part, fn in (("copy", copy_lines), ("overlap", overlap_lines), ("cpu", cpu_lines),
                     ("transformer", lambda p: loop_lines("transformer", p, "tokens")),
                     ("resnet", lambda p: loop_lines("resnet", p, "images"))):
        if parts.get(part):
            try:
                fn(parts[part])
            except Exception as e:  # noqa: BLE001 - the JSON has the numbers anyway
                lines.append(f"{part}: (table line failed: {type(e).__name__}: {e})")
    for part, p in parts.items():
        for name, err in (p.get("errors") or {}).items():
            lines.append(f"{part} {name}: FAILED: {err.strip().splitlines()[-1]}")
    for part, err in res["errors"].items():
        lines.append(f"{part}: FAILED: {err.strip().splitlines()[-1]}")
    lines.append(f"total wall time {fmt(res['wall_s'], '.1f')} s")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="data directory (written once, reused)")
    ap.add_argument("--json", required=True, help="where to write all numbers")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes, a few steps (a dry run)")
    ap.add_argument("--parts", default="copy,overlap,transformer,resnet")
    ap.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1),
                    help="shardstream reader threads and WebDataset image workers; data "
                         "generation processes [min(16, CPUs)]")
    ap.add_argument("--wds-token-workers", type=int, default=None,
                    help="WebDataset DataLoader workers for tokens [min(8, --threads)]")
    ap.add_argument("--part-timeout", type=int, default=None,
                    help="seconds a part may take before it is abandoned [120; tiny 600]")
    for k, v in FULL.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None,
                        help=f"[{v}; tiny {TINY[k]}]")
    args = ap.parse_args()
    S = dict(TINY if args.tiny else FULL)
    for k in FULL:
        if getattr(args, k) is not None:
            S[k] = getattr(args, k)
    if args.wds_token_workers is None:
        args.wds_token_workers = max(1, min(8, args.threads))
    if args.part_timeout is None:
        args.part_timeout = 600 if args.tiny else 120
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - {"copy", "overlap", "transformer", "resnet", "cpu"}
    if unknown:
        raise SystemExit(f"unknown parts {sorted(unknown)}")
    dev = torch.device(args.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", 0)  # (current_device() would make a context before the fork)

    import shardstream
    try:
        import webdataset
        wds_version = webdataset.__version__
    except Exception as e:  # noqa: BLE001
        wds_version = f"not importable: {e}"
    try:
        import torchvision
        tv_version = torchvision.__version__
    except Exception as e:  # noqa: BLE001
        tv_version = f"not importable: {type(e).__name__}: {e}"
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(dev),
           "gpu": None,  # below, after the data generation's fork
           "cpus": os.cpu_count(), "python": platform.python_version(),
           "shardstream": getattr(shardstream, "__version__", None),
           "webdataset": wds_version, "torchvision": tv_version,
           "SHARDSTREAM_PINNED": os.environ.get("SHARDSTREAM_PINNED")}
    res = {"env": env, "args": vars(args), "sizes": S, "data": {}, "parts": {}, "errors": {},
           "part_seconds": {}, "wall_s": None}
    log(f"gpu_benchmark: {dev}, torch {env['torch']}, {env['cpus']} CPUs, "
        f"parts {parts}{' (tiny)' if args.tiny else ''}")

    root = os.path.abspath(args.dir)
    os.makedirs(root, exist_ok=True)
    json_dir = os.path.dirname(os.path.abspath(args.json))
    os.makedirs(json_dir, exist_ok=True)
    tok_manifest = img_manifest = None
    if {"copy", "overlap", "transformer"} & set(parts):
        try:
            tok_manifest = make_tokens(root, S["token_samples"], S["seq"], S["tokens_per_shard"])
            res["data"]["tokens"] = tok_manifest
        except Exception:  # noqa: BLE001
            res["errors"]["data_tokens"] = traceback.format_exc()
            log("data: tokens FAILED\n" + res["errors"]["data_tokens"])
    if {"resnet", "cpu"} & set(parts):
        try:
            img_manifest = make_images(root, S["images"], S["unique_images"],
                                       S["images_per_shard"], args.threads)
            res["data"]["images"] = img_manifest
        except Exception:  # noqa: BLE001
            res["errors"]["data_images"] = traceback.format_exc()
            log("data: images FAILED\n" + res["errors"]["data_images"])
    res["data"]["seconds"] = time.perf_counter() - T0
    if dev.type == "cuda":
        torch.zeros(1, device=dev)  # CUDA context, after the data generation's fork
        env["gpu"] = torch.cuda.get_device_name(dev)
        log(f"device: {env['gpu']}")
    write_json(args.json, res)

    funcs = {"copy": (part_copy, tok_manifest), "overlap": (part_overlap, tok_manifest),
             "transformer": (part_transformer, tok_manifest),
             "resnet": (part_resnet, img_manifest), "cpu": (part_cpu, img_manifest)}
    signal.signal(signal.SIGALRM, _alarm)
    for part in ("copy", "overlap", "transformer", "resnet", "cpu"):
        if part not in parts:
            continue
        fn, manifest = funcs[part]
        if manifest is None:
            res["errors"][part] = "no data (data generation failed)"
            continue
        log(f"{part}: start")
        t = time.perf_counter()
        signal.alarm(args.part_timeout)
        try:
            # The part fills its entry as it goes: a part cut short keeps what it measured.
            fn(args, S, dev, manifest, res["parts"].setdefault(part, {}))
        except BaseException as e:  # noqa: BLE001 - one part's failure must not stop the rest
            signal.alarm(0)
            if isinstance(e, KeyboardInterrupt):
                raise
            res["errors"][part] = traceback.format_exc()
            log(f"{part}: FAILED\n{res['errors'][part]}")
        finally:
            signal.alarm(0)
        res["part_seconds"][part] = time.perf_counter() - t
        try:
            free_memory(dev)
        except Exception as e:  # noqa: BLE001 - e.g. a sticky CUDA error of the failed part
            log(f"{part}: freeing memory failed: {e}")
        log(f"{part}: done in {res['part_seconds'][part]:.1f} s")
        res["wall_s"] = time.perf_counter() - T0
        write_json(args.json, res)
    res["wall_s"] = time.perf_counter() - T0
    write_json(args.json, res)
    print(table(res), flush=True)
    log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
