#!/usr/bin/env python3
"""torchrun's restarts and gloo (docs/multinode.md, "--max-restarts"): a 4-rank job on one
agent whose rank 3 SIGKILLs itself in its first two lives, started with a plain
``init_process_group("gloo")`` and with a store prefix per restart. Counts the ranks whose
``init_process_group`` failed in connectFullMesh after a restart, and whether the job ended.

  python tests/soak/restart_prefix_check.py [--runs 3]
"""

import argparse
import datetime
import os
import signal
import subprocess
import sys
import time


def rank(mode: str) -> None:
    import torch
    import torch.distributed as dist
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if mode == "prefix":
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              is_master=False, timeout=datetime.timedelta(seconds=60))
        store = dist.PrefixStore(f"restart{restart}", store)
        dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo")
    me = dist.get_rank()
    for i in range(30):
        t = torch.ones(1)
        dist.all_reduce(t)
        time.sleep(0.1)
        if restart < 2 and me == 3 and i == 10:
            os.kill(os.getpid(), signal.SIGKILL)
    print(f"rank {me} done", flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rank", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank:
        return rank(args.rank)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from conftest import free_port
    for run in range(args.runs):
        for mode in ("plain", "prefix"):
            out = subprocess.run(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
                 "--nproc-per-node", "4", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--max-restarts", "3",
                 "--monitor-interval", "1", os.path.abspath(__file__), "--rank", mode],
                capture_output=True, text=True, timeout=300)
            text = out.stdout + out.stderr
            failed = text.count("RuntimeError: Gloo connectFullMesh failed")
            print(f"run {run + 1} {mode:6}: {failed} ranks failed in connectFullMesh, "
                  f"{'ended' if out.returncode == 0 else 'gave up'} (exit {out.returncode})",
                  flush=True)


if __name__ == "__main__":
    main()
