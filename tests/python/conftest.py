"""Shared fixtures: small real shard sets written by shardstream.ShardWriter."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import shardstream

# The credential chain ends at EC2 instance metadata; tests never reach for a
# real one (those that test it start their own server and say so).
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# Ray leaves native threads (gRPC, its core worker) in the test process after
# ray.shutdown(), and a process forked beside them can crash on a lock one of
# them held: a fork-started DataLoader worker died with SIGSEGV in a test run
# after the Ray tests. Tests that start Ray in this process therefore run last.
RAY_IN_PROCESS = ("test_ray.py", "test_ray_cluster.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: os.path.basename(str(item.fspath)) in RAY_IN_PROCESS)


NSHARDS = 8
PER_SHARD = 25
SEQ = 16


def make_shards(out_dir, nshards=NSHARDS, per_shard=PER_SHARD, seq=SEQ):
    """Samples "s000123" with tokens.npy = int32 [seq] filled with the sample
    number, cls = number % 10, txt = "caption 123"."""
    with shardstream.ShardWriter(out_dir, max_samples=per_shard) as w:
        for i in range(nshards * per_shard):
            w.write({"__key__": f"s{i:06d}", "tokens.npy": np.full(seq, i, dtype=np.int32),
                     "cls": i % 10, "txt": f"caption {i}"})
    return os.path.join(out_dir, "manifest.jsonl")


@pytest.fixture(scope="session")
def manifest(tmp_path_factory):
    return make_shards(str(tmp_path_factory.mktemp("shards")))


@pytest.fixture(scope="session")
def total():
    return NSHARDS * PER_SHARD


def sample_ids(batch):
    """The sample numbers in a batch (from the keys)."""
    return [int(k[1:]) for k in batch["__key__"]]


def read_manifest(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@contextlib.contextmanager
def moto_s3_server():
    """moto's S3, STS and IAM server on loopback with authentication enforced (and
    tests/servers/moto_server.py's AWS behaviours: unsigned web identity calls, expired
    temporary credentials refused). Yields (endpoint, {"access_key", "secret_key",
    "role_arn"}): a user and a role allowed everything. The server binds port 0 and says
    which port it got (no port reserved and released first, for another process to take)."""
    script = os.path.join(HERE, "..", "servers", "moto_server.py")
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    with line_server([sys.executable, script, "--port-0"], env=env) as (_, words):
        endpoint = f"http://127.0.0.1:{int(words[0])}"
        setup = os.path.join(HERE, "..", "servers", "moto_setup.py")
        out = subprocess.check_output([sys.executable, setup, endpoint], text=True).split()
        yield endpoint, dict(zip(out[::2], out[1::2]))


@pytest.fixture
def moto_s3(monkeypatch):
    """moto's S3 server with authentication enforced, a bucket "ckpt", and the
    AWS_* environment pointing at it. Yields a boto3 client."""
    import boto3
    with moto_s3_server() as (endpoint, keys):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys["access_key"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys["secret_key"])
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=keys["access_key"],
                          aws_secret_access_key=keys["secret_key"])
        s3.create_bucket(Bucket="ckpt")
        yield s3


def free_port():
    """A TCP port free on 127.0.0.1 now, released again: only for torch.distributed's
    rendezvous (MASTER_PORT, torchrun's --rdzv-endpoint), whose host rank binds the port it is
    given and every other rank must be told it beforehand, so it cannot bind port 0. A test
    server binds port 0 itself and prints the port it got (see line_server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def line_server(argv, prefix="port ", env=None):
    """Starts a test server that prints a line starting with `prefix` once it listens; yields
    (process, that line's words after the prefix). Killed on exit."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        line = proc.stdout.readline()
        name = next((a for a in argv[1:] if str(a).endswith(".py")), argv[0])
        assert line.startswith(prefix), f"{name} did not start: {line!r}"
        yield proc, line[len(prefix):].split()
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _children():
    """{parent pid: [child pids]} of every process now (Linux /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            children.setdefault(ppid, []).append(int(entry))
    return children


def _wait_stopped(pid, seconds=2.0):
    """Waits (a little) until a process sent SIGSTOP is stopped, or a zombie, or gone: a
    signal is delivered asynchronously, and until then the process may still fork."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in "TtZX":
            return
        time.sleep(0.001)


def kill_tree(proc):
    """SIGKILLs a subprocess a test started and every process below it (torchrun's agent and
    its workers, which torchrun puts in sessions of their own; a rank's DataLoader workers),
    then reaps it. The tree is stopped (SIGSTOP) from the top down first, so that no process
    in it forks, exits unreaped or is reparented while it is being walked; then all get SIGKILL."""
    if proc.poll() is None:
        stopped, todo = [], [proc.pid]
        while todo:
            pid = todo.pop()
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            stopped.append(pid)
            _wait_stopped(pid)
            # Its children as of now; a stopped process makes no new ones.
            todo += [c for c in _children().get(pid, []) if c not in stopped]
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            f.close()


@contextlib.contextmanager
def reaped():
    """Yields a list for the rank and worker subprocesses a test starts. However the block ends
    (its assertions passed or failed, an exception, a timeout), each one still running is
    killed with every process below it, and reaped: no orphan outlives the test."""
    procs = []
    try:
        yield procs
    finally:
        for p in procs:
            kill_tree(p)


@contextlib.contextmanager
def aws_metadata_server(endpoint, keys, duration, *args):
    """tests/servers/aws_metadata_server.py: EC2 instance metadata and container credentials
    minting real credentials of moto's role that expire after `duration` seconds. Yields its
    base url."""
    script = os.path.join(HERE, "..", "servers", "aws_metadata_server.py")
    with line_server([sys.executable, script, "--moto", endpoint, "--access-key",
                      keys["access_key"], "--secret-key", keys["secret_key"], "--role-arn",
                      keys["role_arn"], "--duration", str(duration), *args]) as (_, words):
        yield f"http://127.0.0.1:{words[0]}"


@contextlib.contextmanager
def fault_proxy(target_port):
    """tests/servers/fault_proxy.py in front of 127.0.0.1:target_port. Yields (proxy url,
    control url)."""
    script = os.path.join(HERE, "..", "servers", "fault_proxy.py")
    with line_server([sys.executable, script, "--target", str(target_port)]) as (_, words):
        yield f"http://127.0.0.1:{words[0]}", f"http://127.0.0.1:{words[2]}"


def clean_aws_env(monkeypatch, **env):
    """Removes every AWS_* variable, then sets `env` (the chain sees only what a test gives)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for k, v in env.items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, v)


def cli_dir():
    """The directory of the `shardstream` command (the CMake build)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for d in (os.environ.get("SHARDSTREAM_BUILD", ""), os.path.join(root, "build")):
        if d and os.access(os.path.join(d, "shardstream"), os.X_OK):
            return d
    pytest.fail("the shardstream command is not built (build/shardstream)")
