"""Multi-node training as users launch it: DDP under torchrun, two data sets
mixed by weight into packed token batches with the same number of batches on
every rank, shards streamed over
HTTP through a node-local cache (each node keeps its own shards across
epochs), and a checkpoint of model, optimizer and data position that a
relaunch resumes from.

One node of a two-node job (run the same command on every node; torchrun's
c10d rendezvous numbers the nodes):

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \\
        --rdzv-endpoint HEAD_HOST:29400 --rdzv-id job42 \\
        examples/train_multinode.py --data http://server/web/manifest.jsonl --weight 0.5 \\
        --data http://server/code/manifest.jsonl --weight 0.5 --epoch-size 1280 \\
        --cache-dir /local/nvme/shardstream --ckpt /shared/ckpt [--epochs 2] [--stop-after N]

Several --data with a --weight each are mixed (each epoch takes each data set's
share of --epoch-size); one --data without weights is read as it is.

--stop-after N saves a checkpoint after N steps of the run and exits (an
interruption); the next launch with the same --ckpt resumes from it. The
checkpoint is a torch.distributed.checkpoint save through shardstream.dcp:
every rank writes its own file, the step is committed atomically once all are
durable (--ckpt must be a directory every node shares, as for DCP's own
FileSystemWriter; --ckpt-remote uploads it in the background), and each
rank's data position goes with the model and optimizer. Each rank writes what
it trained on to --out (for the tests).
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

from shardstream import dcp as sdcp
from shardstream.torch import ShardDataset

VOCAB = 97


class TinyLm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 32)
        self.out = torch.nn.Linear(32, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(tokens))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", action="append", required=True,
                    help="manifest url (http://, s3://, file); repeat with --weight to mix")
    ap.add_argument("--weight", action="append", type=float, default=[],
                    help="the share of each --data in an epoch (mixing)")
    ap.add_argument("--epoch-size", type=int, default=0, help="samples per mixed epoch")
    ap.add_argument("--cache-dir", required=True, help="this node's shard cache directory")
    ap.add_argument("--cache-limit", default="4GiB")
    ap.add_argument("--ckpt", required=True, help="checkpoint directory every node can read")
    ap.add_argument("--ckpt-remote", default=None, help="upload checkpoints here (s3://, file://)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--stop-after", type=int, default=0, help="save and exit after N steps")
    ap.add_argument("--out", default="", help="write what each rank trained on here")
    args = ap.parse_args()

    dist.init_process_group("gloo")  # "nccl" on GPUs
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    # One data set per rank for the whole run. node_local: shards are assigned
    # to nodes once (nodes from torchrun's LOCAL_WORLD_SIZE and GROUP_RANK), so
    # from the second epoch on a node reads only what its cache holds. Packed
    # token batches come in the same number on every rank (equal_batches), so
    # DDP's all-reduce never waits for a rank that ran out.
    # With weights, each epoch mixes the data sets by them; with node_local,
    # each data set's shards stay on their nodes and each node takes its part
    # of every data set's share from its own shards.
    if args.weight:
        if len(args.weight) != len(args.data):
            ap.error("give one --weight per --data")
        data = {"streams": [{"inputs": url, "weight": w, "name": f"data{i}"}
                            for i, (url, w) in enumerate(zip(args.data, args.weight))],
                "epoch_size": args.epoch_size or None}
    else:
        data = {"urls": args.data[0]}
    ds = ShardDataset(**data, batch_size=args.batch_size, seed=1, node_local=True,
                      cache_dir=args.cache_dir, cache_limit=args.cache_limit,
                      tokens={"field": "tokens.npy", "seq_len": args.seq_len + 1, "eod_token": 0})
    model = DistributedDataParallel(TinyLm())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train_state(step: int, epoch: int) -> dict:
        model_sd, opt_sd = get_state_dict(model, opt)
        return {"model": model_sd, "opt": opt_sd, "progress": torch.tensor([step, epoch]),
                **sdcp.loader_state(ds)}  # this rank's data position, one entry per rank

    step, epoch = 0, 0
    try:
        reader = sdcp.Reader(args.ckpt, remote=args.ckpt_remote)  # newest intact step
    except FileNotFoundError:
        reader = None
    resumed = reader is not None
    if resumed:
        with reader:
            state = train_state(0, 0)
            state = {k: v for k, v in state.items() if not k.startswith(sdcp.LOADER_KEY)}
            dcp.load(state, storage_reader=reader)
            set_state_dict(model, opt, model_state_dict=state["model"],
                           optim_state_dict=state["opt"])
            step, epoch = (int(x) for x in state["progress"])
            # Every saved rank's position, merged: exact also on another world size.
            sdcp.restore_loader(ds, reader)
        if rank == 0:
            print(f"resumed from {reader.checkpoint.name}: step {step}, epoch {epoch}", flush=True)
    seen = []
    while epoch < args.epochs:
        if not resumed:
            ds.set_epoch(epoch)
        resumed = False
        before = ds.stats()
        steps = 0
        for batch in ds.dataloader():
            tokens = batch["tokens"].long()
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                     tokens[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()  # all-reduces the gradients across every rank
            opt.step()
            step += 1
            steps += 1
            seen.append({"epoch": epoch, "keys": batch["__key__"]})
            if args.stop_after and step == args.stop_after:
                # Each rank writes its own shard of the state; the step is committed
                # once every rank's files are durable.
                writer = sdcp.Writer(args.ckpt, step=step, remote=args.ckpt_remote)
                dcp.save(train_state(step, epoch), storage_writer=writer)
                if rank == 0:
                    m = writer.manifest
                    print(f"saved {m['name']} with shardstream.dcp: {len(m['files'])} files, "
                          f"{m['bytes']} bytes from {world} ranks, committed", flush=True)
                sdcp.close_all()  # waits for the upload, if any
                dist.barrier()
                write_out(args.out, rank, seen, step)
                dist.destroy_process_group()
                return
        after = ds.stats()
        # Shards opened this epoch through the node's cache, and how many of
        # them it held whole (nothing downloaded). The counters are the
        # native loader's: a resumed share is read by a loader of its own, so
        # after a resume the next epoch's loader counts from zero.
        if after["cache_opens"] < before.get("cache_opens", 0):
            before = {}
        opens = after["cache_opens"] - before.get("cache_opens", 0)
        hits = after["cache_hits"] - before.get("cache_hits", 0)
        if rank == 0 or args.out:
            print(f"rank {rank} epoch {epoch}: {steps} steps, loss {loss.item():.3f}, "
                  f"{hits} of {opens} shards from the node's cache", flush=True)
        seen.append({"epoch": epoch, "cache_opens": opens, "cache_hits": hits, "steps": steps})
        epoch += 1
    write_out(args.out, rank, seen, step)
    dist.barrier()
    dist.destroy_process_group()


def write_out(out: str, rank: int, seen, step: int) -> None:
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank{rank}-{os.getpid()}.json"), "w") as f:
        json.dump({"rank": rank, "step": step, "seen": seen}, f)


if __name__ == "__main__":
    main()
