"""Shared fixtures: small real shard sets written by shardstream.ShardWriter."""

import contextlib
import json
import os
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
    "role_arn"}): a user and a role allowed everything."""
    port = free_port()
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "..", "servers", "moto_server.py"),
                               "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto did not start"
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        setup = os.path.join(HERE, "..", "servers", "moto_setup.py")
        out = subprocess.check_output([sys.executable, setup, endpoint], text=True).split()
        yield endpoint, dict(zip(out[::2], out[1::2]))
    finally:
        server.terminate()
        server.wait(timeout=30)


def free_port():
    """A TCP port free on 127.0.0.1 now (for rendezvous and test servers)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def line_server(argv, prefix="port "):
    """Starts a test server that prints a line starting with `prefix` once it listens; yields
    (process, that line's words after the prefix). Killed on exit."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(prefix), f"{argv[1]} did not start: {line!r}"
        yield proc, line[len(prefix):].split()
    finally:
        proc.kill()
        proc.wait(timeout=30)


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
