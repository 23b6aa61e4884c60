"""Ctrl-C while blocked in next() raises KeyboardInterrupt promptly."""

import os
import signal
import subprocess
import sys
import time

import numpy as np

import shardstream

BLOCKED = r"""
import sys, time
import shardstream
lo = shardstream.Loader(sys.argv[1], fields=["tokens.npy"], batch_size=2, prefetch=1,
                        shuffle=False)
kept = []
try:
    while True:                     # hold every batch: the pool runs dry and
        kept.append(lo.next())      # next() blocks waiting for a slot
        print("batch", flush=True)
except KeyboardInterrupt:
    t = time.monotonic()
    print("interrupted", len(kept), flush=True)
    kept.clear()
    lo.close()
    print("closed", round(time.monotonic() - t, 3), flush=True)
"""


def test_sigint_in_blocked_next_raises_keyboard_interrupt(tmp_path):
    with shardstream.ShardWriter(str(tmp_path)) as w:
        for i in range(400):
            w.write({"__key__": f"k{i:04d}", "tokens.npy": np.full(4096, i, np.int32)})
    proc = subprocess.Popen([sys.executable, "-c", BLOCKED, str(tmp_path / "manifest.jsonl")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Wait until batches stop coming: next() is blocked.
        lines = 0
        os.set_blocking(proc.stdout.fileno(), False)
        quiet_since = time.monotonic()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            chunk = proc.stdout.read()
            if chunk:
                lines += chunk.count("batch")
                quiet_since = time.monotonic()
            elif lines and time.monotonic() - quiet_since > 1.0:
                break
            time.sleep(0.05)
        assert lines > 0 and proc.poll() is None, "the loader should block, not end"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        os.set_blocking(proc.stdout.fileno(), True)
        out, err = proc.communicate(timeout=20)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "interrupted" in out and "closed" in out, out + err
    assert elapsed < 5, f"took {elapsed:.1f}s to react to SIGINT"
