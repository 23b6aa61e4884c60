"""shardstream.dcp.Writer against torch.distributed.checkpoint's FileSystemWriter.

    python benchmarks/dcp_benchmark.py [--dir /tmp/ss-dcp-bench] [--gib 4] [--ranks 2] [--runs 3]

--ranks gloo processes on this machine hold --gib GiB of float32 state between
them: 32 tensors sharded by rows over the ranks (DTensor Shard(0)), as FSDP2
holds parameters and optimizer state. In the same directory on the same disk,
alternating within each run:

- save: dcp.save with FileSystemWriter(path) (its defaults: one file per rank,
  fsync of every file) and with shardstream.dcp.Writer(root, step=N) (every
  file hashed and fsynced, the directory fsynced, .metadata and manifest.json
  written and synced, the step renamed into place, `latest` replaced).
  Throughput = state bytes / wall time from a barrier before the call to a
  barrier after it, read on rank 0.
- async stall: time until dcp.async_save returns (training may go on), for
  both writers, against the host copy alone (clone of every local shard);
  then the time until the future's result.
- restore from the remote: a save with remote=file://DIR/remote (the upload
  waited for), then in an empty root Reader(root, remote=...) (the newest
  committed step downloaded, every file verified) plus dcp.load into fresh
  shards, against dcp.load from FileSystemReader on the local copy.

Medians of --runs (the order of the two writers alternates between runs), peak
RSS of each rank. Prints a table and one JSON line (--json writes it too).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from bench_common import write_json

NTENSORS = 32


def worker(args) -> None:
    import datetime
    import resource

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from shardstream import dcp as sdcp

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=1800))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    total = int(args.gib * (1 << 30))
    per = total // NTENSORS // 4  # float32 elements per tensor
    cols = 1024
    rows = per // cols // world * world
    gen = torch.Generator().manual_seed(0)
    state = {}
    for i in range(NTENSORS):
        # Each rank fills only its own rows (no full tensor is ever made).
        local = torch.empty(rows // world, cols)
        local.uniform_(generator=gen)
        state[f"layer{i:02d}.weight"] = DTensor.from_local(local, mesh, [Shard(0)],
                                                           run_check=False)
    nbytes = NTENSORS * rows * cols * 4
    pg = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=1800))
    d = args.dir

    def timed(fn):
        dist.barrier()
        t0 = time.perf_counter()
        out = fn()
        dist.barrier()
        return time.perf_counter() - t0, out

    def clear(path):
        sdcp.close_all()  # the root's writer lets go of it
        dist.barrier()
        if rank == 0:
            shutil.rmtree(path, ignore_errors=True)
        dist.barrier()

    results = {"fs_save_s": [], "ss_save_s": [], "fs_async_stall_s": [], "ss_async_stall_s": [],
               "fs_async_total_s": [], "ss_async_total_s": [], "host_copy_s": [],
               "remote_restore_s": [], "local_load_s": [], "upload_s": []}
    step = 0
    for run in range(args.runs):
        order = ("fs", "ss") if run % 2 == 0 else ("ss", "fs")
        for kind in order:
            step += 1
            if kind == "fs":
                path = os.path.join(d, "fs")
                t, _ = timed(lambda: dcp.save(state, storage_writer=FileSystemWriter(path)))
                clear(path)
            else:
                root = os.path.join(d, "ss")
                t, _ = timed(lambda: dcp.save(state, storage_writer=sdcp.Writer(root, step=step,
                                                                                keep_last=1)))
                clear(root)
            results[f"{kind}_save_s"].append(t)
        # The host copy alone: what any snapshot for an asynchronous save costs at least.
        dist.barrier()
        t0 = time.perf_counter()
        copies = {k: v.to_local().clone() for k, v in state.items()}
        results["host_copy_s"].append(time.perf_counter() - t0)
        del copies
        for kind in order:
            step += 1
            if kind == "fs":
                path = os.path.join(d, "fs-async")
                w = FileSystemWriter(path)
            else:
                path = os.path.join(d, "ss-async")
                w = sdcp.Writer(path, step=step, keep_last=1)
            dist.barrier()
            t0 = time.perf_counter()
            fut = dcp.async_save(state, storage_writer=w, process_group=pg)
            stall = time.perf_counter() - t0
            fut.result()
            total_s = time.perf_counter() - t0
            dist.barrier()
            results[f"{kind}_async_stall_s"].append(stall)
            results[f"{kind}_async_total_s"].append(total_s)
            clear(path)
        # Restore from the remote alone, into an empty root.
        step += 1
        root, remote = os.path.join(d, "up"), os.path.join(d, "remote")
        dcp.save(state, storage_writer=sdcp.Writer(root, step=step, remote="file://" + remote,
                                                    keep_last=1))
        t0 = time.perf_counter()
        if rank == 0:
            sdcp.wait_uploads(root)
        dist.barrier()
        results["upload_s"].append(time.perf_counter() - t0)
        fresh = os.path.join(d, "fresh")
        target = {k: DTensor.from_local(torch.empty_like(v.to_local()), mesh, [Shard(0)],
                                        run_check=False) for k, v in state.items()}
        t, reader = timed(lambda: sdcp.Reader(fresh, remote="file://" + remote))
        t2, _ = timed(lambda: dcp.load(target, storage_reader=reader))
        results["remote_restore_s"].append(t + t2)
        ok = all(torch.equal(target[k].to_local(), state[k].to_local()) for k in state)
        assert ok, "the restored state differs"
        t, _ = timed(lambda: dcp.load(target, storage_reader=FileSystemReader(
            os.path.join(root, f"ckpt-{step:06d}"))))
        results["local_load_s"].append(t)
        del reader
        clear(fresh)
        clear(root)
        clear(remote)
    results["bytes"] = nbytes
    results["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        with open(os.path.join(d, "result.json"), "w") as f:
            json.dump(gathered, f)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/ss-dcp-bench")
    ap.add_argument("--gib", type=float, default=4.0, help="state over all ranks")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.ranks), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--dir", args.dir,
                                       "--gib", str(args.gib), "--runs", str(args.runs)], env=env))
    rcs = [p.wait() for p in procs]
    if any(rcs):
        sys.exit(f"dcp_benchmark: a rank failed: {rcs}")
    with open(os.path.join(args.dir, "result.json")) as f:
        ranks = json.load(f)
    r0 = ranks[0]
    gib = sum(r["bytes"] for r in ranks[:1]) / (1 << 30)
    med = {k: statistics.median(v) for k, v in r0.items() if isinstance(v, list)}
    rate = lambda s: gib / s  # noqa: E731
    out = {
        "state_gib": gib, "ranks": args.ranks, "runs": args.runs,
        "filesystemwriter_gib_s": rate(med["fs_save_s"]),
        "shardstream_gib_s": rate(med["ss_save_s"]),
        "ratio": med["fs_save_s"] / med["ss_save_s"],
        "ratio_per_run": [f / s for f, s in zip(r0["fs_save_s"], r0["ss_save_s"])],
        "host_copy_s": med["host_copy_s"],
        "fs_async_stall_s": med["fs_async_stall_s"], "ss_async_stall_s": med["ss_async_stall_s"],
        "fs_async_total_s": med["fs_async_total_s"], "ss_async_total_s": med["ss_async_total_s"],
        "upload_s": med["upload_s"], "remote_restore_s": med["remote_restore_s"],
        "local_load_s": med["local_load_s"],
        "peak_rss_mib": [round(r["peak_rss_mib"]) for r in ranks],
        "raw": r0,
    }
    print(f"{gib:.2f} GiB over {args.ranks} ranks, medians of {args.runs} runs")
    print(f"  dcp.save  FileSystemWriter      {out['filesystemwriter_gib_s']:.2f} GiB/s "
          f"({med['fs_save_s']:.2f} s)")
    print(f"  dcp.save  shardstream.dcp       {out['shardstream_gib_s']:.2f} GiB/s "
          f"({med['ss_save_s']:.2f} s)  ratio {out['ratio']:.2f}x "
          f"(per run {', '.join(f'{x:.2f}' for x in out['ratio_per_run'])})")
    print(f"  async_save stall: FileSystemWriter {med['fs_async_stall_s']:.2f} s, "
          f"shardstream {med['ss_async_stall_s']:.2f} s; host copy alone "
          f"{med['host_copy_s']:.2f} s; until durable {med['fs_async_total_s']:.2f} / "
          f"{med['ss_async_total_s']:.2f} s")
    print(f"  upload to file:// remote {med['upload_s']:.2f} s; restore from the remote alone "
          f"{med['remote_restore_s']:.2f} s (a local FileSystemReader load "
          f"{med['local_load_s']:.2f} s)")
    print(f"  peak RSS per rank: {out['peak_rss_mib']} MiB")
    line = json.dumps({k: v for k, v in out.items() if k != "raw"})
    print(line)
    if args.json:
        write_json(args.json, out)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
