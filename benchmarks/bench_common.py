"""What the Python benchmarks share: their data sets' directories, the children they run and
measure, and the JSON they pass around.

The scripts run as `python benchmarks/X.py`, which puts this folder on sys.path, so they (and
the children they start the same way) import it as `bench_common`. Standard library only:
measured children import it too, through their script, and it must not weigh on their RSS.
"""

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time


def log(*a) -> None:
    """Progress goes to stderr: stdout is the result (its last line JSON)."""
    print(*a, file=sys.stderr, flush=True)


def tail(text: str, lines: int = 15) -> str:
    """The end of a failed child's stderr, which is where its error is."""
    return "\n".join((text or "").strip().splitlines()[-lines:])


# -- JSON ----------------------------------------------------------------------------------

def read_json(path: str):
    """None for a file that is missing or unreadable: either way nothing to reuse."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path: str, obj) -> None:
    """Written whole or not at all: a run cut short leaves the previous file, never half of
    one (a params.json that parses is a data set that is complete)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def last_json(stdout: str):
    """A child's result: its last stdout line, so that it may print progress before it
    ({} when it printed nothing)."""
    lines = stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


# -- data sets, written once and reused ----------------------------------------------------

def prepare_dir(out: str, params: dict, key: str = None):
    """params.json's record when `out` holds a complete data set made with `params` (the
    record is `params`, or holds them under `key` beside what the writing found); otherwise
    None, and `out` is empty but for a .writing marker, ready to be written.

    Data sets take minutes to make, so they are reused while their parameters match. Only a
    directory this code wrote (params.json, or the .writing of a write that did not finish)
    is ever deleted: a --dir that holds anything else is refused."""
    marker = os.path.join(out, "params.json")
    writing = os.path.join(out, ".writing")
    record = read_json(marker)
    have = record.get(key) if key and isinstance(record, dict) else record
    if have == params and os.path.exists(os.path.join(out, "manifest.jsonl")):
        return record
    if os.path.exists(out) and os.listdir(out):
        if not (os.path.exists(marker) or os.path.exists(writing)):
            raise SystemExit(f"{out} is not empty and holds no data set of this benchmark: "
                             "pass another --dir")
        log(f"data: parameters changed or an earlier write did not finish, rewriting {out}")
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    open(writing, "w").close()
    return None


def finish_dir(out: str, record: dict) -> None:
    """Marks `out` complete: params.json last, so that its presence means a whole data set."""
    write_json(os.path.join(out, "params.json"), record)
    os.remove(os.path.join(out, ".writing"))


def ensure_mds(python: str, script: str, manifest: str, out: str, params,
               flag: str = "--write-mds", what: str = "MDS copy") -> str:
    """`out`, the MDS copy of a data set for MosaicML Streaming, written by `script
    --write-mds MANIFEST OUT` under Streaming's own Python unless out/params.json says it was
    made from a data set of `params`. Raises RuntimeError if the writing fails."""
    marker = os.path.join(out, "params.json")
    if read_json(marker) != params:
        log(f"data: writing the {what} into {out}")
        r = subprocess.run([python, script, flag, manifest, out], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"writing the {what} failed: " + tail(r.stderr))
        write_json(marker, params)
    return out


def shard_paths(manifest: str) -> list:
    """The shard files of a local manifest (its urls are relative to its directory)."""
    d = os.path.dirname(os.path.abspath(manifest))
    with open(manifest) as f:
        return [os.path.join(d, json.loads(line)["url"]) for line in f if line.strip()]


def warm_cache(paths: list) -> None:
    """Reads the files once, so every contender finds them in the page cache (the first one
    would otherwise pay for the disk)."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


# -- a child process, timed and its memory sampled -----------------------------------------

def tree_memory(pid: int) -> tuple:
    """(RSS, anonymous RSS) bytes of pid and all its descendants: DataLoader workers count
    against the loader that started them. RSS also counts mapped file pages (the libraries'
    code) and shared memory; the anonymous part does not."""
    rss = anon = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("RssAnon:"):
                        anon += int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return rss, anon


def measure(cmd) -> tuple:
    """Runs cmd, sampling its process tree's memory every 5 ms (a tree's peak is in no one
    process's rusage): (last_json of its stdout, with "tree_cpu_s" added to a dict, peak RSS,
    peak anonymous RSS). Raises
    RuntimeError with the end of its stderr if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = peak_anon = 0
    done = threading.Event()

    def sample():
        nonlocal peak, peak_anon
        while not done.is_set():
            rss, anon = tree_memory(proc.pid)
            peak, peak_anon = max(peak, rss), max(peak_anon, anon)
            time.sleep(0.005)

    t = threading.Thread(target=sample)
    t.start()
    out, err = proc.communicate()
    done.set()
    t.join()
    if proc.returncode != 0:
        raise RuntimeError(f"exit status {proc.returncode}: {tail(err)}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = last_json(out)
    if isinstance(result, dict):
        # The child's CPU seconds and those of the descendants it waited for (its
        # DataLoader workers): the whole run, start-up included.
        result["tree_cpu_s"] = (after.ru_utime - before.ru_utime +
                                after.ru_stime - before.ru_stime)
    return result, peak, peak_anon


def import_torch_rss(runs: int) -> float:
    """The median peak RSS of a process that only imports torch: the floor under every
    contender's, which the reports subtract or quote."""
    rss = statistics.median(
        measure([sys.executable, "-c", "import torch, time; time.sleep(0.3); print('{}')"])[1]
        for _ in range(runs))
    log(f"import torch alone: peak RSS {rss / 2**20:.0f} MiB")
    return rss


def interleave(runs: int, contenders: list, skipped: dict, report) -> dict:
    """{key: [result per run]}: every contender's command measured (measure) once per round,
    for `runs` rounds; each result gets peak_rss and peak_rss_anon.

    Round by round, not one contender's runs back to back, so that whatever drifts while the
    benchmark runs (other load, CPU clocks, the page cache) falls on all contenders alike.
    contenders: [(key, group, command)]. A group in `skipped` is not run; a failure puts its
    group there with the reason report(run, key, error) returns, as its other runs would fail
    the same way. report(run, key, result) follows each good run (progress)."""
    results = {}
    for r in range(runs):
        for key, group, command in contenders:
            if group in skipped:
                continue
            try:
                out, peak, peak_anon = measure(command)
            except RuntimeError as e:
                skipped[group] = report(r, key, e)
                continue
            out.update(peak_rss=peak, peak_rss_anon=peak_anon)
            results.setdefault(key, []).append(out)
            report(r, key, out)
    return results


def cpu_seconds() -> float:
    """CPU seconds of this process and of the children it has joined (DataLoader workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def energon_prepare(manifest: str, out: str, prepare_args: list) -> None:
    """An Energon data set in `out` over the tar shards of `manifest`: links to them, then
    `energon prepare` (the `energon` beside this Python) with `prepare_args` (its sample type and
    field map). Run under the peers' venv (scripts/bench_env.sh --peers-venv)."""
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for path in shard_paths(manifest):
        os.symlink(path, os.path.join(out, os.path.basename(path)))
    tool = os.path.join(os.path.dirname(sys.executable), "energon")
    subprocess.run([tool, "prepare", out, "--non-interactive", "--split-parts", r"train:.*\.tar$",
                    "--num-workers", "2", "--force-overwrite"] + prepare_args, check=True,
                   stdout=subprocess.DEVNULL)


def write_array_records(manifest: str, out: str, records) -> int:
    """Grain's format for a data set: one ArrayRecord file per tar shard of `manifest` in `out`,
    a record per sample (`records(shard path)` yields their bytes), group size 1 for random
    access, as Grain's docs advise. Returns the count of records."""
    from array_record.python.array_record_module import ArrayRecordWriter
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    n = 0
    for i, path in enumerate(shard_paths(manifest)):
        w = ArrayRecordWriter(os.path.join(out, f"part-{i:05d}.array_record"), "group_size:1")
        for record in records(path):
            w.write(record)
            n += 1
        w.close()
    return n


def peer_missing(python: str, module: str, install: str):
    """Why a peer cannot run under `python` (no such Python, or `import module` fails there),
    with `install`, the command that installs it; None when it can."""
    if not os.path.exists(python):
        return f"no Python at {python}: {install}"
    r = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`import {module}` failed under {python} ({tail(r.stderr, 1)}): {install}"
    return None
