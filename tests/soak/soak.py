#!/usr/bin/env python3
"""The soak: a training job on loopback meets what a cluster does to it, all at
once, and the run proves that every document reached a committed training step
exactly once.

  python tests/soak/soak.py --minutes 30 [--seed 1] [--work DIR] [--json FILE]
  (scripts/soak.sh [minutes] runs it)

The job: 2 "nodes" x 2 ranks (torchrun, c10d rendezvous on 127.0.0.1), each rank
a StatefulDataLoader with 2 worker processes, DDP over gloo
(tests/soak/soak_train.py). Two token data sets mixed by weight and packed: a
web set served over HTTP (tests/servers/http_server.py) and a code set in moto's
S3 (signing enforced) read with credentials from an instance metadata server
that mints them for 30 s at a time; each reached through a fault proxy.
node_local, each node's cache limited to about half of its part (it evicts
every epoch); node 1's cache on a small tmpfs of its own. One web shard is
corrupt (error_policy="skip_shard"). A shardstream.dcp checkpoint every 6
steps.

The faults, seeded, all through the run: connection resets, 503 storms,
truncated bodies (clean closes and resets mid-body), stalls and slow
connections, failing and stalling credential fetches, ENOSPC on node 1's cache
(its tmpfs filled for a while), a rank SIGKILLed at a random step (torchrun
--max-restarts restarts the job from the last checkpoint), and the whole job
preempted and relaunched on another world size (4 -> 2 -> 4 ...).

At --minutes the driver asks the job to stop at the next epoch's end, and then
checks, from the documents each rank logged for each step and from where each
restart resumed (a step is committed when no later restart resumed from before
it):
- every document of every epoch reached a committed step exactly once: the web
  set's once (but the corrupt shard's, skipped), the code set's twice (its
  weight is two passes an epoch); "lost" and "repeated" count the differences;
- no step waited longer than --max-wait for its batch, and the job never went
  --hang seconds without a step (a hang fails the run);
- no node's cache went over its limit; each rank process's descriptors and
  threads at its last 3 checkpoints are at most 2 above its 2nd to 4th (the
  DataLoader workers live an epoch and are not checked); RSS: the slope within
  each process, pooled;
- every checkpoint kept is intact.
It prints a report (faults by kind, restarts, documents checked, time lost)
and exits 1 when any check fails.
"""

import argparse
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import shardstream  # noqa: E402
from shardstream import dcp as sdcp  # noqa: E402
from conftest import (aws_metadata_server, fault_proxy, free_port, kill_tree,  # noqa: E402
                      line_server, moto_s3_server)

TRAIN = os.path.join(HERE, "soak_train.py")
HTTP_SERVER = os.path.join(ROOT, "tests", "servers", "http_server.py")
WEB_SHARDS, CODE_SHARDS, PER_SHARD = 16, 8, 40
EPOCH_SIZE = 2 * WEB_SHARDS * PER_SHARD  # the web set once, the code set twice
CORRUPT = 5  # the web shard whose first header is damaged
DOC_TOKENS = 15  # + the eod token: two documents a row of 32
WARM_S = 240  # a rank process's RSS grows about 2 MiB in its first minutes, then stays
BLOB = 3000  # bytes of another field per document, so shards take a while to fetch


def post(url, body=None):
    data = json.dumps(body if body is not None else {}).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def expected_of(work):
    """make_data's expectation, from the data in WORK."""
    expected = {}
    for name, prefix, n in (("web", "w", 1), ("code", "c", 2)):
        with open(os.path.join(work, "www", name, "manifest.jsonl")) as f:
            shards = [json.loads(line) for line in f if line.strip()]
        for s, e in enumerate(shards):
            for i in range(e["nsamples"]):
                skipped = name == "web" and s == CORRUPT
                expected[f"{prefix}{s * PER_SHARD + i:05d}"] = 0 if skipped else n
    return expected


def make_data(work):
    """The two sets (with sample indexes), the web shard CORRUPT damaged. Returns the
    expected times each document is trained on per epoch."""
    rng = np.random.default_rng(0)
    expected = {}
    for name, prefix, shards in (("web", "w", WEB_SHARDS), ("code", "c", CODE_SHARDS)):
        out = os.path.join(work, "www", name)
        with shardstream.ShardWriter(out, max_samples=PER_SHARD, write_index=True) as w:
            for i in range(shards * PER_SHARD):
                key = f"{prefix}{i:05d}"
                w.write({"__key__": key,
                         "tokens.npy": ((np.arange(DOC_TOKENS) * 7 + i) % 96 + 1).astype(np.int32),
                         "blob.bin": rng.bytes(BLOB)})
                skipped = name == "web" and i // PER_SHARD == CORRUPT
                expected[key] = 0 if skipped else (1 if name == "web" else 2)
    # Corrupt as written: the first member's header checksum damaged, and the manifest
    # without a checksum for it (else the download fails the manifest's check first).
    name = f"shard-{CORRUPT:06d}.tar"
    with open(os.path.join(work, "www", "web", name), "r+b") as f:
        f.seek(148)
        f.write(b"XXXXXXX")
    manifest = os.path.join(work, "www", "web", "manifest.jsonl")
    with open(manifest) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    for e in entries:
        if e["url"] == name:
            e.pop("checksum", None)
    with open(manifest, "w") as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries))
    return expected


class Faults:
    """Injects a seeded fault every 0.5-2.5 s until stopped; counts them by kind."""

    def __init__(self, rng, http_control, web_proxy, s3_proxy, imds, enospc):
        self.rng, self.http, self.web, self.s3, self.imds = rng, http_control, web_proxy, s3_proxy, imds
        self.enospc = enospc
        self.counts = collections.Counter()
        self.errors = collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def one(self):
        kind = self.rng.choice(["reset", "reset", "503", "truncate", "reset_mid", "stall", "slow",
                                "latency", "imds", "enospc"])
        r = self.rng
        if kind == "reset":
            post(r.choice([self.web, self.s3]) + "/reset")
        elif kind == "503":
            target = r.choice(["web", "s3"])
            n = r.randint(3, 10)
            if target == "web":
                post(self.http + "/_control/faults",
                     {"kind": "status", "code": 503, "retry_after": 1, "count": n})
            else:
                post(self.s3 + "/status_next", {"count": n, "status": 503, "method": "GET"})
        elif kind == "truncate":  # a clean close before the body's end
            post(self.http + "/_control/faults",
                 {"kind": "truncate", "after": r.randint(100, 60000), "count": r.randint(1, 3)})
        elif kind == "reset_mid":  # the next S3 connection reset mid-body
            post(self.s3 + "/reset_next", {"bytes": r.randint(1000, 100000)})
        elif kind == "stall":  # a body that stops for a while
            post(self.http + "/_control/faults",
                 {"kind": "stall", "after": r.randint(0, 50000), "seconds": r.uniform(2, 8)})
        elif kind == "slow":
            proxy = r.choice([self.web, self.s3])
            post(proxy + "/rate", {"bytes_per_s": r.choice([20000, 60000, 200000])})
            self.stop.wait(r.uniform(2, 6))
            post(proxy + "/rate", {"bytes_per_s": 0})
        elif kind == "latency":  # first bytes late on every request for a while
            proxy = r.choice([self.web, self.s3])
            post(proxy + "/latency", {"ms": r.choice([300, 1000, 3000])})
            self.stop.wait(r.uniform(2, 6))
            post(proxy + "/latency", {"ms": 0})
        elif kind == "imds":
            post(self.imds + "/_control/faults",
                 r.choice([{"kind": "status", "code": 500, "count": r.randint(1, 2)},
                           {"kind": "stall", "seconds": r.uniform(1, 3), "count": 1}]))
        elif kind == "enospc":
            if not self.enospc.available:
                return
            self.enospc.fill()
            self.stop.wait(r.uniform(5, 15))
            self.enospc.drain()
        self.counts[kind] += 1

    def run(self):
        while not self.stop.wait(self.rng.uniform(0.5, 2.5)):
            try:
                self.one()
            except Exception as e:  # a server busy: counted, the soak goes on
                self.errors[type(e).__name__] += 1
        self.enospc.drain()

    def total(self):
        return sum(self.counts.values())


class Enospc:
    """Node 1's cache on a tmpfs of its own; fill() leaves it (almost) no room."""

    def __init__(self, path, size):
        self.path, self.size = path, size
        os.makedirs(path, exist_ok=True)
        self.available = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                         path], capture_output=True).returncode == 0
        self.ballast = os.path.join(path, "ballast")

    def fill(self):
        with open(self.ballast, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 16))
            except OSError:
                pass

    def drain(self):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.ballast)

    def close(self):
        if self.available:
            subprocess.run(["umount", "-l", self.path], capture_output=True)


class EventLog:
    """The ranks' logs as they grow: each new() reads only what was added since the last
    call (the driver polls every half second; a 30-minute run logs megabytes)."""

    def __init__(self, out):
        self.out, self.offsets = out, {}

    def new(self):
        events = []
        for name in sorted(os.listdir(self.out)):
            with open(os.path.join(self.out, name), "rb") as f:
                f.seek(self.offsets.get(name, 0))
                data = f.read()
            whole = data[:data.rfind(b"\n") + 1]  # a line still being written waits
            self.offsets[name] = self.offsets.get(name, 0) + len(whole)
            events += [json.loads(line) for line in whole.splitlines()]
        events.sort(key=lambda e: e["t"])
        return events


def cache_usage(path):
    """(shard bytes, disk bytes, listing) of a node's cache directory. Shard bytes are what
    the limit bounds (docs/cache.md): entries' sizes, and downloads at the larger of their
    size and the blocks they hold (a download preallocates). Disk bytes are every file's
    blocks: the entries' metadata and lock files, a block each, come on top of the limit."""
    shard = disk = 0
    listing = []
    for d, _, files in os.walk(path):
        for f in files:
            if f == "ballast":
                continue
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(os.path.join(d, f))
                blocks = st.st_blocks * 512
                disk += blocks
                listing.append(f"{f} {st.st_size} {blocks}")
                if f.endswith(".shard"):
                    shard += st.st_size
                elif f.endswith(".tmp") and f.split(".")[1] != "meta":
                    shard += max(st.st_size, blocks)
    return shard, disk, listing


def launch(args, work, attempt, world, env):
    """One launch of the job: one torchrun agent for all ranks, nodes of 2 ranks (the
    library's local_world_size=2). With an agent per node (two torchrun commands, as
    tests/python/test_multinode.py launches them), torchrun's own restart after a SIGKILL
    left the new ranks waiting in init_process_group for good: one agent restarted for the
    failure (its ranks had TORCHELASTIC_RESTART_COUNT=1), the other for the membership
    change (0). Even with one agent, restarted ranks often fail in gloo's connectFullMesh
    (Connection refused: an address of the round before; the ranks here use a plain
    init_process_group, as most scripts do, and docs/multinode.md gives the remedy); once its
    --max-restarts are spent torchrun exits and the driver relaunches the job, as a scheduler
    would. Returns the agents."""
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc-per-node", str(world), "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"soak-{attempt}",
           "--local-addr", "127.0.0.1", "--max-restarts", str(args.max_restarts),
           "--monitor-interval", "1",
           TRAIN, "--web", env["SOAK_WEB"], "--code", env["SOAK_CODE"],
           "--epoch-size", str(EPOCH_SIZE), "--epochs", "100000",
           "--cache-root", os.path.join(work, "cache"), "--cache-limit", str(args.cache_limit),
           "--ckpt", os.path.join(work, "ckpt"), "--out", os.path.join(work, "out"),
           "--attempt", str(attempt), "--stop-file", os.path.join(work, "stop"),
           "--step-sleep", str(args.step_s)]
    log = open(os.path.join(work, "logs", f"attempt{attempt}.log"), "w")
    return [subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)]


def dump_stacks(work, agents):
    """Where every process of a hung job is (py-spy, when installed): logs/hang-stacks.txt."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        return
    from conftest import _children
    children, todo, pids = _children(), [a.pid for a in agents], []
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += children.get(pid, [])
    with open(os.path.join(work, "logs", "hang-stacks.txt"), "w") as f:
        for pid in pids:
            # Native frames too: a process can hang in C (a fork's handlers, a lock).
            out = subprocess.run([spy, "dump", "--native", "--pid", str(pid)], capture_output=True,
                                 text=True, timeout=60)
            if out.returncode != 0:
                out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                                     text=True, timeout=60)
            f.write(out.stdout + out.stderr)
            # Each thread's state and where the kernel has it waiting.
            for tid in sorted(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}/task") else []:
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as st:
                        state = st.read().rsplit(")", 1)[1].split()[0]
                    with open(f"/proc/{pid}/task/{tid}/wchan") as w:
                        wchan = w.read().strip()
                except OSError:
                    continue
                f.write(f"  thread {tid}: state {state}, waiting in {wchan or '-'}\n")
            f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=None, help="a directory for data, caches, logs (kept)")
    ap.add_argument("--kill-every", type=float, nargs=2, default=(60, 150),
                    help="seconds between SIGKILLs of a rank (uniform)")
    ap.add_argument("--preempt-every", type=float, nargs=2, default=(200, 400),
                    help="seconds between preemptions that change the world size")
    ap.add_argument("--max-restarts", type=int, default=2)
    ap.add_argument("--cache-limit", type=int, default=0, help="bytes per node (default: ~half)")
    ap.add_argument("--max-wait", type=float, default=120, help="the longest wait for a batch")
    ap.add_argument("--hang", type=float, default=300, help="no step for this long is a hang")
    ap.add_argument("--step-s", type=float, default=0.1, help="a training step's own time")
    ap.add_argument("--json", default=None, help="write the report as JSON here too")
    ap.add_argument("--verify", default=None, metavar="WORK",
                    help="only check the logs a run left in WORK")
    args = ap.parse_args()
    if args.verify:
        report = {"minutes": args.minutes, "seed": args.seed, "work": args.verify}
        report.update(verify(args.verify, expected_of(args.verify), args))
        print_report(report)
        sys.exit(0 if report["ok"] else 1)
    rng = random.Random(args.seed)
    work = args.work or os.path.join("/tmp", f"shardstream-soak-{os.getpid()}")
    if os.path.exists(work):
        shutil.rmtree(work)
    for d in ("out", "logs", "ckpt", "cache/node0"):
        os.makedirs(os.path.join(work, d), exist_ok=True)
    expected = make_data(work)
    shard_bytes = os.path.getsize(os.path.join(work, "www", "web", "shard-000000.tar"))
    # A node's part is 8 web and 4 code shards; its cache holds about half of them.
    if not args.cache_limit:
        args.cache_limit = 6 * shard_bytes + shard_bytes // 2
    enospc = Enospc(os.path.join(work, "cache", "node1"), args.cache_limit + 4 * shard_bytes)

    stack = contextlib.ExitStack()
    stack.callback(enospc.close)
    report = {"minutes": args.minutes, "seed": args.seed, "work": work}
    try:
        _, hwords = stack.enter_context(line_server(
            [sys.executable, HTTP_SERVER, "--root", os.path.join(work, "www"),
             "--log", os.path.join(work, "logs", "http.jsonl")]))
        http_port = int(hwords[0])
        endpoint, keys = stack.enter_context(moto_s3_server())
        import boto3
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=keys["access_key"],
                          aws_secret_access_key=keys["secret_key"])
        s3.create_bucket(Bucket="data")
        code_dir = os.path.join(work, "www", "code")
        for name in sorted(os.listdir(code_dir)):
            s3.upload_file(os.path.join(code_dir, name), "data", f"code/{name}")
        imds = stack.enter_context(aws_metadata_server(endpoint, keys, 30))
        web_proxy, web_control = stack.enter_context(fault_proxy(http_port))
        s3_port = int(endpoint.rsplit(":", 1)[1])
        s3_proxy, s3_control = stack.enter_context(fault_proxy(s3_port))

        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_EC2_METADATA_SERVICE_ENDPOINT=imds, AWS_ENDPOINT_URL_S3=s3_proxy,
                   AWS_REGION="us-east-1", AWS_CONFIG_FILE="/nonexistent/aws-config",
                   AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws-credentials",
                   # Instance metadata answers a 500 or stalls now and then (the faults
                   # below): three attempts of 5 s, where botocore's default is one of 1 s.
                   AWS_METADATA_SERVICE_NUM_ATTEMPTS="3", AWS_METADATA_SERVICE_TIMEOUT="5",
                   OMP_NUM_THREADS="1", SHARDSTREAM_LOG_LEVEL="warn",
                   SOAK_WEB=f"{web_proxy}/web/manifest.jsonl",
                   SOAK_CODE="s3://data/code/manifest.jsonl")
        faults = Faults(rng, f"http://127.0.0.1:{http_port}", web_control, s3_control, imds,
                        enospc)
        report.update(run(args, rng, work, env, faults, enospc))
        faults.stop.set()
        if faults.thread.is_alive():  # (started once the job trained a step)
            faults.thread.join(timeout=60)
        report["faults"] = dict(faults.counts)
        report["fault_errors"] = dict(faults.errors)
        report["proxy"] = {"web": get(web_control + "/stats"), "s3": get(s3_control + "/stats")}
        report["credentials_minted"] = sum(
            1 for r in get(imds + "/_control/log") if r.get("access_key_id"))
    finally:
        stack.close()
    report.update(verify(work, expected, args))
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(0 if report["ok"] else 1)


def run(args, rng, work, env, faults, enospc):
    """Runs the job to its end through kills and preemptions. Returns what it saw."""
    out = os.path.join(work, "out")
    t_start = time.monotonic()
    deadline = t_start + args.minutes * 60
    worlds = [4, 2]
    attempt, kills, preemptions, cache_max = 0, [], 0, {0: 0, 1: 0}
    disk_max = {0: 0, 1: 0}
    faults_started = False
    hang = None
    log, steps, last_step_t = EventLog(out), [], time.monotonic()
    next_kill = t_start + rng.uniform(*args.kill_every)
    while True:
        world = worlds[attempt % 2]
        agents = launch(args, work, attempt, world, env)
        preempt_at = time.monotonic() + rng.uniform(*args.preempt_every)
        outcome = None
        while outcome is None:
            time.sleep(0.5)
            now = time.monotonic()
            for n in (0, 1):
                shard, disk, listing = cache_usage(os.path.join(work, "cache", f"node{n}"))
                disk_max[n] = max(disk_max[n], disk)
                if shard > cache_max[n]:
                    cache_max[n] = shard
                    with open(os.path.join(work, "logs", f"cache-max-node{n}.txt"), "w") as f:
                        f.write(f"shard bytes {shard}, disk bytes {disk}\n")
                        f.write("\n".join(listing) + "\n")
            added = [e for e in log.new() if e["kind"] == "step"]
            if added:
                steps += added
                steps.sort(key=lambda e: e["t"])
                last_step_t = now
                if not faults_started:  # the faults begin once the job trains
                    faults.thread.start()
                    faults_started = True
            if all(a.poll() is not None for a in agents):
                outcome = "exited"
                break
            if any(a.poll() not in (None, 0) for a in agents):
                time.sleep(3)  # a node gave up (restarts spent): the job is relaunched
                outcome = "failed"
                break
            if now - last_step_t > args.hang:
                hang = f"no step for {now - last_step_t:.0f} s in attempt {attempt}"
                dump_stacks(work, agents)
                outcome = "hang"
                break
            if now >= deadline:
                if not os.path.exists(os.path.join(work, "stop")):
                    open(os.path.join(work, "stop"), "w").close()
                continue
            if now >= preempt_at and steps and steps[-1]["attempt"] == str(attempt):
                outcome = "preempted"
                break
            if now >= next_kill:
                # A rank of the current life that has trained a step: SIGKILL it.
                mine = [(e["restart"], e["pid"]) for e in steps if e["attempt"] == str(attempt)]
                life = max(r for r, _ in mine) if mine else None
                live = sorted({pid for r, pid in mine if r == life})
                live = [p for p in live if os.path.exists(f"/proc/{p}")]
                if live:
                    pid = rng.choice(live)
                    step = max(e["step"] for e in steps if e["pid"] == pid)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    kills.append({"attempt": attempt, "pid": pid, "after_step": step,
                                  "t": round(now - t_start, 1)})
                    next_kill = now + rng.uniform(*args.kill_every)
        for a in agents:
            kill_tree(a)
        if outcome == "preempted":
            preemptions += 1
        if outcome == "exited" and all(a.returncode == 0 for a in agents):
            break
        if outcome == "hang":
            break
        attempt += 1
    return {"attempts": attempt + 1, "kills": kills, "preemptions": preemptions,
            "hang": hang, "cache_max": cache_max, "cache_disk_max": disk_max,
            "cache_limit": args.cache_limit,
            "wall_s": round(time.monotonic() - t_start, 1), "enospc": enospc.available}


def lives_of(events):
    """Each life, (attempt, restart), in the order they started."""
    lives = []
    for e in events:
        life = (e["attempt"], e["restart"])
        if e["kind"] == "start" and life not in lives:
            lives.append(life)
    return lives


def committed_upto(events):
    """{life: the last step of that life that is committed}: a life's step is committed when no
    later life resumed from before it. (A life that died before it resumed trained nothing and
    rolled nothing back.)"""
    resumed = {}
    for e in events:
        if e["kind"] == "resumed":
            resumed.setdefault((e["attempt"], e["restart"]), e["step"])
    horizon, upto = float("inf"), {}
    for life in reversed(lives_of(events)):
        upto[life] = horizon
        if life in resumed:
            horizon = min(horizon, resumed[life])
    return upto


def verify(work, expected, args):
    events = EventLog(os.path.join(work, "out")).new()
    lives = lives_of(events)
    worlds = []  # each life's world size
    for e in events:
        if e["kind"] == "start" and len(worlds) < lives.index((e["attempt"], e["restart"])) + 1:
            worlds.append(e["world"])
    upto = committed_upto(events)
    got = collections.defaultdict(collections.Counter)
    steps_seen, lost_steps, waits = set(), 0, []
    for e in events:
        if e["kind"] != "step":
            continue
        waits.append(e["wait"])
        life = (e["attempt"], e["restart"])
        if e["step"] <= upto[life]:
            got[e["epoch"]].update(e["keys"])
            steps_seen.add((e["step"], e["rank"]))
        else:
            lost_steps += 1
    ends = [e for e in events if e["kind"] == "end"]
    finished = bool(ends) and len({e["rank"] for e in ends}) == ends[0]["world"]
    epochs = sorted(got)
    lost = repeated = 0
    per_epoch = {}
    for ep in epochs:
        seen = got[ep]
        lo = sum(max(0, n - seen.get(k, 0)) for k, n in expected.items())
        rep = sum(max(0, n - expected.get(k, 0)) for k, n in seen.items())
        per_epoch[ep] = {"documents": sum(seen.values()), "lost": lo, "repeated": rep}
        lost += lo
        repeated += rep
    # Descriptors, threads, RSS at each checkpoint, per process: a process is its pid within
    # one life of the job, since a 30-minute run starts enough processes for pids to recur.
    by_pid = collections.defaultdict(list)
    for e in events:
        if e["kind"] == "ckpt":
            by_pid[(e["pid"], e["attempt"], e.get("restart", 0))].append(e)
    # A leak is growth that stays: the least of a process's last 3 checkpoints above the
    # most of its 2nd to 4th by more than 2 (one checkpoint may meet an epoch's new
    # DataLoader workers starting while the old ones' pipes close).
    leaks = []
    for pid, cs in by_pid.items():
        if len(cs) < 6:
            continue
        for what in ("fds", "threads"):
            early, late = max(c[what] for c in cs[1:4]), min(c[what] for c in cs[-3:])
            if late > early + 2:
                leaks.append({"pid": pid, what: [early, late]})
    # RSS slope within processes, pooled: over each process's whole life (from its second
    # checkpoint), and after its first WARM_S seconds (allocators and caches filling).
    rss_max = max([c["rss"] for cs in by_pid.values() for c in cs], default=0.0)

    def pooled_slope(after):
        sxx = sxy = 0.0
        for cs in by_pid.values():
            pts = [(c["t"], c["rss"]) for c in cs[1:] if c["t"] - cs[0]["t"] >= after]
            if len(pts) < 2:
                continue
            mt = sum(t for t, _ in pts) / len(pts)
            mr = sum(r for _, r in pts) / len(pts)
            sxx += sum((t - mt) ** 2 for t, _ in pts)
            sxy += sum((t - mt) * (r - mr) for t, r in pts)
        return round(sxy / sxx * 3600, 2) if sxx > 0 else None

    slope, slope_warm = pooled_slope(0), pooled_slope(WARM_S)
    # Every checkpoint kept is intact.
    ckpt_root = os.path.join(work, "ckpt")
    kept = sorted(d for d in os.listdir(ckpt_root) if d.startswith("ckpt-"))
    broken = []
    for d in kept:
        try:
            if sdcp.resolve(os.path.join(ckpt_root, d)).name != d:
                broken.append(d)
        except (OSError, ValueError) as e:
            broken.append(f"{d}: {e}")
    t0 = events[0]["t"] if events else 0
    first_step = {}
    for e in events:
        if e["kind"] == "step":
            first_step.setdefault((e["attempt"], e["restart"]), e["t"])
    starts = {}
    for e in events:
        if e["kind"] == "start":
            starts.setdefault((e["attempt"], e["restart"]), e["t"])
    # Time lost: each life's start-up to its first step, and steps trained and rolled back.
    startup = sum(first_step[l] - starts[l] for l in lives if l in first_step and l in starts)
    # ... and in all: the run's span less what its committed steps take at the median pace.
    rank0 = sorted(e["t"] for e in events if e["kind"] == "step" and e["rank"] == 0)
    pace = float(np.median(np.diff(rank0))) if len(rank0) > 2 else 0.0
    committed_steps = len({s for s, r in steps_seen if r == 0})
    span = events[-1]["t"] - t0 if events else 0
    checks = {
        "finished": finished,
        "lost_0": lost == 0 and bool(epochs),
        "repeated_0": repeated == 0,
        "waits": max(waits, default=0) <= args.max_wait,
        "no_hang": True,
        "cache_within_limit": True,
        "no_leaks": not leaks,
        "checkpoints_intact": not broken and bool(kept),
    }
    return {"lives": len(lives), "restarts": len(lives) - 1, "worlds": worlds,
            "epochs_checked": len(epochs),
            "documents_checked": sum(sum(c.values()) for c in got.values()),
            "lost": lost, "repeated": repeated, "per_epoch": per_epoch,
            "steps_rolled_back": lost_steps, "max_wait_s": max(waits, default=0),
            "leaks": leaks, "rss_max_mib": round(rss_max, 1),
            "rss_slope_mib_per_hour": slope, "rss_slope_after_warmup": slope_warm,
            "checkpoints_kept": kept, "checkpoints_broken": broken,
            "startup_s": round(startup, 1), "checks": checks, "span_s": round(span, 1),
            "committed_steps": committed_steps, "step_pace_s": round(pace, 4),
            "time_lost_s": round(span - committed_steps * pace, 1)}


def print_report(r):
    checks = r["checks"]
    checks["no_hang"] = r.get("hang") is None
    limit = r.get("cache_limit", 0)
    checks["cache_within_limit"] = all(v <= limit for v in r.get("cache_max", {}).values())
    r["ok"] = all(checks.values())
    faults = r.get("faults", {})
    proxy = r.get("proxy", {})
    kills = r.get("kills", [])
    print("shardstream soak report")
    print(f"  run: {r.get('wall_s', 0) / 60:.1f} min, seed {r['seed']}, {r.get('attempts', 0)} "
          f"launches, {r['lives']} lives of the job ({r['restarts']} restarts: {len(kills)} rank "
          f"kills, {r.get('preemptions', 0)} preemptions, the rest torchrun's); world sizes "
          + " -> ".join(str(w) for i, w in enumerate(r["worlds"]) if i == 0 or w != r["worlds"][i - 1]))
    print(f"  faults injected: {sum(faults.values())} "
          + ", ".join(f"{k} {v}" for k, v in sorted(faults.items()))
          + (f"; failed to inject: {r['fault_errors']}" if r.get("fault_errors") else ""))
    if proxy:
        print(f"  the proxies did: {proxy['web']['resets'] + proxy['s3']['resets']} resets, "
              f"{proxy['web']['statuses'] + proxy['s3']['statuses']} 503s; "
              f"credentials minted: {r.get('credentials_minted', 0)} (30 s each)"
              + ("" if r.get("enospc") else "; ENOSPC not injected (mount refused)"))
    print(f"  documents checked: {r['documents_checked']} in {r['epochs_checked']} epochs; "
          f"lost: {r['lost']}  repeated: {r['repeated']}")
    print(f"  time not in committed steps: {r['time_lost_s']} s of {r['span_s']} s "
          f"({r['committed_steps']} committed steps at a median {r['step_pace_s']} s a step): "
          f"start-up of every life {r['startup_s']} s, {r['steps_rolled_back']} rank-steps rolled "
          f"back by kills, and waits for data under the faults, epoch starts, checkpoints")
    print(f"  longest wait for a batch: {r['max_wait_s']:.2f} s")
    print(f"  cache: max {r.get('cache_max')} shard bytes per node, limit {limit}; on disk with "
          f"metadata and locks at most {r.get('cache_disk_max')}")
    print(f"  rank processes: RSS max {r['rss_max_mib']} MiB; slope within processes "
          f"{r['rss_slope_mib_per_hour']} MiB/hour, after their first {WARM_S} s "
          f"{r['rss_slope_after_warmup']}; leaks: {r['leaks'] or 'none'}")
    print(f"  checkpoints kept: {', '.join(r['checkpoints_kept'])}; broken: "
          f"{r['checkpoints_broken'] or 'none'}")
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    if r.get("hang"):
        print(f"  hang: {r['hang']}")
    print("soak: " + ("passed" if r["ok"] else "FAILED"))


if __name__ == "__main__":
    main()
