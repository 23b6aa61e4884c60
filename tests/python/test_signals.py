"""Ctrl-C while blocked in next() raises KeyboardInterrupt promptly."""

import queue
import signal
import subprocess
import sys
import threading
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
    lines = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True)
    reader.start()
    out = []
    try:
        # Wait until batches stop coming: next() is blocked on a full pool.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                out.append(lines.get(timeout=1.0))
            except queue.Empty:
                if out:
                    break
        assert out and proc.poll() is None, "the loader should block, not end"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        elapsed = time.monotonic() - sent
        reader.join(timeout=5)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    while not lines.empty():
        out.append(lines.get())
    out = "".join(out)
    assert proc.returncode == 0, err
    assert "interrupted" in out and "closed" in out, out + err
    assert elapsed < 5, f"took {elapsed:.1f}s to react to SIGINT"
