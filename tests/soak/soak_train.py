"""One rank of the soak (tests/soak/soak.py starts it under torchrun): DDP over
gloo, two token data sets mixed by weight and packed (a web set over HTTP, a
code set on S3, both through fault proxies), node_local with a small node
cache, error_policy="skip_shard", a StatefulDataLoader with 2 worker processes
(forkserver: see main), and a shardstream.dcp checkpoint of model, optimizer
and every rank's data position every --ckpt-every steps. Resumes from the
newest intact checkpoint, on whatever world size it is started with.

It appends one JSON line per event to --out/rank<R>.jsonl (flushed, so a
SIGKILL loses nothing written): {"start"}, {"resumed"}, a {"step"} with the
documents it trained on, {"ckpt"} once a checkpoint is committed, {"end"}.
The driver reads these to prove every document reached a committed step
exactly once, and to kill ranks at random steps.
"""

import argparse
import json
import multiprocessing
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel
from torchdata.stateful_dataloader import StatefulDataLoader

from shardstream import dcp as sdcp
from shardstream.torch import (ShardDataset, merge_state_dicts, passthrough,
                               state_dict_from_stateful_dataloader)

VOCAB = 97


class TinyLm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 16)
        self.out = torch.nn.Linear(16, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(tokens))


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def threads() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--web", required=True)
    ap.add_argument("--code", required=True)
    ap.add_argument("--epoch-size", type=int, required=True)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--cache-root", required=True, help="node N's cache is <root>/node<N>")
    ap.add_argument("--cache-limit", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--ckpt-every", type=int, default=6)
    ap.add_argument("--out", required=True)
    ap.add_argument("--attempt", required=True)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--step-sleep", type=float, default=0.0, help="a training step's extra time")
    ap.add_argument("--stop-file", default="", help="end the job at the epoch's end once it exists")
    args = ap.parse_args()
    # Workers come from a forkserver, not a fork of this process. gloo's worker threads take the
    # GIL to drop a Python tensor after a collective, making a thread state each time; on Python
    # 3.11.7 a fork at that instant leaves the child stuck for ever in its own fork, on the
    # interpreter's thread-list lock (CPython gh-112275). A 30-minute run met it once (a worker
    # hung at popen_fork.py:66, its rank waiting for a batch). The forkserver is started by
    # fork+exec and imports these once: 0.19 s to an epoch's first batch, not 0.03 s
    # (docs/python.md).
    multiprocessing.set_forkserver_preload(["torch", "torchdata.stateful_dataloader",
                                            "shardstream.torch"])

    # A store prefix of its own for each torchrun restart: without it restarted ranks often
    # failed or waited in init_process_group, meeting the round before's addresses
    # (tests/soak/restart_prefix_check.py, docs/multinode.md).
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"restart{restart}", store),
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    # Two ranks a node: ranks 0-1 are node 0, 2-3 node 1 (soak.py launches the ranks of both
    # nodes from one torchrun agent; see there why).
    node = rank // 2
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, f"rank{rank}.jsonl"), "a", buffering=1)

    def note(**event) -> None:
        event.update(rank=rank, world=world, pid=os.getpid(), attempt=args.attempt,
                     restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), t=time.time())
        log.write(json.dumps(event) + "\n")

    note(kind="start", node=node, fds=fds(), threads=threads(), rss=rss_mib())
    ds = ShardDataset(
        streams=[{"inputs": args.web, "weight": 0.5, "name": "web"},
                 {"inputs": args.code, "weight": 0.5, "name": "code"}],
        epoch_size=args.epoch_size, batch_size=args.batch_size, seed=11, node_local=True,
        local_world_size=2,
        cache_dir=os.path.join(args.cache_root, f"node{node}"), cache_limit=args.cache_limit,
        error_policy="skip_shard", watchdog_s=20,
        tokens={"field": "tokens.npy", "seq_len": args.seq_len, "eod_token": 0})
    model = DistributedDataParallel(TinyLm())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def train_state(step: int, epoch: int, loader_json: str) -> dict:
        model_sd, opt_sd = get_state_dict(model, opt)
        return {"model": model_sd, "opt": opt_sd, "progress": torch.tensor([step, epoch]),
                f"{sdcp.LOADER_KEY}{rank}": loader_json}

    step, epoch, mid_epoch = 0, 0, False
    try:
        reader = sdcp.Reader(args.ckpt)  # the newest intact step
    except FileNotFoundError:
        reader = None
    if reader is not None:
        with reader:
            md = reader.read_metadata()
            keys = sorted(k for k in md.state_dict_metadata if k.startswith(sdcp.LOADER_KEY))
            state = train_state(0, 0, "")
            del state[f"{sdcp.LOADER_KEY}{rank}"]
            state.update({k: "" for k in keys})  # every saved rank's position
            dcp.load(state, storage_reader=reader)
            set_state_dict(model, opt, model_state_dict=state["model"],
                           optim_state_dict=state["opt"])
            step = int(state["progress"][0])
            merged = merge_state_dicts([json.loads(state[k]) for k in keys])
            # The loader's epoch: a checkpoint taken at an epoch's last step is between epochs.
            epoch, mid_epoch = int(merged["epoch"]), bool(merged["consumers"])
            ds.load_state_dict(merged)
        note(kind="resumed", step=step, epoch=epoch, mid_epoch=mid_epoch,
             checkpoint=reader.checkpoint.name, saved_world=len(keys))
    else:
        note(kind="resumed", step=0, epoch=0, mid_epoch=False, checkpoint=None, saved_world=0)

    while epoch < args.epochs:
        if not mid_epoch:
            ds.set_epoch(epoch)
        mid_epoch = False
        dl = StatefulDataLoader(ds, batch_size=None, num_workers=args.workers,
                                collate_fn=passthrough, multiprocessing_context="forkserver")
        it = iter(dl)
        while True:
            t0 = time.monotonic()
            try:
                batch = next(it)
            except StopIteration:
                break
            waited = time.monotonic() - t0
            tokens = batch["tokens"].long()
            target = tokens[:, 1:].clone()
            target[batch["doc_ids"][:, 1:] < 0] = -100  # padding is not trained on
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1),
                                                     ignore_index=-100, reduction="sum")
            loss = loss / max(1, int((target >= 0).sum()))
            opt.zero_grad(set_to_none=True)
            loss.backward()  # all-reduces the gradients across every rank
            opt.step()
            step += 1
            if args.step_sleep:
                time.sleep(args.step_sleep)
            note(kind="step", step=step, epoch=epoch, keys=list(batch["__key__"]),
                 wait=round(waited, 4))
            if step % args.ckpt_every == 0:
                loader_json = json.dumps(state_dict_from_stateful_dataloader(dl.state_dict()))
                writer = sdcp.Writer(args.ckpt, step=step)
                dcp.save(train_state(step, epoch, loader_json), storage_writer=writer)
                note(kind="ckpt", step=step, epoch=epoch, fds=fds(), threads=threads(),
                     rss=rss_mib(), maxrss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        del it, dl
        note(kind="epoch_end", step=step, epoch=epoch, stats={
            k: v for k, v in ds.stats().items() if isinstance(v, (int, float))})
        epoch += 1
        # Every rank stops at the same epoch's end: rank 0 decides.
        stop = torch.tensor([int(bool(args.stop_file) and os.path.exists(args.stop_file))])
        dist.broadcast(stop, 0)
        if stop.item():
            break
    dist.barrier()
    note(kind="end", step=step, fds=fds(), threads=threads(), rss=rss_mib())
    sdcp.close_all()
    dist.destroy_process_group()
    log.close()
    # Not a normal exit: the model's DDP reducer holds the gloo group, whose destructor joins
    # gloo's threads with the GIL held, and a thread still dropping the last collective's tensor
    # waits for the GIL: the rank never exits (seen with gloo's threads slowed).
    os._exit(0)


if __name__ == "__main__":
    main()
