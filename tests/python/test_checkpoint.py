"""shardstream.CheckpointManager: torch state streamed into atomic local
checkpoints, rotation, save_async snapshots, background upload to a file://
remote and to s3:// (moto, authentication enforced), remote rotation, restore
from the remote alone and past a corrupt checkpoint."""

import os
import shutil

import pytest
import torch

import shardstream
from shardstream.torch import ShardDataset


def state_for(step):
    return {"step": step, "w": torch.full((64, 64), float(step)), "opt": {"lr": 0.1 * step}}


def test_save_load_and_rotation(tmp_path):
    mgr = shardstream.CheckpointManager(tmp_path / "ck", keep_last=2, every_steps=10)
    assert mgr.load_latest() is None and mgr.latest() is None
    assert [s for s in range(35) if mgr.should_save(s)] == [10, 20, 30]
    for step in (10, 20, 30, 40):
        m = mgr.save(step, state_for(step), metadata={"loss": 1.0 / step})
        assert m["name"] == f"ckpt-{step:06d}" and m["files"][0]["name"] == "state.pt"
    assert sorted(os.listdir(tmp_path / "ck")) == ["LOCK", "ckpt-000030", "ckpt-000040", "latest"] \
        or sorted(p for p in os.listdir(tmp_path / "ck") if p.startswith("ckpt-")) == \
        ["ckpt-000030", "ckpt-000040"]
    latest = mgr.latest()
    assert latest["step"] == 40 and latest["metadata"] == {"loss": 0.025}
    got = mgr.load_latest(map_location="cpu")
    assert got["step"] == 40 and torch.equal(got["w"], torch.full((64, 64), 40.0))
    assert mgr.last_restored["step"] == 40 and not mgr.last_restored["from_remote"]
    mgr.close()


def test_second_manager_on_the_same_directory_is_refused(tmp_path):
    mgr = shardstream.CheckpointManager(tmp_path)
    with pytest.raises(shardstream.UnavailableError):
        shardstream.CheckpointManager(tmp_path)
    mgr.close()
    shardstream.CheckpointManager(tmp_path).close()  # the lock went with the first


def test_save_async_snapshots_before_returning(tmp_path):
    mgr = shardstream.CheckpointManager(tmp_path)
    w = torch.zeros(256, 256)
    mgr.save_async(1, {"w": w})
    w.add_(5)  # training goes on and changes the weights
    mgr.wait()
    assert torch.equal(mgr.load_latest()["w"], torch.zeros(256, 256))
    assert mgr.status()["saving"] is False
    mgr.close()


def test_corrupt_latest_falls_back_to_the_one_before(tmp_path):
    mgr = shardstream.CheckpointManager(tmp_path, keep_last=3)
    mgr.save(1, state_for(1))
    mgr.save(2, state_for(2))
    path = tmp_path / "ckpt-000002" / "state.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    got = mgr.load_latest()
    assert got["step"] == 1
    assert any("ckpt-000002" in s for s in mgr.last_restored["skipped"])
    mgr.close()


def test_background_upload_then_restore_from_remote_alone(tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    mgr = shardstream.CheckpointManager(local, remote=f"file://{remote}", keep_last=1)
    for step in (5, 6):
        mgr.save(step, state_for(step))
    mgr.wait(timeout=60)
    uploads = {u["name"]: u["state"] for u in mgr.status()["uploads"]}
    assert uploads.get("ckpt-000006") == "done"
    assert (remote / "ckpt-000006" / "state.pt").exists()
    mgr.close()
    shutil.rmtree(local)
    mgr = shardstream.CheckpointManager(local, remote=f"file://{remote}")
    got = mgr.load_latest()
    assert got["step"] == 6 and mgr.last_restored["from_remote"]
    mgr.close()


def test_remote_rotation_follows_keep_last(tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    with shardstream.CheckpointManager(local, remote=f"file://{remote}", keep_last=2) as mgr:
        for step in range(1, 6):
            mgr.save(step, state_for(step))
        mgr.wait(timeout=60)
    assert sorted(p for p in os.listdir(remote) if p.startswith("ckpt-")) == \
        ["ckpt-000004", "ckpt-000005"]
    remote2 = tmp_path / "remote2"
    with shardstream.CheckpointManager(tmp_path / "l2", remote=f"file://{remote2}", keep_last=1,
                                       remote_keep_last=0) as mgr:
        for step in range(1, 4):
            mgr.save(step, state_for(step))
        mgr.wait(timeout=60)
    assert len([p for p in os.listdir(remote2) if p.startswith("ckpt-")]) == 3




def test_s3_upload_rotation_and_restore_from_the_remote_alone(tmp_path, moto_s3):
    local = tmp_path / "local"
    remote = "s3://ckpt/runs/py"
    with shardstream.CheckpointManager(local, remote=remote, keep_last=2) as mgr:
        for step in (1, 2, 3):
            mgr.save(step, state_for(step))
        mgr.wait(timeout=120)
        assert {u["name"]: u["state"] for u in mgr.status()["uploads"]}["ckpt-000003"] == "done"
    keys = sorted(o["Key"] for o in moto_s3.list_objects_v2(Bucket="ckpt")["Contents"])
    assert keys == ["runs/py/ckpt-000002/COMMIT", "runs/py/ckpt-000002/manifest.json",
                    "runs/py/ckpt-000002/state.pt", "runs/py/ckpt-000003/COMMIT",
                    "runs/py/ckpt-000003/manifest.json", "runs/py/ckpt-000003/state.pt",
                    "runs/py/latest"]
    shutil.rmtree(local)
    with shardstream.CheckpointManager(local, remote=remote) as mgr:
        got = mgr.load_latest(map_location="cpu")
        assert got["step"] == 3 and torch.equal(got["w"], torch.full((64, 64), 3.0))
        assert mgr.last_restored["from_remote"] and mgr.last_restored["skipped"] == []
    # The newest loses its marker: the one before is restored.
    moto_s3.delete_object(Bucket="ckpt", Key="runs/py/ckpt-000003/COMMIT")
    shutil.rmtree(local)
    with shardstream.CheckpointManager(local, remote=remote) as mgr:
        got = mgr.load_latest(map_location="cpu")
        assert got["step"] == 2 and mgr.last_restored["from_remote"]
        assert any("ckpt-000003" in s and "no commit marker" in s
                   for s in mgr.last_restored["skipped"]), mgr.last_restored["skipped"]


def test_data_and_model_resume_together(manifest, total, tmp_path):
    ds = ShardDataset(manifest, fields=["cls"], batch_size=10, seed=5)
    it = iter(ds)
    seen = [k for _ in range(7) for k in next(it)["__key__"]]
    mgr = shardstream.CheckpointManager(tmp_path)
    mgr.save(7, {"data": ds.state_dict(), "model": {"w": torch.ones(3)}})
    ds.close()
    state = mgr.load_latest()
    ds2 = ShardDataset(manifest, fields=["cls"], batch_size=10, seed=5)
    ds2.load_state_dict(state["data"])
    rest = [k for b in ds2 for k in b["__key__"]]
    assert sorted(seen + rest) == sorted(f"s{i:06d}" for i in range(total))
    ds2.close()
    mgr.close()
