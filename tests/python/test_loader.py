"""shardstream.Loader and ShardWriter on real shards: batches, zero-copy
lifetime, errors, metrics, logging, clean shutdown."""

import gc
import glob
import json
import logging
import os
import subprocess
import threading
import time

import numpy as np
import pytest

import shardstream
from conftest import PER_SHARD, SEQ, make_shards, read_manifest, sample_ids


def test_writer_writes_manifest_with_counts_and_checksums(tmp_path):
    path = make_shards(str(tmp_path), nshards=3, per_shard=4)
    entries = read_manifest(path)
    assert [e["nsamples"] for e in entries] == [4, 4, 4]
    assert all(e["checksum"].startswith("xxh3_128:") for e in entries)
    assert all(os.path.getsize(tmp_path / e["url"]) == e["size"] for e in entries)


def test_writer_encodes_values_and_refuses_unknown_types(tmp_path):
    assert shardstream.encode_field("txt", "é") == "é".encode()
    assert shardstream.encode_field("cls", 7) == b"7"
    assert json.loads(shardstream.encode_field("json", {"a": [1]})) == {"a": [1]}
    assert shardstream.encode_field("npy", np.arange(3, dtype=np.int16)).startswith(b"\x93NUMPY")
    with pytest.raises(TypeError, match="cannot store a set"):
        shardstream.encode_field("x", {1})
    w = shardstream.ShardWriter(str(tmp_path))
    with pytest.raises(shardstream.ConfigError, match="bad/key|key"):
        w.write({"__key__": "../evil", "txt": "x"})


def test_writer_aborts_on_exception(tmp_path):
    with pytest.raises(RuntimeError):
        with shardstream.ShardWriter(str(tmp_path)) as w:
            w.write({"__key__": "a", "txt": "x"})
            raise RuntimeError("boom")
    assert not os.path.exists(tmp_path / "manifest.jsonl")
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tar")]


def test_every_sample_once_with_decoded_fields(manifest, total):
    seen = []
    with shardstream.Loader(manifest, fields=["tokens.npy", "cls", "txt"], batch_size=16,
                            seed=3) as loader:
        assert len(loader) == (total + 15) // 16
        for batch in loader:
            ids = sample_ids(batch)
            tokens = batch["tokens.npy"]
            assert tokens.dtype == np.int32 and tokens.shape == (len(ids), SEQ)
            assert (tokens[:, 0] == ids).all() and (tokens == tokens[:, :1]).all()
            assert list(batch["cls"]) == [i % 10 for i in ids]
            assert batch["txt"] == [f"caption {i}" for i in ids]
            assert all(u.endswith(".tar") for u in batch["__url__"])
            seen += ids
    assert sorted(seen) == list(range(total))
    assert seen != sorted(seen), "seeded shuffle should reorder samples"


def test_same_seed_same_order_other_seed_other_order(manifest):
    def order(seed):
        with shardstream.Loader(manifest, fields=["cls"], batch_size=10, seed=seed) as lo:
            return [k for b in lo for k in b["__key__"]]
    assert order(5) == order(5)
    assert order(5) != order(6)


def test_arrays_are_views_that_outlive_the_loader(manifest):
    loader = shardstream.Loader(manifest, fields=["tokens.npy"], batch_size=8, prefetch=2)
    kept = [loader.next() for _ in range(3)]
    loader.close()
    del loader
    gc.collect()
    for batch in kept:
        arr = batch["tokens.npy"]
        assert not arr.flags.owndata and arr.base is not None
        assert (arr[:, 0] == sample_ids(batch)).all()


def test_buffers_return_to_the_pool(manifest, total):
    # More batches than slots pass through only if each slot comes back when
    # its arrays are dropped.
    with shardstream.Loader(manifest, fields=["tokens.npy"], batch_size=4, prefetch=1,
                            shuffle=False) as loader:
        n = sum(1 for _ in loader)
        assert n == total // 4
        stats = loader.stats()
        assert stats["slots"] < n


def test_epochs_advance_and_set_epoch(manifest):
    lo = shardstream.Loader(manifest, fields=["cls"], batch_size=50, seed=1)
    e0 = [k for b in lo for k in b["__key__"]]
    e1 = [k for b in lo for k in b["__key__"]]
    assert lo.epoch == 1 and sorted(e0) == sorted(e1) and e0 != e1
    lo.set_epoch(0)
    assert [k for b in lo for k in b["__key__"]] == e0
    lo.close()


def test_disjoint_equal_shares(manifest, total):
    shares = []
    for rank in range(3):
        with shardstream.Loader(manifest, fields=["cls"], batch_size=7, rank=rank, world_size=3,
                                seed=2) as lo:
            shares.append([k for b in lo for k in b["__key__"]])
    assert len({len(s) for s in shares}) == 1
    flat = [k for s in shares for k in s]
    assert len(flat) == len(set(flat)) and len(flat) >= total - 2


def test_state_restore_with_other_world_size_delivers_the_rest(manifest, total):
    first = []
    states = []
    for rank in range(2):
        lo = shardstream.Loader(manifest, fields=["cls"], batch_size=5, rank=rank, world_size=2,
                                seed=9)
        for _ in range(4 + rank):
            first += lo.next()["__key__"]
        states.append(lo.state())
        lo.close()
    rest = []
    for rank in range(3):
        lo = shardstream.Loader(manifest, fields=["cls"], batch_size=5, rank=rank, world_size=3,
                                seed=9)
        lo.restore(states)
        rest += [k for b in lo for k in b["__key__"]]
        lo.close()
    assert not set(first) & set(rest)
    assert len(first) + len(rest) == len(set(first) | set(rest))
    assert total - 2 <= len(first) + len(rest) <= total


def test_bad_options_raise_config_error(manifest):
    with pytest.raises(shardstream.ConfigError, match="unknown option 'bogus'"):
        shardstream._core.Loader({"manifest": manifest, "bogus": 1})
    with pytest.raises(shardstream.ConfigError, match="error_policy"):
        shardstream.Loader(manifest, fields=["cls"], error_policy="ignore")
    with pytest.raises(shardstream.ConfigError):
        shardstream.Loader(manifest, fields=["cls"], batch_size=0)
    with pytest.raises(ValueError):  # ConfigError is a ValueError
        shardstream.Loader(manifest, fields=["cls"], cache_dir="/tmp/x")


def test_missing_manifest_raises_not_found(tmp_path):
    with pytest.raises(shardstream.NotFoundError) as info:
        shardstream.Loader(str(tmp_path / "nope.jsonl"), fields=["cls"])
    assert isinstance(info.value, FileNotFoundError)
    assert "nope.jsonl" in str(info.value)


def test_corrupt_shard_raises_corrupt_error_with_shard_and_offset(tmp_path):
    path = make_shards(str(tmp_path), nshards=1, per_shard=10)
    shard = tmp_path / read_manifest(path)[0]["url"]
    data = bytearray(shard.read_bytes())
    # Break the checksum field of the 4th member's header (members are 1024
    # bytes apart for these tiny samples: header + one data block each).
    off = 3 * 512 * 2
    data[off + 148:off + 156] = b"garbage!"
    shard.write_bytes(bytes(data))
    entries = read_manifest(path)
    entries[0].pop("checksum")  # reach the tar parser, not the checksum check
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(e) for e in entries) + "\n")
    lo = shardstream.Loader(path, fields=["cls"], batch_size=1, shuffle=False)
    with pytest.raises(shardstream.CorruptError) as info:
        for _ in lo:
            pass
    e = info.value
    assert e.url is not None and e.url.endswith(shard.name)
    assert e.offset is not None and 0 <= e.offset <= off
    assert shard.name in str(e)
    lo.close()


def _threads(expect=None):
    """The thread count once it has held still for 200 ms, or at once when it is `expect` (at
    most 3 s either way): a thread whose join has returned stays listed until the kernel reaps
    it a moment later."""
    count, still_since = len(os.listdir("/proc/self/task")), time.monotonic()
    deadline = still_since + 3
    while count != expect and time.monotonic() < deadline and time.monotonic() - still_since < 0.2:
        time.sleep(0.005)
        now = len(os.listdir("/proc/self/task"))
        if now != count:
            count, still_since = now, time.monotonic()
    return count


def _fds():
    return len(os.listdir("/proc/self/fd"))


def test_a_pipe_command_inherits_no_descriptor_of_the_process(manifest, tmp_path):
    # A `pipe:` command gets stdin, stdout and stderr only: never a cache file or a socket the
    # process holds. The wheels are built on glibc 2.31, which lacks posix_spawn's closefrom:
    # there each open descriptor is closed by name, and this test runs against them too.
    shard = read_manifest(manifest)[0]["url"]
    shard = os.path.join(os.path.dirname(manifest), shard[len("file://"):] if
                         shard.startswith("file://") else shard)
    listing = tmp_path / "fds.txt"
    command = f"ls /proc/$$/fd > {listing}; cat {shard}"
    r, w = os.pipe()
    # Inheritable, as a library that forgets O_CLOEXEC leaves them, and numbered above what the
    # shell opens for itself (dash keeps fd 10 while it redirects).
    leaked = [200, 201]
    for fd, at in zip((r, w), leaked):
        os.dup2(fd, at, inheritable=True)
        os.close(fd)
    try:
        # The control: a shell that is handed them lists them.
        subprocess.run(["/bin/sh", "-c", command], close_fds=False, stdout=subprocess.DEVNULL,
                       check=True)
        assert set(leaked) <= {int(x) for x in listing.read_text().split()}
        listing.unlink()
        with shardstream.Loader([f"pipe:{command}"], fields=["tokens.npy"],
                                batch_size=PER_SHARD, shuffle=False) as lo:
            n = sum(len(b["__key__"]) for b in lo)
    finally:
        for fd in leaked:
            os.close(fd)
    assert n == PER_SHARD
    fds = {int(x) for x in listing.read_text().split()}
    assert {0, 1, 2} <= fds and not fds & set(leaked), f"the shell held descriptors {sorted(fds)}"


def test_early_break_leaks_no_threads_or_fds(manifest):
    threads, fds = _threads(), _fds()
    for _ in range(3):
        lo = shardstream.Loader(manifest, fields=["tokens.npy"], batch_size=4, reader_threads=2)
        for i, _b in enumerate(lo):
            if i == 2:
                break
        assert _threads() > threads  # the pipeline runs on its own threads
        del lo, _b
        gc.collect()
    assert _threads(threads) == threads
    assert _fds() == fds


def test_no_threads_before_first_batch(manifest):
    threads = _threads()
    lo = shardstream.Loader(manifest, fields=["cls"], batch_size=4)
    assert _threads() == threads and len(lo) > 0
    lo.close()


def test_metrics_dict_and_prometheus(manifest, total):
    with shardstream.Loader(manifest, fields=["tokens.npy"], batch_size=10) as lo:
        for _ in lo:
            pass
        stats = lo.stats()
    assert stats["batches"] == total // 10 and stats["samples"] == total
    assert sum(stats["wait_counts"]) == stats["batches"] + 1 or \
        sum(stats["wait_counts"]) == stats["batches"]
    text = shardstream.metrics.to_prometheus(stats, labels={"rank": 0})
    assert f'shardstream_loader_samples_total{{rank="0"}} {total}' in text
    assert 'shardstream_loader_wait_seconds_bucket{le="+Inf",rank="0"}' in text
    assert "# TYPE shardstream_loader_wait_seconds histogram" in text


def test_native_log_records_reach_python_logging(caplog):
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        shardstream._core._log(30, "hello from C++ " + str(threading.get_ident()))
        shardstream._logging.drain()
    assert any("hello from C++" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)


def test_parse_size_is_the_one_parser_of_cli_and_cpp():
    # KB/MB/GB are powers of 1000, KiB/MiB/GiB powers of 1024, decimals allowed,
    # the same as `shardstream pack --shard-size` and `--cache-limit`.
    assert shardstream.parse_size("512MiB") == 512 << 20
    assert shardstream.parse_size("10 GB") == 10 * 10**9
    assert shardstream.parse_size("1.5 GB") == 1_500_000_000
    assert shardstream.parse_size("0.2MB") == 200_000
    assert shardstream.parse_size("1.5GiB") == 3 << 29
    assert shardstream.parse_size("64k") == 64_000
    assert shardstream.parse_size("2 gib") == 2 << 30
    assert shardstream.parse_size(12) == 12
    assert shardstream.parse_size(np.int64(5)) == 5
    assert shardstream.parse_size(1e9) == 10**9
    assert shardstream.parse_size(None) is None
    for bad in ("lots", "12parsecs", "-1MB", "", "1.5.2GB", "MB", True, -3, [1]):
        with pytest.raises(shardstream.ConfigError) as e:
            shardstream.parse_size(bad)
        assert isinstance(e.value, ValueError)
    with pytest.raises(shardstream.ConfigError, match="unknown unit 'parsecs'.*KiB"):
        shardstream.parse_size("12parsecs")


def test_zstd_shards_and_brace_pattern(tmp_path):
    with shardstream.ShardWriter(str(tmp_path), max_samples=10, compression="zstd") as w:
        for i in range(30):
            w.write({"__key__": f"z{i:03d}", "tokens.npy": np.full(8, i, np.int16)})
    names = sorted(p for p in os.listdir(tmp_path) if p.endswith(".tar.zst"))
    assert names == [f"shard-{i:06d}.tar.zst" for i in range(3)]
    pattern = str(tmp_path / "shard-{000000..000002}.tar.zst")
    # Counts learned from the compressed shards (indexes written beside them).
    with shardstream.Loader(pattern, fields=["tokens.npy"], batch_size=4, shuffle=False) as lo:
        assert len(lo) == 8
        rows = [int(r[0]) for b in lo for r in b["tokens.npy"]]
    assert sorted(rows) == list(range(30))
    # Without learning, the counts stay unknown and whole shards are split.
    with shardstream.Loader(pattern, fields=["tokens.npy"], batch_size=4, shuffle=False,
                            learn_sample_counts=False) as lo:
        with pytest.raises(TypeError, match="unknown"):
            len(lo)
        rows = [int(r[0]) for b in lo for r in b["tokens.npy"]]
    assert sorted(rows) == list(range(30))


def test_direct_reads_give_the_same_token_batches(tmp_path):
    # Token documents of an indexed, uncompressed shard set are read straight
    # into the batch; the batches are those of the read-buffer path.
    rng = np.random.default_rng(5)
    with shardstream.ShardWriter(str(tmp_path), max_samples=40, write_index=True) as w:
        for i in range(120):
            n = int(rng.integers(0, 90))
            w.write({"__key__": f"d{i:04d}", "tokens.npy": np.arange(n, dtype=np.int32) + 1000 * i})
    manifest = str(tmp_path / "manifest.jsonl")
    runs = {}
    for direct in (True, False):
        with shardstream.Loader(manifest, tokens={"field": "tokens.npy", "seq_len": 32, "eod_token": -1},
                                batch_size=4, shuffle=False, direct_reads=direct) as lo:
            batches = [{k: np.array(v) for k, v in b.items() if isinstance(v, np.ndarray)} for b in lo]
            runs[direct] = (batches, lo.stats()["direct_samples"])
    (a, direct_samples), (b, buffered_samples) = runs[True], runs[False]
    assert direct_samples == 120 and buffered_samples == 0
    assert len(a) == len(b) > 10
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and "tokens" in x
        for k in x:
            assert np.array_equal(x[k], y[k]), k


def test_shuffled_token_shards_stay_mapped_across_epochs(tmp_path):
    # With a sample shuffle the documents are copied from the shards mapped in
    # memory, kept from one epoch to the next up to mapped_keep_bytes; stats()
    # says how much, and the batches are those of fresh mappings.
    rng = np.random.default_rng(6)
    with shardstream.ShardWriter(str(tmp_path), max_samples=40, write_index=True) as w:
        for i in range(120):
            n = int(rng.integers(1, 90))
            w.write({"__key__": f"d{i:04d}", "tokens.npy": np.arange(n, dtype=np.int32) + 1000 * i})
    manifest = str(tmp_path / "manifest.jsonl")
    shard_bytes = sum(os.path.getsize(p) for p in glob.glob(str(tmp_path / "*.tar")))
    runs = {}
    for keep in ("1GiB", 0):
        with shardstream.Loader(manifest, tokens={"field": "tokens.npy", "seq_len": 32},
                                batch_size=4, shuffle_buffer=50, seed=2,
                                mapped_keep_bytes=keep) as lo:
            epochs = [[np.array(b["tokens"]) for b in lo] for _ in range(2)]
            stats = lo.stats()
            runs[keep] = (epochs, stats["mapped_kept_bytes"], stats["direct_samples"],
                          shardstream.metrics.to_prometheus(stats))
    (kept, kept_bytes, kept_direct, text), (fresh, none_bytes, _, _) = runs["1GiB"], runs[0]
    assert kept_bytes == shard_bytes > 0 and none_bytes == 0
    assert kept_direct == 240
    assert f"shardstream_loader_mapped_kept_bytes {shard_bytes}" in text
    for a, b in zip(kept, fresh):
        assert len(a) == len(b) > 10
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(kept[0], kept[1]))


def test_without_fields_every_field_of_the_first_sample(manifest, total):
    # As WebDataset's .decode(): each field decoded by its extension.
    loader = shardstream.Loader(manifest, batch_size=10, shuffle=False)
    batch = loader.next()
    assert set(batch) == {"tokens.npy", "cls", "txt", "__key__", "__url__"}
    assert batch["tokens.npy"].dtype == np.int32 and batch["tokens.npy"].shape == (10, 16)
    assert batch["cls"].dtype == np.int64
    assert batch["txt"][0].startswith("caption ")
    n = 10 + sum(len(b["__key__"]) for b in loader)
    assert n == total
    loader.close()


def test_misspelt_field_is_a_config_error_naming_the_fields(manifest):
    loader = shardstream.Loader(manifest, fields=["tokens.npy", "jpeg"], batch_size=4)
    with pytest.raises(shardstream.ConfigError) as e:
        loader.next()
    msg = str(e.value)
    assert "'jpeg'" in msg and "'cls'" in msg and "'txt'" in msg and "'tokens.npy'" in msg
    assert "shard-" in msg
    loader.close()


def test_optional_field_has_a_presence_mask(tmp_path):
    with shardstream.ShardWriter(str(tmp_path), max_samples=6) as w:
        for i in range(20):
            sample = {"__key__": f"k{i:03d}", "cls": i}
            if i % 4 == 3:  # not in the first sample
                sample["png"] = b"\x89PNG" + bytes([i])
            w.write(sample)
    loader = shardstream.Loader(str(tmp_path / "manifest.jsonl"), batch_size=5, shuffle=False,
                                fields=["cls", {"name": "png", "optional": True, "decode": "bytes"}])
    seen = 0
    for batch in loader:
        present = batch["png.present"]
        assert present.dtype == np.bool_
        for i, has, data in zip(batch["cls"].tolist(), present.tolist(), batch["png"]):
            assert has == (i % 4 == 3)
            assert data == (b"\x89PNG" + bytes([i]) if has else b"")
            seen += 1
    assert seen == 20
    loader.close()


def test_inputs_as_webdataset_users_write_them(tmp_path, total):
    # A single shard, a list of shards, a directory, a brace pattern: no
    # manifest needed; sample counts are learned (and kept in .idx sidecars),
    # so len() and exactly-once splitting work.
    from conftest import make_shards
    out = tmp_path / "shards"
    make_shards(str(out))
    os.remove(out / "manifest.jsonl")
    shards = sorted(str(p) for p in out.glob("*.tar"))
    one = shardstream.Loader(shards[0], fields=["cls"], batch_size=5, shuffle=False)
    assert one.samples_per_epoch == 25 and len(one) == 5
    assert os.path.exists(shards[0] + ".idx")
    one.close()
    for urls in (shards[:3], out, str(out) + "/", str(out / "shard-{000000..000007}.tar")):
        keys = []
        for rank in range(2):
            ld = shardstream.Loader(urls, fields=["cls"], batch_size=5, rank=rank, world_size=2)
            assert ld.samples_per_epoch > 0
            keys += [k for b in ld for k in b["__key__"]]
            ld.close()
        want = 74 if isinstance(urls, list) else total  # 75 over 2 ranks: one dropped
        assert len(keys) == len(set(keys)) == want, urls
    with pytest.raises(shardstream.NotFoundError, match="no shards"):
        shardstream.Loader(str(tmp_path), fields=["cls"])
    with pytest.raises(shardstream.NotFoundError):
        shardstream.Loader(str(tmp_path / "missing.tar"), fields=["cls"]).next()
    with pytest.raises(shardstream.ConfigError, match="named twice"):
        shardstream.Loader([shards[0], shards[0]], fields=["cls"])
    with pytest.raises(shardstream.ConfigError, match="empty"):
        shardstream.Loader([], fields=["cls"])


def test_eval_mode_reads_manifest_order_exactly_once(manifest, total):
    # Validation and inference: in order, nothing dropped or padded, ranks may
    # differ by one batch.
    keys, batches = [], []
    for rank in range(3):
        with shardstream.Loader(manifest, fields=["cls"], batch_size=7, mode="eval", rank=rank,
                                world_size=3, seed=5) as ld:
            mine = [k for b in ld for k in b["__key__"]]
            assert ld.samples_per_epoch == len(mine)
            batches.append(len(ld))
            keys += mine
    assert keys == [f"s{i:06d}" for i in range(total)]
    assert max(batches) - min(batches) <= 1
    with pytest.raises(shardstream.ConfigError, match="drop_last"):
        shardstream.Loader(manifest, fields=["cls"], mode="eval", drop_last=True)
    with pytest.raises(shardstream.ConfigError, match="mode"):
        shardstream.Loader(manifest, fields=["cls"], mode="evaluate")
