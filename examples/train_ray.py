"""Training under Ray Train: a TorchTrainer whose workers iterate a ShardDataset,
with the data position in Ray Train's checkpoints so a restart resumes exactly.

    python examples/train_ray.py --data s3://bucket/set/manifest.jsonl \\
        --storage /shared/ray-results --name run1 --workers 4 [--epochs 2] \\
        [--cache-dir /local/nvme/shardstream] [--address auto]

Ray Train starts one process per worker and sets up the torch.distributed process group (gloo
here; NCCL with --gpu); ShardDataset takes its rank and world size from that group, so every
worker reads a disjoint share of each epoch. Every --ckpt-every steps the workers report a
checkpoint: rank 0 writes the model, the optimizer, the step and every rank's data position,
merged (gather_state_dict), so it resumes on any number of workers. Ray Train keeps it under
--storage/--name. When a worker dies, Ray Train restarts the group (--max-failures) and
get_checkpoint() hands the newest checkpoint to the new workers; running the script again
with the same --storage and --name resumes the same way.

The data set's samples hold "x.npy" (float32 features) and "cls" (an integer label);
tests/python/test_ray_train.py writes one. --out makes each worker write the keys it trained
on, step by step (for the tests); --die-at 7,13 makes rank 1 exit at step 7, and at step 13
after the restart (a worker lost each time).
"""

import argparse
import json
import os
import tempfile
import time

import ray
import ray.train
import ray.train.torch
import torch
from ray.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from shardstream.torch import ShardDataset, gather_state_dict


def train_loop(config: dict) -> None:
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # Rank and world size come from the process group Ray Train set up.
    ds = ShardDataset(config["data"], batch_size=config["batch_size"], seed=1,
                      fields=["x.npy", "cls"], cache_dir=config["cache_dir"])
    model = ray.train.torch.prepare_model(torch.nn.Linear(config["features"], config["classes"]))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    step, epoch, resumed_from, attempt = 0, 0, 0, 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=False)
        # ray.train.torch.prepare_model wraps the model in DDP when world > 1.
        getattr(model, "module", model).load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, epoch = state["step"], state["epoch"]
        ds.load_state_dict(state["data"])  # every rank's position, merged: any world size
        resumed_from = step
        attempt = state["attempt"] + 1  # restarts so far, for --die-at
    elif config["epochs"]:
        ds.set_epoch(0)
    out = None
    if config["out"]:
        os.makedirs(config["out"], exist_ok=True)
        out = open(os.path.join(config["out"], f"rank{rank}-{os.getpid()}.jsonl"), "a")

    while epoch < config["epochs"]:
        for batch in ds.dataloader():
            logits = model(batch["x.npy"])
            loss = torch.nn.functional.cross_entropy(logits, batch["cls"])
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients
            opt.step()
            step += 1
            if out is not None:
                out.write(json.dumps({"rank": rank, "world": world, "epoch": epoch, "step": step,
                                      "from": resumed_from, "keys": list(batch["__key__"])})
                          + "\n")
                out.flush()
            if rank == 1 and attempt < len(config["die_at"]) and step == config["die_at"][attempt]:
                # A worker lost mid-epoch. Ray Train registers a reported checkpoint at
                # its next poll of the workers (every 2 s by default): wait for that
                # first, so the restart has one to resume from.
                time.sleep(2.5 * float(os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "2")))
                os._exit(1)
            if step % config["ckpt_every"] == 0:
                report(model, opt, ds, step, epoch, loss, rank, attempt)
        epoch += 1
        ds.set_epoch(epoch)
        if step % config["ckpt_every"]:
            report(model, opt, ds, step, epoch, loss, rank, attempt)  # the epoch's end
    if out is not None:
        out.close()


def report(model, opt, ds, step: int, epoch: int, loss, rank: int, attempt: int) -> None:
    """Every worker reports (a collective); rank 0 attaches the checkpoint."""
    data = gather_state_dict(ds)  # all_gather over the process group, then merged
    metrics = {"step": step, "epoch": epoch, "loss": float(loss)}
    if rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as d:
        torch.save({"model": getattr(model, "module", model).state_dict(),
                    "opt": opt.state_dict(), "step": step, "epoch": epoch, "data": data,
                    "attempt": attempt},
                   os.path.join(d, "state.pt"))
        ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="manifest url (s3://, http://, file)")
    ap.add_argument("--storage", required=True, help="Ray Train's storage_path (shared)")
    ap.add_argument("--name", default="shardstream-ray-train", help="the run's name")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--gpu", action="store_true", help="one GPU per worker (NCCL)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--ckpt-every", type=int, default=5, help="report a checkpoint every N steps")
    ap.add_argument("--max-failures", type=int, default=2, help="worker-group restarts allowed")
    ap.add_argument("--cache-dir", default=None, help="each node's shard cache directory")
    ap.add_argument("--address", default=None, help="a running Ray cluster (default: start one)")
    ap.add_argument("--out", default="", help="write what each worker trained on here")
    ap.add_argument("--die-at", default="",
                    help="steps, comma-separated: rank 1 exits at the first, and after each "
                         "restart at the next (a test)")
    args = ap.parse_args()

    ray.init(address=args.address, include_dashboard=False, log_to_driver=False)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"data": args.data, "epochs": args.epochs,
                           "batch_size": args.batch_size, "features": args.features,
                           "classes": args.classes, "ckpt_every": args.ckpt_every,
                           "cache_dir": args.cache_dir, "out": args.out,
                           "die_at": [int(x) for x in args.die_at.split(",") if x]},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.gpu),
        run_config=RunConfig(name=args.name, storage_path=os.path.abspath(args.storage),
                             failure_config=FailureConfig(max_failures=args.max_failures)))
    result = trainer.fit()
    print(f"done: {result.metrics}, checkpoint {result.checkpoint.path if result.checkpoint else None}",
          flush=True)


if __name__ == "__main__":
    main()
