"""CPU controls: reader_cpus and reader_nice, read back from the kernel's view
of the loader's worker threads (/proc), with their bad values refused."""

import os

import pytest

import shardstream
from shardstream.torch import ShardDataset


def workers(before=frozenset()):
    """(Cpus_allowed_list, nice) of each of this process's ss-worker threads not in `before`
    (thread ids taken earlier: another loader's workers, left by an earlier test)."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        if tid in before:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "ss-worker":
                    continue
            with open(f"/proc/self/task/{tid}/status") as f:
                cpus = next(l.split()[1] for l in f if l.startswith("Cpus_allowed_list:"))
            with open(f"/proc/self/task/{tid}/stat") as f:
                nice = int(f.read().rsplit(")", 1)[1].split()[16])
        except FileNotFoundError:  # a thread that left meanwhile
            continue
        out.append((cpus, nice))
    return out


def test_worker_threads_take_the_cpus_and_niceness_given(manifest, total):
    allowed = sorted(os.sched_getaffinity(0))
    base = os.getpriority(os.PRIO_PROCESS, 0)
    mine = str(allowed[-1])
    before = frozenset(os.listdir("/proc/self/task"))
    with shardstream.Loader(manifest, batch_size=4, reader_threads=2) as loader:
        next(iter(loader))
        plain = workers(before)
    assert len(plain) == 2 and all(n == base for _, n in plain), plain   # the control
    before = frozenset(os.listdir("/proc/self/task"))
    with shardstream.Loader(manifest, batch_size=4, reader_threads=2, reader_cpus=mine,
                            reader_nice=6) as loader:
        it = iter(loader)
        n = len(next(it)["__key__"])
        controlled = workers(before)
        n += sum(len(b["__key__"]) for b in it)
    assert len(controlled) == 2 and set(controlled) == {(mine, base + 6)}, controlled
    assert n == total
    # The consumer's own thread is untouched.
    assert sorted(os.sched_getaffinity(0)) == allowed
    assert os.getpriority(os.PRIO_PROCESS, 0) == base


def test_a_list_and_a_range_read_the_same_and_pass_through_shard_dataset(manifest):
    allowed = sorted(os.sched_getaffinity(0))
    assert shardstream.loader.parse_cpus("0-2,5") == [0, 1, 2, 5]
    assert shardstream.loader.parse_cpus([3, 1]) == [3, 1]
    before = frozenset(os.listdir("/proc/self/task"))
    ds = ShardDataset(manifest, batch_size=4, reader_cpus=allowed[:1], reader_nice=1)
    try:
        next(iter(ds))
        assert {c for c, _ in workers(before)} == {str(allowed[0])}
    finally:
        ds.close()


@pytest.mark.parametrize("value, message", [
    ("0-x", "reader_cpus '0-x': '0-x' is not a CPU or a range such as '0-3'"),
    ("3-1", "reader_cpus '3-1': '3-1' is not a range of CPUs"),
    ([0, -2], "CPU numbers are not negative"),
    ([0.5], "expected CPU numbers or a text"),
    ([1000], "reader_cpus: CPU 1000 is not one this process may use"),
])
def test_bad_cpus_are_refused_by_name(manifest, value, message):
    with pytest.raises(shardstream.ConfigError, match=message.replace("(", r"\(")):
        shardstream.Loader(manifest, reader_cpus=value)


def test_a_niceness_out_of_range_is_refused(manifest):
    with pytest.raises(shardstream.ConfigError, match="reader_nice 20: expected 0-19"):
        shardstream.Loader(manifest, reader_nice=20)
