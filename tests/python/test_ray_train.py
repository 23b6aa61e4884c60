"""Training under Ray Train (examples/train_ray.py run as users run it): a TorchTrainer of
2 workers iterates a ShardDataset whose ranks come from Ray Train's process group. A worker
dies twice: Ray Train restarts the group once from its newest checkpoint, and the second death
ends the run; a relaunch of the same run on 1 worker resumes from Ray Train's checkpoint. Every
sample reaches exactly one committed step per epoch: the steps after the checkpoint a restart
resumed from come again, nothing else repeats or goes missing."""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("ray.train", reason="Ray is an optional extra (shardstream[ray])")

import shardstream

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_ray.py")
SAMPLES = 480


def run(args, tmp_path):
    # Ray Train polls its workers every 2 s by default; a reported checkpoint counts from then.
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_AUTH_MODE="disabled",
               RAY_TRAIN_HEALTH_CHECK_INTERVAL_S="0.5")
    proc = subprocess.run([sys.executable, SCRIPT, "--storage", str(tmp_path / "ray"),
                           "--name", "run", "--out", str(tmp_path / "out"), *args],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout


def committed(out):
    """The lines of the steps that count: an attempt's lines up to the step the next attempt
    resumed from (later ones were lost with it), and every line of the last attempt."""
    attempts = collections.defaultdict(list)
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            for line in f:
                entry = json.loads(line)
                attempts[entry["from"]].append(entry)
    starts = sorted(attempts)
    kept = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else None
        kept += [e for e in attempts[start] if end is None or e["step"] <= end]
    return starts, attempts, kept


def test_a_trainer_restarts_and_a_relaunch_on_fewer_workers_resume_exactly(tmp_path):
    rng = np.random.default_rng(0)
    with shardstream.ShardWriter(str(tmp_path / "data"), max_samples=24) as w:
        for i in range(SAMPLES):
            w.write({"__key__": f"s{i:05d}", "x.npy": rng.standard_normal(8).astype(np.float32),
                     "cls": i % 4})
    data = str(tmp_path / "data" / "manifest.jsonl")
    # Rank 1 dies at step 7 (Ray Train restarts the group from step 5's checkpoint) and
    # again at 13, which --max-failures 1 does not forgive: the run fails.
    rc, log = run(["--data", data, "--workers", "2", "--epochs", "2", "--ckpt-every", "5",
                   "--max-failures", "1", "--die-at", "7,13"], tmp_path)
    assert rc != 0, log[-3000:]
    starts, attempts, _ = committed(tmp_path / "out")
    assert starts == [0, 5], f"one restart, from step 5's checkpoint: {starts}\n{log[-3000:]}"
    assert {e["world"] for e in attempts[5]} == {2}
    assert max(e["step"] for e in attempts[0]) == 7 and max(e["step"] for e in attempts[5]) == 13
    # The same run launched again, on 1 worker: Ray Train hands it step 10's checkpoint.
    rc, log = run(["--data", data, "--workers", "1", "--epochs", "2", "--ckpt-every", "5"],
                  tmp_path)
    assert rc == 0, log[-3000:]
    assert "done:" in log
    starts, attempts, kept = committed(tmp_path / "out")
    assert starts == [0, 5, 10], starts
    assert {e["world"] for e in attempts[10]} == {1}
    assert {e["rank"] for e in attempts[0]} == {0, 1}  # ranks from Ray Train's process group
    everything = {f"s{i:05d}" for i in range(SAMPLES)}
    for epoch in (0, 1):
        keys = collections.Counter(k for e in kept if e["epoch"] == epoch for k in e["keys"])
        twice = [k for k, n in keys.items() if n > 1]
        assert not twice, f"epoch {epoch}: delivered twice: {twice[:5]}"
        assert set(keys) == everything, f"epoch {epoch}: missing {sorted(everything - set(keys))[:5]}"
    # The steps lost with each attempt did come again: they were trained on twice in all.
    lost = [e for e in attempts[0] if e["step"] > 5] + [e for e in attempts[5] if e["step"] > 10]
    assert lost and all(k in everything for e in lost for k in e["keys"])
