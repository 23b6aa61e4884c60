"""shardstream.dcp with real torch.distributed processes (gloo over loopback):
four ranks save FSDP2 (fully_shard) and DTensor-sharded state and their data positions with
dcp.async_save into numbered steps uploaded to a remote; a rank killed in the
middle of the next save leaves no step; two ranks then restore (from the
local root, and from the remote alone), resharded by DCP's planner, and read
exactly the rest of the epoch."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import clean_aws_env, fault_proxy, free_port, moto_s3_server, reaped

WORKER = r"""
import datetime, json, os, sys
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, Replicate, distribute_tensor
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
from shardstream.torch import ShardDataset
from shardstream import dcp as sdcp

manifest, root, remote, out, phase = sys.argv[1:6]
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
full_w = torch.arange(64 * 12, dtype=torch.float32).view(64, 12)
full_b = torch.linspace(-1, 1, 12)

# SS_TEST_BIG_MIB: one more tensor of that many MiB, sharded by rows (multipart uploads).
BIG_ROWS = int(os.environ.get("SS_TEST_BIG_MIB", "0")) * 256 // world * world

def big_rows(lo, hi):
    return (torch.arange(lo * 1024, hi * 1024, dtype=torch.int64) * 2654435761 % 1000003
            ).to(torch.float32).view(hi - lo, 1024)

def big_local():
    n = BIG_ROWS // world
    return big_rows(rank * n, rank * n + n)

def fsdp_model(seed):
    # FSDP2 on the CPU: every parameter a DTensor sharded over the ranks, AdamW's moments too.
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8))
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    torch.manual_seed(seed + 1)
    m(torch.randn(8, 16)).sum().backward()
    opt.step()
    opt.zero_grad()
    return m, opt

def full_state(m, opt):  # every parameter and moment, whole
    out = {f"p.{n}": p.full_tensor() for n, p in m.named_parameters()}
    for n, p in m.named_parameters():
        for k in ("exp_avg", "exp_avg_sq"):
            out[f"{k}.{n}"] = opt.state[p][k].full_tensor()
    return out

FSDP = None

def state(w, b, ds, big=None):
    st = {"model": {"w": w, "b": b}, "step": torch.tensor(7), **sdcp.loader_state(ds)}
    if FSDP is not None:
        msd, osd = get_state_dict(*FSDP)
        st["fsdp"] = {"model": msd, "optim": osd}
    if BIG_ROWS:
        from torch.distributed.tensor import DTensor
        st["model"]["big"] = DTensor.from_local(big if big is not None else big_local(), mesh,
                                                [Shard(0)], run_check=False)
    return st

ds = ShardDataset(manifest, fields=["cls"], batch_size=5, seed=3)
result = {"rank": rank, "world": world}
if phase in ("save", "kill", "upkill"):
    w = distribute_tensor(full_w.clone(), mesh, [Shard(0)])
    b = distribute_tensor(full_b.clone(), mesh, [Replicate()])
    it = iter(ds)
    result["consumed"] = [k for _ in range(2) for k in next(it)["__key__"]]
    FSDP = fsdp_model(11)
    ref = full_state(*FSDP)
    if phase == "save" and rank == 0:
        torch.save(ref, os.path.join(out, "fsdp-ref.pt"))
    pg = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
    if phase == "upkill":
        # The save commits; its background upload is killed by the test halfway.
        dcp.save(state(w, b, ds), storage_writer=sdcp.Writer(root, step=200, remote=remote),
                 process_group=pg)
        open(os.path.join(out, f"upkill-{rank}.saved"), "w").close()
        if rank == 0:
            sdcp.wait_uploads(root)
        dist.barrier()
        os._exit(3)  # not reached: the test kills every rank first
    if phase == "save":
        fut = dcp.async_save(state(w, b, ds), storage_writer=sdcp.Writer(root, step=100, remote=remote),
                             process_group=pg)
        fut.result()
        if rank == 0:
            sdcp.wait_uploads(root)
            result["uploads"] = sdcp.upload_status(root)
    else:
        os.environ["SHARDSTREAM_DCP_KILL"] = sys.argv[6]
        try:
            dcp.save(state(w, b, ds), storage_writer=sdcp.Writer(root, step=200, remote=remote),
                     process_group=pg)
            result["saved"] = True
        except BaseException as e:  # DCP raises CheckpointException, a BaseException
            result["error"] = repr(e)[:300]
        with open(os.path.join(out, f"{phase}-{rank}.json"), "w") as f:
            json.dump(result, f)
        os._exit(0)  # the group lost a rank: no orderly shutdown
elif phase == "full":
    w = distribute_tensor(full_w.clone(), mesh, [Shard(0)])
    b = distribute_tensor(full_b.clone(), mesh, [Replicate()])
    os.environ["SHARDSTREAM_DCP_FULL"] = sys.argv[6]
    try:
        dcp.save(state(w, b, ds), storage_writer=sdcp.Writer(root, step=300))
        result["first"] = "saved"
    except BaseException as e:  # DCP raises CheckpointException, a BaseException
        result["first"] = str(e)
    del os.environ["SHARDSTREAM_DCP_FULL"]
    dcp.save(state(w, b, ds), storage_writer=sdcp.Writer(root, step=400))  # training goes on
    dist.barrier()
    result["entries"] = sorted(os.listdir(root))
else:
    reader = sdcp.Reader(root, remote=remote or None)
    result["checkpoint"] = str(reader.checkpoint)
    w = distribute_tensor(torch.zeros(64, 12), mesh, [Shard(0)])
    b = distribute_tensor(torch.zeros(12), mesh, [Replicate()])
    st = {"model": {"w": w, "b": b}, "step": torch.tensor(0)}
    m2, opt2 = fsdp_model(77)  # other values: the load must replace every one
    msd, osd = get_state_dict(m2, opt2)
    st["fsdp"] = {"model": msd, "optim": osd}
    if BIG_ROWS:
        from torch.distributed.tensor import DTensor
        st["model"]["big"] = DTensor.from_local(torch.zeros(BIG_ROWS // world, 1024), mesh,
                                                [Shard(0)], run_check=False)
    dcp.load(st, storage_reader=reader)
    set_state_dict(m2, opt2, model_state_dict=st["fsdp"]["model"],
                   optim_state_dict=st["fsdp"]["optim"])
    ref = torch.load(os.path.join(out, "fsdp-ref.pt"))
    got = full_state(m2, opt2)
    result["fsdp_ok"] = sorted(got) == sorted(ref) and all(torch.equal(got[k], ref[k]) for k in ref)
    if BIG_ROWS:  # resharded: this rank's rows of the saved tensor, whatever the saving world
        n = BIG_ROWS // world
        result["big_ok"] = bool(torch.equal(st["model"]["big"].to_local(),
                                            big_rows(rank * n, rank * n + n)))
    lo = rank * (64 // world)
    result["w_ok"] = bool(torch.equal(st["model"]["w"].to_local(), full_w[lo:lo + 64 // world]))
    result["b_ok"] = bool(torch.equal(st["model"]["b"].to_local(), full_b))
    result["step"] = int(st["step"])
    sdcp.restore_loader(ds, reader)
    result["rest"] = [k for batch in ds for k in batch["__key__"]]
    result["manifest_ranks"] = reader.manifest()["metadata"]["ranks"]
with open(os.path.join(out, f"{phase}-{rank}.json"), "w") as f:
    json.dump(result, f)
dist.barrier()
sdcp.close_all()
dist.destroy_process_group()
"""


def run_ranks(manifest, root, remote, out, phase, world, *extra, expect_ok=True):
    # MASTER_PORT: rank 0's store binds it and every rank must be told it before it starts,
    # so it cannot be port 0 (reserved here, then released: a small race, left as it is).
    port = free_port()
    with reaped() as procs:  # a failure or a hang here leaves no rank running
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen([sys.executable, "-c", WORKER, manifest, root, remote,
                                           out, phase, *extra], env=env, stderr=subprocess.PIPE,
                                          text=True))
        errs = []
        for p in procs:
            _, err = p.communicate(timeout=240)
            errs.append((p.returncode, err))
    if expect_ok:
        for rc, err in errs:
            assert rc == 0, err[-3000:]
    results = []
    for rank in range(world):
        path = os.path.join(out, f"{phase}-{rank}.json")
        if os.path.exists(path):
            with open(path) as f:
                results.append(json.load(f))
    return results, errs


def committed(root):
    return sorted(n for n in os.listdir(root) if n.startswith("ckpt-"))


def test_four_ranks_save_async_upload_a_killed_save_leaves_nothing_then_two_ranks_restore(
        manifest, total, tmp_path):
    root, remote, out = str(tmp_path / "ckpt"), str(tmp_path / "remote"), str(tmp_path)
    saved, _ = run_ranks(manifest, root, "file://" + remote, out, "save", 4)
    consumed = [k for r in saved for k in r["consumed"]]
    assert len(consumed) == len(set(consumed)) == 4 * 2 * 5
    assert committed(root) == ["ckpt-000100"]
    assert open(os.path.join(root, "latest")).read() == "ckpt-000100\n"
    files = json.load(open(os.path.join(root, "ckpt-000100", "manifest.json")))["files"]
    names = sorted(f["name"] for f in files)
    assert names == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]
    assert all(f["checksum"].startswith("xxh3_128:") for f in files)
    assert [u["state"] for u in saved[0]["uploads"]] == ["done"]
    assert os.path.exists(os.path.join(remote, "ckpt-000100", "COMMIT"))

    # One rank is killed (SIGKILL) at each durability point of the next save: a worker
    # after its files are written, after their directory sync, after its checksums are
    # durable; the coordinator as it begins the commit.
    for point in ("1:written", "2:dir-sync", "3:sidecar", "0:finish"):
        for name in os.listdir(out):  # the survivors' results of the point before
            if name.startswith("kill-") and name.endswith(".json"):
                os.unlink(os.path.join(out, name))
        killed, errs = run_ranks(manifest, root, "file://" + remote, out, "kill", 4, point,
                                 expect_ok=False)
        victim = int(point.split(":")[0])
        survivors = [r for r in range(4) if r != victim]
        # The victim dies of its SIGKILL; every other rank's save raises (its group lost a
        # rank), the rank records the error and leaves through os._exit(0).
        assert [rc for rc, _ in errs] == [-9 if r == victim else 0 for r in range(4)], \
            (point, [(rc, err[-2000:]) for rc, err in errs])
        assert [r["rank"] for r in killed] == survivors, (point, killed)
        assert all("error" in r and "saved" not in r for r in killed), (point, killed)
        assert committed(root) == ["ckpt-000100"], point
        assert open(os.path.join(root, "latest")).read() == "ckpt-000100\n"
        assert not os.path.exists(os.path.join(remote, "ckpt-000200")), point

    # Two ranks restore: resharded model, every saved rank's data position merged; the
    # killed saves' temporary directories are gone.
    loaded, _ = run_ranks(manifest, root, "", out, "load", 2)
    assert not [n for n in os.listdir(root) if n.startswith(".tmp-")], os.listdir(root)
    for r in loaded:
        assert r["checkpoint"].endswith("ckpt-000100")
        assert r["w_ok"] and r["b_ok"] and r["step"] == 7 and r["manifest_ranks"] == 4
        assert r["fsdp_ok"], "FSDP2 parameters and AdamW moments, resharded from 4 ranks to 2"
    rest = [k for r in loaded for k in r["rest"]]
    assert sorted(consumed + rest) == sorted(set(consumed + rest))
    assert len(consumed) + len(rest) == total


def test_a_full_disk_on_one_rank_fails_the_save_on_every_rank_and_the_next_one_commits(
        manifest, tmp_path):
    root, out = str(tmp_path / "ckpt"), str(tmp_path)
    results, _ = run_ranks(manifest, root, "", out, "full", 3, "2")
    assert [r["rank"] for r in results] == [0, 1, 2]
    for r in results:
        # Every rank raises DCP's CheckpointException naming rank 2 as the one failed rank,
        # with rank 2's own traceback: its write's OSError, the kernel's ENOSPC.
        first = r["first"]
        assert first.startswith("CheckpointException ranks:"), (r["rank"], first)
        failed = re.match(r"CheckpointException ranks:\s*(?:dict_keys\()?\[([\d, ]*)\]", first)
        assert failed and failed[1] == "2", (r["rank"], first)
        assert re.findall(r"\(RANK (\d+)\)", first) == ["2"], (r["rank"], first)
        assert first.rstrip().endswith("OSError: [Errno 28] No space left on device"), \
            (r["rank"], first)
    # The same error on every rank: rank 2's, as rank 2 itself raised it.
    assert [r["first"] for r in results] == [results[2]["first"]] * 3
    assert committed(root) == ["ckpt-000400"]
    assert not [n for n in results[0]["entries"] if n.startswith(".tmp-")], results[0]["entries"]


def test_restore_from_the_remote_alone(manifest, total, tmp_path):
    root, remote, out = str(tmp_path / "ckpt"), str(tmp_path / "remote"), str(tmp_path)
    saved, _ = run_ranks(manifest, root, "file://" + remote, out, "save", 4)
    consumed = [k for r in saved for k in r["consumed"]]
    fresh = str(tmp_path / "fresh")  # a new machine: nothing local
    loaded, _ = run_ranks(manifest, fresh, "file://" + remote, out, "load", 2)
    assert committed(fresh) == ["ckpt-000100"]
    for r in loaded:
        assert r["w_ok"] and r["b_ok"] and r["step"] == 7 and r["fsdp_ok"]
    rest = [k for r in loaded for k in r["rest"]]
    assert len(set(consumed + rest)) == len(consumed) + len(rest) == total


def test_one_process_path_and_root_forms_and_plain_dcp_reads_them(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from shardstream import dcp as sdcp

    sd = {"w": torch.randn(300, 7), "n": torch.arange(5), "note": "hi"}
    path = tmp_path / "one"
    dcp.save(sd, storage_writer=sdcp.Writer(path), no_dist=True)
    sd2 = {k: (v * 2 if isinstance(v, torch.Tensor) else v) for k, v in sd.items()}
    dcp.save(sd2, storage_writer=sdcp.Writer(path), no_dist=True)  # replaces it atomically
    assert sorted(os.listdir(tmp_path)) == ["one"]
    out = {"w": torch.zeros(300, 7), "n": torch.zeros(5, dtype=torch.long), "note": ""}
    dcp.load(out, storage_reader=sdcp.Reader(path), no_dist=True)
    assert torch.equal(out["w"], sd2["w"]) and torch.equal(out["n"], sd2["n"])
    plain = {"w": torch.zeros(300, 7)}
    dcp.load(plain, storage_reader=FileSystemReader(path), no_dist=True)
    assert torch.equal(plain["w"], sd2["w"])

    root = tmp_path / "root"
    for step in (1, 2, 3, 4):
        dcp.save(sd, storage_writer=sdcp.Writer(root, step=step, keep_last=2), no_dist=True)
    assert committed(root) == ["ckpt-000003", "ckpt-000004"]
    # A corrupt newest step is skipped in favour of the one before.
    data = root / "ckpt-000004" / "__0_0.distcp"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert sdcp.Reader(root).checkpoint.name == "ckpt-000003"

    # A reader's step survives rotation until the reader is closed.
    pinned = tmp_path / "pinned"
    dcp.save(sd, storage_writer=sdcp.Writer(pinned, step=1, keep_last=1), no_dist=True)
    with sdcp.Reader(pinned) as reader:
        for step in (2, 3):
            dcp.save(sd, storage_writer=sdcp.Writer(pinned, step=step, keep_last=1), no_dist=True)
        assert committed(pinned) == ["ckpt-000001", "ckpt-000003"]
        back = {"w": torch.zeros(300, 7)}
        dcp.load(back, storage_reader=reader, no_dist=True)
        assert torch.equal(back["w"], sd["w"])
    dcp.save(sd, storage_writer=sdcp.Writer(pinned, step=4, keep_last=1), no_dist=True)
    assert committed(pinned) == ["ckpt-000004"]
    sdcp.close_all()


def test_every_checkpoint_dcp_writes_passes_the_command_line_and_both_readers_agree(tmp_path):
    # One home for the checkpoint rules: what shardstream.dcp commits, the
    # command line verifies and lists, and dcp.Reader and the C++ restore
    # choose the same step when `latest` and the intact steps disagree.
    import subprocess
    import torch.distributed.checkpoint as dcp
    from shardstream import dcp as sdcp
    from conftest import cli_dir

    def ckpt(*args):
        return subprocess.run([os.path.join(cli_dir(), "shardstream"), "ckpt", *map(str, args)],
                              capture_output=True, text=True, timeout=60)

    sd = {"w": torch.randn(50, 3), "n": torch.arange(4)}
    one = tmp_path / "one"
    dcp.save(sd, storage_writer=sdcp.Writer(one), no_dist=True)
    for args in (("verify", tmp_path, "one"), ("verify", one)):
        r = ckpt(*args)
        assert r.returncode == 0 and "one: ok" in r.stdout, (args, r.stdout, r.stderr)
    r = ckpt("ls", one)
    assert r.returncode == 0 and r.stdout.startswith("one  step 0  ") and "files" in r.stdout
    raw = bytearray((one / "__0_0.distcp").read_bytes())
    raw[10] ^= 0xFF
    (one / "__0_0.distcp").write_bytes(bytes(raw))
    r = ckpt("verify", one)
    assert r.returncode != 0 and "__0_0.distcp" in r.stdout and "checksum" in r.stdout

    root = tmp_path / "root"
    for step in (1, 2, 3):
        dcp.save(sd, storage_writer=sdcp.Writer(root, step=step, keep_last=5), no_dist=True)
    sdcp.close_all()
    r = ckpt("verify", root)
    assert r.returncode == 0 and r.stdout.count(": ok") == 3, r.stdout
    assert ckpt("ls", root).stdout.count("step ") == 3
    # `latest` lags behind an intact newer step (a crash before it moved),
    # and the newest step is damaged: both readers take step 2.
    (root / "latest").write_text("ckpt-000001\n")
    (root / "ckpt-000003" / ".metadata").write_bytes(b"truncated")
    assert sdcp.Reader(root).checkpoint.name == "ckpt-000002"
    from shardstream import _core
    native = _core.CheckpointWriter(str(root), 5, 0, "")
    restored = native.restore_latest(True)
    assert restored["url"].rstrip("/").endswith("ckpt-000002"), restored
    assert any("ckpt-000003" in why for why in restored["skipped"])
    del native
    sdcp.close_all()


def test_bad_arguments_and_an_empty_root_are_clear_errors(tmp_path):
    from shardstream import dcp as sdcp
    from shardstream.errors import ConfigError

    with pytest.raises(ConfigError, match="remote needs numbered steps"):
        sdcp.Writer(tmp_path / "x", remote="file:///tmp/r")
    with pytest.raises(ConfigError, match="step must be an integer"):
        sdcp.Writer(tmp_path / "x", step=-1)
    with pytest.raises(FileNotFoundError, match="no intact checkpoint in"):
        sdcp.Reader(tmp_path / "empty")


def _post(url, obj):
    import urllib.request
    req = urllib.request.Request(url, data=json.dumps(obj).encode(), method="POST")
    return json.loads(urllib.request.urlopen(req, timeout=10).read())


def test_s3_uploads_survive_5xx_and_resets_a_killed_upload_never_commits_and_is_aborted(
        manifest, total, tmp_path, monkeypatch):
    """Two ranks, 160 MiB of sharded state (each rank's file takes the multipart path), an S3
    remote on moto (signing enforced) behind a fault proxy."""
    import boto3
    import time
    with moto_s3_server() as (endpoint, keys):
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=keys["access_key"],
                          aws_secret_access_key=keys["secret_key"])
        s3.create_bucket(Bucket="ckpt")
        with fault_proxy(int(endpoint.rsplit(":", 1)[1])) as (proxy, control):
            clean_aws_env(monkeypatch, AWS_ACCESS_KEY_ID=keys["access_key"],
                          AWS_SECRET_ACCESS_KEY=keys["secret_key"], AWS_REGION="us-east-1",
                          AWS_ENDPOINT_URL_S3=proxy)
            monkeypatch.setenv("SS_TEST_BIG_MIB", "160")
            root, remote, out = str(tmp_path / "ckpt"), "s3://ckpt/run1", str(tmp_path)
            # 1. Four PUTs answered 503 SlowDown by the proxy: retried, then committed.
            _post(control + "/status_next", {"count": 4, "status": 503, "method": "PUT"})
            saved, _ = run_ranks(manifest, root, remote, out, "save", 2)
            assert [u["state"] for u in saved[0]["uploads"]] == ["done"], saved[0]["uploads"]
            assert _post(control + "/status_next", {"count": 0})["statuses"] == 4
            def listed():  # (moto mis-signs a Prefix with '/', so: everything)
                return {o["Key"] for o in s3.list_objects_v2(Bucket="ckpt").get("Contents", [])}
            keys_100 = listed()
            assert "run1/ckpt-000100/COMMIT" in keys_100
            assert {"run1/ckpt-000100/__0_0.distcp", "run1/ckpt-000100/__1_0.distcp",
                    "run1/ckpt-000100/.metadata"} <= keys_100
            consumed = [k for r in saved for k in r["consumed"]]

            # 2. The next save commits locally; its upload is killed halfway (SIGKILL of
            # every rank once a multipart upload is open): the remote shows no step 200.
            port = free_port()  # MASTER_PORT: see run_ranks
            with reaped() as procs:  # a failed assertion here leaves no rank running either
                for rank in range(2):
                    env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2",
                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                               LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
                    procs.append(subprocess.Popen([sys.executable, "-c", WORKER, manifest, root,
                                                   remote, out, "upkill"], env=env,
                                                  stderr=subprocess.DEVNULL))
                pending = []
                deadline = time.monotonic() + 120
                while not pending and time.monotonic() < deadline:
                    assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
                    pending = s3.list_multipart_uploads(Bucket="ckpt").get("Uploads", [])
                    time.sleep(0.005)
                for p in procs:
                    p.kill()
                    p.wait(timeout=60)
            assert pending, "the upload never opened a multipart upload"
            # Both ranks died of the test's SIGKILL, in the upload (neither got to its exit).
            assert [p.returncode for p in procs] == [-9, -9]
            assert committed(root) == ["ckpt-000100", "ckpt-000200"]  # committed locally
            assert "run1/ckpt-000200/COMMIT" not in listed()
            latest = s3.get_object(Bucket="ckpt", Key="run1/latest")["Body"].read()
            assert latest.strip() == b"ckpt-000100"
            assert s3.list_multipart_uploads(Bucket="ckpt").get("Uploads")

            # 3. A new machine restores from the remote alone, a download reset on
            # the way: the newest committed step (100), every file verified, two ranks. Opening
            # the remote aborted the stale multipart upload.
            _post(control + "/reset_first", {"bytes": 5 << 20})
            fresh = str(tmp_path / "fresh")
            loaded, _ = run_ranks(manifest, fresh, remote, out, "load", 2)
            assert not s3.list_multipart_uploads(Bucket="ckpt").get("Uploads")
            assert _post(control + "/status_next", {"count": 0})["resets"] >= 1
            for r in loaded:
                assert r["checkpoint"].endswith("ckpt-000100")
                assert r["w_ok"] and r["b_ok"] and r["big_ok"] and r["fsdp_ok"] and r["step"] == 7
            rest = [k for r in loaded for k in r["rest"]]
            assert len(set(consumed + rest)) == len(consumed) + len(rest) == total
