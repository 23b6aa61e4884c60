"""Two nodes on loopback, launched as users launch them: `torchrun --nnodes 2
--nproc-per-node 2` twice (c10d rendezvous on 127.0.0.1), one cache directory
per node, two token data sets of uneven documents served over HTTP by the test
server and mixed by weight (a web set read once an epoch, a code set of half
its size twice), examples/train_multinode.py training a small model with DDP.
The job is interrupted after a few steps (a checkpoint of model, optimizer and
every rank's data state) and relaunched: every rank ends every epoch together
(a hang fails by the timeout), no document is trained on more often in an
epoch than its data set's share asks, across the interruption, and from the
second epoch on each node reads only complete entries of its cache (nothing
downloaded)."""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import shardstream
from conftest import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SERVER = os.path.join(HERE, "..", "servers", "http_server.py")
SCRIPT = os.path.join(ROOT, "examples", "train_multinode.py")



WEB, CODE = 16 * 40, 8 * 40  # documents


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "www"
    rng = np.random.default_rng(0)
    for name, prefix, n in (("web", "w", WEB), ("code", "c", CODE)):
        with shardstream.ShardWriter(str(root / name), max_samples=40, write_index=True) as w:
            for i in range(n):
                k = int(rng.integers(5, 120))
                w.write({"__key__": f"{prefix}{i:05d}",
                         "tokens.npy": ((np.arange(k) * 7 + i) % 96 + 1).astype(np.int32)})
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, SERVER, "--root", str(root), "--log", str(log)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().split()[1])
        yield [f"http://127.0.0.1:{port}/web/manifest.jsonl",
               f"http://127.0.0.1:{port}/code/manifest.jsonl"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def launch(url, tmp_path, phase, stop_after=0):
    port = free_port()
    procs = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
               "--nproc-per-node", "2", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"job-{phase}",
               "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}",
               "--local-addr", "127.0.0.1", "--max-restarts", "0",
               SCRIPT, "--data", url[0], "--weight", "0.5", "--data", url[1], "--weight", "0.5",
               "--epoch-size", str(2 * WEB), "--cache-dir", str(tmp_path / f"node{node}-cache"),
               "--cache-limit", "1GB", "--ckpt", str(tmp_path / "ckpt"),
               "--out", str(tmp_path / phase)]
        if stop_after:
            cmd += ["--stop-after", str(stop_after)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=240)
            outputs.append(out)
            assert p.returncode == 0, out[-4000:]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{phase}: the nodes did not finish together (a hang)")
    results = []
    for name in sorted(os.listdir(tmp_path / phase)):
        with open(tmp_path / phase / name) as f:
            results.append(json.load(f))
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3], outputs
    return results


def test_two_nodes_train_resume_and_serve_later_epochs_from_their_caches(served, tmp_path):
    first = launch(served, tmp_path, "first", stop_after=4)
    assert [r["step"] for r in first] == [4] * 4
    # A sharded checkpoint (shardstream.dcp): one file per rank, committed as one step.
    assert (tmp_path / "ckpt" / "latest").read_text() == "ckpt-000004\n"
    files = json.loads((tmp_path / "ckpt" / "ckpt-000004" / "manifest.json").read_text())["files"]
    assert sorted(f["name"] for f in files) == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]
    second = launch(served, tmp_path, "second")
    steps = {r["step"] for r in second}
    assert len(steps) == 1 and steps.pop() > 4, "every rank took the same number of steps"
    per_epoch = {}
    for r in first + second:
        for entry in r["seen"]:
            if "keys" in entry:
                per_epoch.setdefault(entry["epoch"], []).extend(entry["keys"])
    assert set(per_epoch) == {0, 1}
    for epoch, keys in per_epoch.items():
        # Each set's share is 640 documents: the web set once, the code set twice.
        times = collections.Counter(keys)
        web = [k for k in keys if k[0] == "w"]
        code = [k for k in keys if k[0] == "c"]
        assert max(times[k] for k in web) == 1, f"epoch {epoch}: a web document twice"
        assert max(times[k] for k in code) <= 2, f"epoch {epoch}: a code document 3 times"
        assert len(web) > 0.8 * WEB and len(code) > 0.8 * 2 * CODE, \
            f"epoch {epoch}: {len(web)} web and {len(code)} code documents"
    # Epoch 1 comes from each node's own cache: every shard a rank opens is
    # a complete entry there (nothing downloaded).
    ends = [e for r in second for e in r["seen"] if e.get("epoch") == 1 and "cache_opens" in e]
    assert len(ends) == 4, ends
    assert all(e["cache_opens"] > 0 and e["cache_hits"] == e["cache_opens"] for e in ends), ends
