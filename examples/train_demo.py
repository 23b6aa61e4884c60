"""The shardstream demo: a small PyTorch model trained from tar shards that a
loopback HTTP server serves as the "remote", streamed through the node-local
shard cache, for two epochs; then a mid-epoch checkpoint (model + data state)
saved with shardstream.CheckpointManager and uploaded in the background to a
file:// "remote", the local copy wiped, and the checkpoint restored from the
remote into a fresh model and data set, which finish the epoch with exactly
the samples not yet seen.

    python examples/train_demo.py [--dir /tmp/shardstream-train] [--samples 4096]

Prints per epoch: throughput, the time the training loop waited for batches
(the GPU-idle proxy) and the cache hit rate.
"""

import argparse
import functools
import http.server
import os
import shutil
import threading
import time

import numpy as np
import torch

import shardstream
from shardstream.torch import ShardDataset

VOCAB = 97


def make_dataset(out_dir: str, samples: int, seq_len: int) -> str:
    """Sequences that follow t[i+1] = (a * t[i] + b) % VOCAB, with (a, b) one
    of a few rules named by the label: learnable, so the loss visibly drops."""
    rng = np.random.default_rng(0)
    rules = [(3, 1), (5, 2), (7, 3), (11, 4)]
    with shardstream.ShardWriter(out_dir, max_bytes="1MiB") as w:
        for i in range(samples):
            label = int(rng.integers(len(rules)))
            a, b = rules[label]
            t = np.empty(seq_len, np.int32)
            t[0] = rng.integers(VOCAB)
            for j in range(1, seq_len):
                t[j] = (a * t[j - 1] + b) % VOCAB
            w.write({"__key__": f"seq{i:06d}", "tokens.npy": t, "cls": label})
    return os.path.join(out_dir, "manifest.jsonl")


class Model(torch.nn.Module):
    """Next-token prediction from the current token and the rule label."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, 64)
        self.rule = torch.nn.Embedding(4, 64)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                       torch.nn.Linear(128, VOCAB))

    def forward(self, tokens: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.tok(tokens) + self.rule(label)[:, None, :])


def serve(directory: str) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(QuietHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def pick_url(server_url: str, local_manifest: str) -> str:
    """The HTTP url when this build reads http://, else file:// (said loudly)."""
    try:
        shardstream.Loader(server_url, fields=["cls"], batch_size=1).close()
        return server_url
    except shardstream.Error as e:
        print(f"   note: this build cannot read http:// yet ({e}); serving via file:// instead")
        return "file://" + os.path.abspath(local_manifest)


def train_step(model, opt, batch) -> float:
    tokens = batch["tokens.npy"].long()
    logits = model(tokens[:, :-1], batch["cls"])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def epoch_report(ds, epoch, before, after, seconds, steps, samples, loss) -> None:
    waited = after["wait_seconds"] - before.get("wait_seconds", 0.0)
    # cache_hit_rate counts hits per shard open since the loader started;
    # every epoch opens each shard once, so this epoch's rate follows.
    hit = after["cache_hit_rate"] * (epoch + 1) - before.get("cache_hit_rate", 0.0) * epoch
    read = after["read_bytes"]
    print(f"   epoch {epoch}: {steps} steps, {samples / seconds:,.0f} samples/s "
          f"({steps / seconds:.1f} steps/s), loss {loss:.3f}, waited for batches "
          f"{waited * 1000:.1f} ms ({100 * waited / seconds:.1f}% of the epoch), "
          f"cache hit rate {100 * hit:.0f}% "
          f"(shard bytes read so far: {', '.join(f'{k} {v / 2**20:.1f} MiB' for k, v in sorted(read.items()))})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/shardstream-train")
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=65)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    shutil.rmtree(args.dir, ignore_errors=True)
    shards, cache = os.path.join(args.dir, "shards"), os.path.join(args.dir, "cache")

    print(f"== 1. write {args.samples} sequences into shards (shardstream.ShardWriter)")
    manifest = make_dataset(shards, args.samples, args.seq_len)
    n = len(os.listdir(shards)) - 1
    print(f"   {n} shards, manifest {manifest}")

    print("== 2. serve them from a loopback HTTP server (the 'remote')")
    server = serve(shards)
    url = pick_url(f"http://127.0.0.1:{server.server_address[1]}/manifest.jsonl", manifest)
    print(f"   reading {url} through the cache in {cache}")

    def dataset() -> ShardDataset:
        return ShardDataset(url, fields=["tokens.npy", "cls"], batch_size=args.batch_size,
                            shuffle_buffer=2048, seed=42, cache_dir=cache, cache_limit="256MiB")

    print("== 3. train two epochs (DataLoader num_workers=0: C++ threads do the loading)")
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ds = dataset()
    loader = ds.dataloader()  # DataLoader(batch_size=None, num_workers=0, collate_fn=passthrough)
    print(f"   {len(ds)} batches of {args.batch_size} per epoch")
    before: dict = {}
    for epoch in range(2):
        ds.set_epoch(epoch)
        t0, steps, samples, loss = time.perf_counter(), 0, 0, 0.0
        for batch in loader:
            loss = train_step(model, opt, batch)
            steps += 1
            samples += len(batch["__key__"])
        seconds = time.perf_counter() - t0
        after = ds.stats()
        epoch_report(ds, epoch, before, after, seconds, steps, samples, loss)
        before = after
    print("   prometheus: " + " | ".join(
        line for line in shardstream.metrics.to_prometheus(ds.stats()).splitlines()
        if line.startswith(("shardstream_loader_batches_total", "shardstream_loader_cache_hit"))))
    ds.close()

    print("== 4. checkpoint mid-epoch (model + data state) with background upload; wipe the")
    print("      local copy; restore from the remote into fresh objects and finish the epoch")
    local_ckpt = os.path.join(args.dir, "ckpt-local")
    remote_ckpt = "file://" + os.path.join(args.dir, "ckpt-remote")
    mgr = shardstream.CheckpointManager(local_ckpt, remote=remote_ckpt, keep_last=2,
                                        every_steps=len(ds) // 3)
    ds.set_epoch(2)
    seen = []
    for step, batch in enumerate(loader, start=1):
        train_step(model, opt, batch)
        seen += batch["__key__"]
        if mgr.should_save(step):
            t0 = time.perf_counter()
            mgr.save_async(step, {"model": model.state_dict(), "opt": opt.state_dict(),
                                  "data": ds.state_dict()})
            stall = time.perf_counter() - t0
            break  # the "interruption": the process goes away after this save
    mgr.wait()
    up = mgr.status()["uploads"]
    print(f"   saved step {step} (training stalled {stall * 1000:.1f} ms for save_async); "
          f"uploads: {', '.join(u['name'] + ' ' + u['state'] for u in up)}")
    mgr.close()
    ds.close()
    shutil.rmtree(local_ckpt)
    mgr2 = shardstream.CheckpointManager(local_ckpt, remote=remote_ckpt)
    state = mgr2.load_latest(map_location="cpu")
    print(f"   restored {mgr2.last_restored['name']} "
          f"({'from the remote' if mgr2.last_restored['from_remote'] else 'locally'}, verified)")
    model2, ds2 = Model(), dataset()
    opt2 = torch.optim.AdamW(model2.parameters(), lr=3e-3)
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["opt"])
    ds2.load_state_dict(state["data"])
    rest = []
    for batch in ds2.dataloader():
        loss = train_step(model2, opt2, batch)
        rest += batch["__key__"]
    mgr2.close()
    both = set(seen) | set(rest)
    print(f"   saved after {len(seen)} samples of epoch 2; the restored run read {len(rest)} more: "
          f"{len(both)} distinct of {args.samples}, overlap {len(set(seen) & set(rest))}; "
          f"loss {loss:.3f}")
    ds2.close()
    server.shutdown()
    ok = len(both) == args.samples and not set(seen) & set(rest)
    print("demo done" if ok else "demo FAILED: resume did not deliver exactly the remainder")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
