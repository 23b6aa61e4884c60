"""Ctrl-C while blocked in next() raises KeyboardInterrupt promptly."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shardstream

BLOCKED = r"""
import faulthandler, signal, sys, time
import shardstream
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's view when it times out
lo = shardstream.Loader(sys.argv[1], fields=["cls"], batch_size=2)
print("ready", flush=True)
try:
    lo.next()                        # the shard is a FIFO nobody writes: blocks
    print("returned", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    t = time.monotonic()
    try:
        lo.close()                   # joins the reader once the FIFO is released
    finally:
        print("closed", round(time.monotonic() - t, 3), flush=True)
"""


def test_sigint_in_blocked_next_raises_keyboard_interrupt(tmp_path):
    fifo = tmp_path / "shard-000000.tar"
    os.mkfifo(fifo)
    (tmp_path / "manifest.jsonl").write_text(
        '{"url": "shard-000000.tar", "size": 10240, "nsamples": 4}\n')
    def as_from_a_terminal():
        # The child starts as a shell would start it: SIGINT at its default and not blocked,
        # whatever this test process inherited or an earlier test's library left behind
        # (an ignored or blocked SIGINT is inherited across exec, and Python keeps it so).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    proc = subprocess.Popen([sys.executable, "-c", BLOCKED, str(tmp_path / "manifest.jsonl")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_terminal)
    lines, errs = queue.Queue(), []
    reader = threading.Thread(target=lambda: [lines.put(l.strip()) for l in proc.stdout],
                              daemon=True)
    reader.start()
    err_reader = threading.Thread(target=lambda: errs.extend(proc.stderr), daemon=True)
    err_reader.start()

    def workers():
        try:
            return [t for t in os.listdir(f"/proc/{proc.pid}/task")
                    if open(f"/proc/{proc.pid}/task/{t}/comm").read().strip() == "ss-worker"]
        except OSError:
            return []

    def why():
        """The child's threads as faulthandler sees them, and what it wrote to stderr."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
        return "".join(errs)[-6000:]

    try:
        assert lines.get(timeout=30) == "ready"
        # next() is blocked once the pipeline runs: its workers exist (one of them waits in
        # the FIFO's open()), then a moment for the caller to settle in its wait.
        deadline = time.monotonic() + 30
        while not workers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers(), "the loader's workers never started\n" + why()
        time.sleep(0.5)
        assert proc.poll() is None and lines.empty()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            got = lines.get(timeout=10)
        except queue.Empty:
            pytest.fail("no KeyboardInterrupt 10 s after SIGINT (this process: SIGINT handler "
                        f"{signal.getsignal(signal.SIGINT)}, blocked "
                        f"{signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])}); "
                        "the child:\n" + why())
        assert got == "interrupted"
        elapsed = time.monotonic() - sent
        # Release the reader (a writer that closes at once: end of file), so
        # close() can join it.
        with open(fifo, "wb"):
            pass
        closed = lines.get(timeout=20)
        proc.wait(timeout=20)
        err_reader.join(timeout=5)
        err = "".join(errs)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert closed.startswith("closed"), closed
    assert elapsed < 2, f"took {elapsed:.2f}s to react to SIGINT"


def test_holding_every_slot_is_a_usage_error_naming_the_fix(tmp_path):
    with shardstream.ShardWriter(str(tmp_path)) as w:
        for i in range(100):
            w.write({"__key__": f"k{i:04d}", "tokens.npy": np.full(256, i, np.int32)})
    lo = shardstream.Loader(str(tmp_path / "manifest.jsonl"), fields=["tokens.npy"], batch_size=2,
                            prefetch=1)
    kept = []
    with pytest.raises(shardstream.ConfigError, match=r"holds every batch slot.*clone\(\).*prefetch="):
        for _ in range(10):
            kept.append(lo.next())
    assert len(kept) == 3  # prefetch + 2 batches (every slot) may be kept
    kept.clear()
    lo.close()


EXIT_MIDWAY = r"""
import sys
import shardstream
lo = shardstream.Loader(sys.argv[1], fields=["tokens.npy"], batch_size=2, prefetch=2)
kept = [lo.next(), lo.next()]        # threads running, batches alive, no close()
print("exiting", flush=True)
"""


def test_interpreter_exit_with_a_running_loader(tmp_path):
    with shardstream.ShardWriter(str(tmp_path)) as w:
        for i in range(100):
            w.write({"__key__": f"k{i:04d}", "tokens.npy": np.full(1024, i, np.int32)})
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-c", EXIT_MIDWAY, str(tmp_path / "manifest.jsonl")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "exiting" and time.monotonic() - t < 20
