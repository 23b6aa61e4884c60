"""Two nodes on loopback, launched as users launch them: `torchrun --nnodes 2
--nproc-per-node 2` twice (c10d rendezvous on 127.0.0.1), one cache directory
per node, two token data sets of uneven documents served over HTTP by the test
server and mixed by weight (a web set read once an epoch, a code set of half
its size twice), examples/train_multinode.py training a small model with DDP.
The job is interrupted after a few steps (a checkpoint of model, optimizer and
every rank's data state) and relaunched: every rank ends every epoch together
(a hang fails by the timeout), no document is trained on more often in an
epoch than its data set's share asks, across the interruption, and from the
second epoch on each node reads only complete entries of its cache: the HTTP
server's own request log shows no shard downloaded in epoch 1 (no GET of one,
not a byte)."""

import collections
import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shardstream
from conftest import free_port, read_manifest, reaped

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SERVER = os.path.join(HERE, "..", "servers", "http_server.py")
SCRIPT = os.path.join(ROOT, "examples", "train_multinode.py")



WEB, CODE = 16 * 40, 8 * 40  # documents


@pytest.fixture
def served(tmp_path):
    """Yields (the two manifest urls, the server's request log, every shard's url path)."""
    root = tmp_path / "www"
    rng = np.random.default_rng(0)
    for name, prefix, n in (("web", "w", WEB), ("code", "c", CODE)):
        with shardstream.ShardWriter(str(root / name), max_samples=40, write_index=True) as w:
            for i in range(n):
                k = int(rng.integers(5, 120))
                w.write({"__key__": f"{prefix}{i:05d}",
                         "tokens.npy": ((np.arange(k) * 7 + i) % 96 + 1).astype(np.int32)})
    shards = {f"/{name}/{e['url']}" for name in ("web", "code")
              for e in read_manifest(root / name / "manifest.jsonl")}
    assert len(shards) == WEB // 40 + CODE // 40
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, SERVER, "--root", str(root), "--log", str(log)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().split()[1])
        yield ([f"http://127.0.0.1:{port}/web/manifest.jsonl",
                f"http://127.0.0.1:{port}/code/manifest.jsonl"], log, shards)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def requests(log):
    """The server's request log so far: every request it has received, in order."""
    if not log.exists():
        return []
    with open(log) as f:
        return [json.loads(line) for line in f.read().splitlines(keepends=True)
                if line.endswith("\n")]


# What each rank prints as it ends an epoch (examples/train_multinode.py, with --out).
EPOCH_END = re.compile(r"rank (\d+) epoch (\d+): ")


def launch(url, tmp_path, phase, log, stop_after=0):
    """Runs the job (two torchrun nodes) to its end. Returns (each rank's results, the epoch
    ends: (rank, epoch, how many requests the server had received when the test read that
    rank's line))."""
    # torchrun's c10d rendezvous: node 0 hosts it on the port --rdzv-endpoint names, and node 1
    # must be given that port before it starts, so it cannot be port 0 (reserved here, then
    # released: a small race, left as it is).
    port = free_port()
    ends, outputs = [], [[], []]

    def follow(proc, out):
        try:
            for line in proc.stdout:
                out.append(line)
                for m in EPOCH_END.finditer(line):  # (two ranks of a node share the pipe)
                    ends.append((int(m[1]), int(m[2]), len(requests(log))))
        except ValueError:  # the pipe closed under it: the test failed and killed the job
            pass

    with reaped() as procs:  # a failure or a hang kills both agents and all four ranks
        readers = []
        for node in range(2):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                   "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"job-{phase}",
                   "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}",
                   "--local-addr", "127.0.0.1", "--max-restarts", "0",
                   SCRIPT, "--data", url[0], "--weight", "0.5", "--data", url[1],
                   "--weight", "0.5", "--epoch-size", str(2 * WEB),
                   "--cache-dir", str(tmp_path / f"node{node}-cache"),
                   "--cache-limit", "1GB", "--ckpt", str(tmp_path / "ckpt"),
                   "--out", str(tmp_path / phase)]
            if stop_after:
                cmd += ["--stop-after", str(stop_after)]
            # (Not PYTHONUNBUFFERED: the ranks flush each line, and a buffered print is one
            # write, which the two ranks of a node cannot interleave on their shared pipe.)
            env = dict(os.environ, OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
            readers.append(threading.Thread(target=follow, args=(procs[-1], outputs[node]),
                                            daemon=True))
            readers[-1].start()
        def tails():
            return "\n".join(f"--- node {n} ---\n" + "".join(out)[-3000:]
                             for n, out in enumerate(outputs))

        # A node that fails ends the test at once with what it printed (the other one would
        # wait for it in the rendezvous); a hang shows what both printed.
        deadline = time.monotonic() + 240
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed:
                time.sleep(1)  # the rest of its output
                pytest.fail(f"{phase}: a node failed (exit {failed[0].returncode})\n{tails()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{phase}: the nodes did not finish together (a hang)\n{tails()}")
            time.sleep(0.1)
        for t in readers:
            t.join(timeout=60)
        for p, out in zip(procs, outputs):
            assert p.returncode == 0, "".join(out)[-4000:]
    results = []
    for name in sorted(os.listdir(tmp_path / phase)):
        with open(tmp_path / phase / name) as f:
            results.append(json.load(f))
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3], outputs
    return results, ends


def test_two_nodes_train_resume_and_serve_later_epochs_from_their_caches(served, tmp_path):
    urls, log, shards = served
    first, _ = launch(urls, tmp_path, "first", log, stop_after=4)
    assert [r["step"] for r in first] == [4] * 4
    # A sharded checkpoint (shardstream.dcp): one file per rank, committed as one step.
    assert (tmp_path / "ckpt" / "latest").read_text() == "ckpt-000004\n"
    files = json.loads((tmp_path / "ckpt" / "ckpt-000004" / "manifest.json").read_text())["files"]
    assert sorted(f["name"] for f in files) == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]
    before_second = len(requests(log))
    second, ends = launch(urls, tmp_path, "second", log)
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
    # Epoch 1 comes from each node's own cache, as the server saw it (its request log): from
    # the moment the first rank ends epoch 0 to the end of the job, no shard is downloaded,
    # not a byte of one. (Each rank's new loader does ask the server for each shard's
    # headers: HEAD requests, no body.) The window opens when the test reads that rank's
    # line, after which a rank still has its manifest, index and HEAD requests to make
    # before it could ask for a shard's bytes.
    assert sorted((rank, epoch) for rank, epoch, _ in ends) == \
        [(rank, epoch) for rank in range(4) for epoch in (0, 1)], ends
    epoch1_from = min(n for _, epoch, n in ends if epoch == 0)
    log_after = requests(log)
    assert before_second <= epoch1_from <= len(log_after)
    downloads = [r for r in log_after[epoch1_from:]
                 if r["path"] in shards and (r["method"] != "HEAD" or r["sent"] != 0)]
    assert downloads == [], f"epoch 1 downloaded shards {len(downloads)} times: {downloads[:5]}"
    # ... while before epoch 1 (the first launch, the relaunch's epoch 0) it sent every shard.
    served_before = {r["path"] for r in log_after[:epoch1_from]
                     if r["method"] == "GET" and r["status"] in (200, 206) and r["sent"] > 0}
    assert shards <= served_before, sorted(shards - served_before)
    # The ranks' own counters agree: every shard a rank opens in epoch 1 is a complete
    # entry of its node's cache.
    counts = [e for r in second for e in r["seen"] if e.get("epoch") == 1 and "cache_opens" in e]
    assert len(counts) == 4, counts
    assert all(e["cache_opens"] > 0 and e["cache_hits"] == e["cache_opens"] for e in counts), \
        counts
