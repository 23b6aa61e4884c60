"""Demo: two data sets mixed by weight, trained on two "nodes" with torchrun, each node keeping
its own shards in its own cache. A web set (read once an epoch) and a code set of half its size
(read twice an epoch: the same share of the mix) are served over loopback HTTP;
examples/train_multinode.py runs under `torchrun --nnodes 2 --nproc-per-node 1` twice (one per
node), packs the documents into equal token batches on both ranks, and reports per epoch how
many of the shards a rank opened its node's cache already held: from the second epoch on, all.
The first launch is interrupted after 100 steps with a sharded checkpoint (shardstream.dcp:
one file per rank, committed once both are durable, uploaded in the background); the relaunch
resumes from it, model, optimizer and data position.

    python examples/mix_nodes_demo.py [--dir /tmp/shardstream-mix]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np

import shardstream
from train_demo import serve

HERE = os.path.dirname(os.path.abspath(__file__))


def write_set(out: str, prefix: str, docs: int) -> None:
    rng = np.random.default_rng(len(prefix) + docs)
    with shardstream.ShardWriter(out, max_samples=40, write_index=True) as w:
        for i in range(docs):
            n = int(rng.integers(5, 120))
            w.write({"__key__": f"{prefix}{i:05d}",
                     "tokens.npy": ((np.arange(n) * 7 + i) % 96 + 1).astype(np.int32)})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/shardstream-mix")
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    www = os.path.join(args.dir, "www")
    web, code = 12 * 40, 6 * 40
    write_set(os.path.join(www, "web"), "w", web)
    write_set(os.path.join(www, "code"), "c", code)
    server = serve(www)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    print(f"   web: {web} documents in 12 shards, code: {code} in 6, served at {base}")
    print("   mix 0.5 web + 0.5 code, 960 documents an epoch; 2 nodes x 1 rank, node_local=True")
    def launch(tag, extra):
        """Both nodes of one torchrun job; each node's output."""
        port = free_port()
        procs = []
        for node in range(2):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                   "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"mix-demo-{tag}",
                   "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}",
                   "--local-addr", "127.0.0.1", "--max-restarts", "0",
                   os.path.join(HERE, "train_multinode.py"),
                   "--data", f"{base}/web/manifest.jsonl", "--weight", "0.5",
                   "--data", f"{base}/code/manifest.jsonl", "--weight", "0.5",
                   "--epoch-size", str(2 * web), "--epochs", "3",
                   "--cache-dir", os.path.join(args.dir, f"node{node}-cache"),
                   "--ckpt", os.path.join(args.dir, "ckpt"),
                   "--ckpt-remote", "file://" + os.path.join(args.dir, "ckpt-remote"),
                   "--out", os.path.join(args.dir, "out"), *extra]
            procs.append(subprocess.Popen(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        outs, ok = [], True
        for p in procs:
            out, _ = p.communicate(timeout=300)
            outs.append(out)
            if p.returncode != 0:
                print(out[-3000:])
                ok = False
        if not ok:
            server.shutdown()
            sys.exit("mix demo FAILED")
        return outs

    def said(outs, start):
        return [ln.split("] ", 1)[-1] for out in outs for ln in out.splitlines()
                if start in ln]

    outs = launch("first", ["--stop-after", "100"])
    for line in said(outs, "saved ckpt-"):
        print(f"   interrupted after step 100: {line} (uploaded to ckpt-remote)")
    outs = launch("second", [])
    for line in said(outs, "resumed from"):
        print(f"   relaunched: {line}")
    server.shutdown()
    # Per node: documents of each data set per epoch (both launches), and from the
    # relaunch's epoch ends how many shards its cache already held.
    docs, ends = {}, {}
    for name in sorted(os.listdir(os.path.join(args.dir, "out"))):
        with open(os.path.join(args.dir, "out", name)) as f:
            r = json.load(f)
        node = r["rank"]  # one rank per node
        for e in r["seen"]:
            if "keys" in e:
                d = docs.setdefault((node, e["epoch"]), {"w": 0, "c": 0})
                for k in e["keys"]:
                    d[k[0]] += 1
            if "cache_opens" in e:
                ends[(node, e["epoch"])] = e
    for (node, epoch), e in sorted(ends.items()):
        d = docs.get((node, epoch), {"w": 0, "c": 0})
        print(f"   node {node} epoch {epoch}: {d['w']} web + {d['c']} code documents, "
              f"{e['cache_hits']} of {e['cache_opens']} shard opens served whole by its cache")

if __name__ == "__main__":
    main()
