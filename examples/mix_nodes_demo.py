"""Demo: two data sets mixed by weight, trained on two "nodes" with torchrun, each node keeping
its own shards in its own cache. A web set (read once an epoch) and a code set of half its size
(read twice an epoch: the same share of the mix) are served over loopback HTTP;
examples/train_multinode.py runs under `torchrun --nnodes 2 --nproc-per-node 1` twice (one per
node), packs the documents into equal token batches on both ranks, and reports per epoch how
many of the shards a rank opened its node's cache already held: from the second epoch on, all.

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
    port = free_port()
    procs = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
               "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "mix-demo",
               "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}",
               "--local-addr", "127.0.0.1", "--max-restarts", "0",
               os.path.join(HERE, "train_multinode.py"),
               "--data", f"{base}/web/manifest.jsonl", "--weight", "0.5",
               "--data", f"{base}/code/manifest.jsonl", "--weight", "0.5",
               "--epoch-size", str(2 * web), "--epochs", "3",
               "--cache-dir", os.path.join(args.dir, f"node{node}-cache"),
               "--ckpt", os.path.join(args.dir, "ckpt"), "--out", os.path.join(args.dir, "out")]
        procs.append(subprocess.Popen(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    ok = True
    for p in procs:
        out, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            print(out[-3000:])
            ok = False
    server.shutdown()
    if not ok:
        sys.exit("mix demo FAILED")
    for name in sorted(os.listdir(os.path.join(args.dir, "out"))):
        with open(os.path.join(args.dir, "out", name)) as f:
            r = json.load(f)
        node = r["rank"]  # one rank per node
        docs = {}
        for e in r["seen"]:
            if "keys" in e:
                d = docs.setdefault(e["epoch"], {"w": 0, "c": 0})
                for k in e["keys"]:
                    d[k[0]] += 1
        for e in r["seen"]:
            if "cache_opens" in e:
                d = docs.get(e["epoch"], {"w": 0, "c": 0})
                print(f"   node {node} epoch {e['epoch']}: {e['steps']} steps, "
                      f"{d['w']} web + {d['c']} code documents, "
                      f"{e['cache_hits']} of {e['cache_opens']} shards already in its cache")


if __name__ == "__main__":
    main()
