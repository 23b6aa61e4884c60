"""MosaicML Streaming (MDS) data sets read directly: sets written by Streaming's
own MDSWriter (zstd-compressed and not) give the samples Streaming's reader
gives, column by column; the plan splits them exactly once over 2 ranks x 2
DataLoader workers with a resume; a mix takes a tar stream and an MDS stream;
bad sets give errors naming the index, the shard, the sample and the column."""

import collections
import io
import json
import os
import pickle
import shutil

import numpy as np
import pytest
from PIL import Image
from torchdata.stateful_dataloader import StatefulDataLoader

import shardstream
from shardstream.torch import ShardDataset, passthrough, state_dict_from_stateful_dataloader
from streaming_import import import_streaming

N = 96
COLUMNS = {"tokens": "ndarray:int32", "label": "int", "text": "str", "f": "float32",
           "fixed": "ndarray:uint16:2,3", "img": "jpeg", "meta": "json", "any": "ndarray",
           "small": "uint8", "num": "str_int", "pix": "pil", "blob": "bytes"}


def sample(i):
    rng = np.random.default_rng(i)
    return {"tokens": np.arange(i + 1, dtype=np.int32) * 3, "label": i * 1000, "text": f"doc {i} é",
            "f": i * 0.5, "fixed": np.full((2, 3), i, np.uint16),
            "img": Image.fromarray(rng.integers(0, 255, (6 + i % 5, 8, 3), dtype=np.uint8)),
            "meta": {"i": i, "tags": ["a", str(i)]},
            "any": rng.standard_normal((2, 1 + i % 4)),
            "small": i % 256, "num": -i, "pix": Image.new("L", (3, 2), i % 256),
            "blob": bytes([i % 256]) * (i % 7)}


def write_mds(out, compression, n=N, columns=COLUMNS, make=sample, size_limit=1 << 12):
    streaming = import_streaming()
    shutil.rmtree(out, ignore_errors=True)
    with streaming.MDSWriter(out=str(out), columns=columns, compression=compression,
                             size_limit=size_limit) as w:
        for i in range(n):
            w.write(make(i))
    return str(out)


@pytest.fixture(scope="module", params=["zstd", None], ids=["zstd", "raw"])
def mds(tmp_path_factory, request):
    return write_mds(tmp_path_factory.mktemp("mds") / "set", request.param)


def streaming_samples(path):
    streaming = import_streaming()
    ds = streaming.StreamingDataset(local=path, shuffle=False, batch_size=1)
    return [ds[i] for i in range(len(ds))]


def global_index(path):
    """key -> Streaming's sample index (shards in index order, samples in shard order)."""
    with open(os.path.join(path, "index.json")) as f:
        shards = json.load(f)["shards"]
    out, base = {}, 0
    for s in shards:
        stem = s["raw_data"]["basename"][:-len(".mds")]
        for k in range(s["samples"]):
            out[f"{stem}/{k:09d}"] = base + k
        base += s["samples"]
    return out


def test_every_column_matches_streamings_reader(mds):
    theirs = streaming_samples(mds)
    assert len(theirs) == N
    where = global_index(mds)
    ds = ShardDataset(mds, batch_size=None, shuffle=False,
                      fields=[f for f in COLUMNS])
    assert len(ds) == N
    seen = set()
    for s in ds:
        i = where[s["__key__"]]
        seen.add(i)
        t = theirs[i]
        assert s["tokens"].numpy().tolist() == t["tokens"].tolist()
        assert s["tokens"].dtype == shardstream_dtype("int32")
        assert int(s["label"]) == t["label"] and s["label"].ndim == 0
        assert s["text"] == t["text"]
        assert float(s["f"]) == float(t["f"]) and s["f"].ndim == 0
        assert np.array_equal(s["fixed"].numpy(), t["fixed"])
        assert np.asarray(Image.open(io.BytesIO(s["img"]))).tolist() == np.asarray(t["img"]).tolist()
        assert s["meta"] == t["meta"]
        assert s["any"].numpy().dtype == t["any"].dtype
        assert np.array_equal(s["any"].numpy(), t["any"])
        assert int(s["small"]) == int(t["small"])
        assert int(s["num"]) == t["num"]
        assert np.array_equal(s["pix"].numpy(), np.asarray(t["pix"]))
        assert bytes(s["blob"]) == t["blob"]
    assert seen == set(range(N))


def shardstream_dtype(name):
    import torch
    return getattr(torch, name)


def test_no_fields_named_takes_every_column(mds):
    ds = ShardDataset(mds, batch_size=None, shuffle=False)
    first = next(iter(ds))
    assert set(COLUMNS) <= set(first)
    assert first["label"].ndim == 0


def test_batches_stack_scalars_and_fixed_arrays(mds):
    ds = ShardDataset(mds, fields=["label", "fixed", "f"], batch_size=8, shuffle=False)
    b = next(iter(ds))
    assert tuple(b["label"].shape) == (8,)
    assert tuple(b["fixed"].shape) == (8, 2, 3)
    assert tuple(b["f"].shape) == (8,)


def make_ds(path, rank, **kw):
    return ShardDataset(path, fields=["label"], batch_size=4, seed=3, shuffle_buffer=16,
                        rank=rank, world_size=2, **kw)


def test_two_ranks_two_workers_resume_exactly_once(mds):
    """Each rank saves its StatefulDataLoader's state after 3 batches, loses what
    it read after that, and resumes; across both ranks every sample comes once."""
    delivered = []
    for rank in range(2):
        ds = make_ds(mds, rank)
        sdl = StatefulDataLoader(ds, batch_size=None, num_workers=2, collate_fn=passthrough)
        it = iter(sdl)
        before = [int(x) for _ in range(3) for x in next(it)["label"]]
        state = pickle.loads(pickle.dumps(sdl.state_dict()))
        next(it)  # lost with the "crash"
        del it, sdl
        ds.close()
        ds = make_ds(mds, rank)
        sdl = StatefulDataLoader(ds, batch_size=None, num_workers=2, collate_fn=passthrough)
        sdl.load_state_dict(state)
        after = [int(x) for b in sdl for x in b["label"]]
        ds.close()
        assert not set(before) & set(after)
        delivered += before + after
    counts = collections.Counter(delivered)
    assert set(counts) == {i * 1000 for i in range(N)}
    assert max(counts.values()) == 1


def test_resume_on_fewer_workers_is_exact(mds):
    """A state saved with 2 DataLoader workers resumes with 1 (elastic resume): the rest of
    the epoch, every sample once."""
    def loader(workers):
        ds = ShardDataset(mds, fields=["label"], batch_size=4, seed=7, shuffle_buffer=16)
        return ds, StatefulDataLoader(ds, batch_size=None, num_workers=workers, collate_fn=passthrough)
    ds, sdl = loader(2)
    it = iter(sdl)
    before = [int(x) for _ in range(5) for x in next(it)["label"]]
    state = pickle.loads(pickle.dumps(sdl.state_dict()))
    del it, sdl
    ds.close()
    # StatefulDataLoader refuses another worker count: the data set's state, merged over
    # the workers, goes into the data set instead.
    ds, sdl = loader(1)
    ds.load_state_dict(state_dict_from_stateful_dataloader(state))
    after = [int(x) for b in sdl for x in b["label"]]
    ds.close()
    assert len(set(before) & set(after)) == 0, "delivered twice"
    assert sorted(before + after) == [i * 1000 for i in range(N)], (len(before), len(after))


def test_same_seed_same_order(mds):
    a = [int(x) for b in ShardDataset(mds, fields=["label"], batch_size=5, seed=9) for x in b["label"]]
    b = [int(x) for b in ShardDataset(mds, fields=["label"], batch_size=5, seed=9) for x in b["label"]]
    assert a == b and sorted(a) == [i * 1000 for i in range(N)]


def test_packed_tokens_from_an_mds_column(mds):
    ds = ShardDataset(mds, tokens={"field": "tokens", "seq_len": 32, "layout": "pack", "eod_token": -1},
                      batch_size=4, shuffle=False)
    total = 0
    for b in ds:
        t = b["tokens"]
        assert tuple(t.shape)[1] == 32
        total += int((t >= 0).sum())
    # every token of every document (the last batch may be cut to equal ranks, not here: one rank)
    assert total >= sum(i + 1 for i in range(N)) - 4 * 32


def test_two_ranks_get_equal_token_batches(mds):
    """Packed token batches over 2 ranks: the same count of batches on each (the default
    equal_batches, from the documents' token counts, read from the local MDS shards)."""
    counts = []
    for rank in range(2):
        ds = ShardDataset(mds, tokens={"field": "tokens", "seq_len": 16, "layout": "pack"},
                          batch_size=2, seed=4, rank=rank, world_size=2)
        n = sum(1 for _ in ds)
        counts.append(n)
        assert len(ds) == n
    assert counts[0] == counts[1] > 0


def test_mixed_with_a_tar_stream(tmp_path, mds):
    tar_dir = tmp_path / "tar"
    with shardstream.ShardWriter(str(tar_dir), max_samples=10) as w:
        for i in range(40):
            w.write({"__key__": f"t{i:03d}", "cls": 7000 + i})
    m = write_mds(tmp_path / "m", "zstd", n=30, columns={"cls": "str_int"},
                  make=lambda i: {"cls": 100 + i})
    ds = ShardDataset(streams=[{"inputs": str(tar_dir / "manifest.jsonl")}, {"inputs": m}],
                      fields=["cls"], batch_size=10, seed=2)
    got = [int(x) for b in ds for x in b["cls"]]
    assert sorted(got) == [100 + i for i in range(30)] + [7000 + i for i in range(40)]


def test_from_s3_through_the_cache(mds, tmp_path, moto_s3):
    """The set uploaded to (moto's) S3, signing enforced: the prefix is listed, index.json read,
    the shards fetched into the cache; a second epoch reads the cache alone."""
    moto_s3.create_bucket(Bucket="data")
    for name in os.listdir(mds):
        moto_s3.upload_file(os.path.join(mds, name), "data", f"mds-set/{name}")
    ds = ShardDataset("s3://data/mds-set/", fields=["label", "text"], batch_size=8, seed=1,
                      cache_dir=str(tmp_path / "cache"), cache_limit="1GB")
    for epoch in range(2):
        ds.set_epoch(epoch)
        got = [int(x) for b in ds for x in b["label"]]
        assert sorted(got) == [i * 1000 for i in range(N)]
    st = ds.stats()
    assert st["cache_hits"] > 0, st


def test_a_column_with_two_encodings_in_a_mix_is_refused(tmp_path):
    a = write_mds(tmp_path / "a", None, n=4, columns={"tokens": "ndarray:int32"},
                  make=lambda i: {"tokens": np.arange(3, dtype=np.int32)})
    b = write_mds(tmp_path / "b", None, n=4, columns={"tokens": "ndarray:uint16"},
                  make=lambda i: {"tokens": np.arange(3, dtype=np.uint16)})
    with pytest.raises(shardstream.ConfigError, match=r"column 'tokens' is ndarray:int32 in one data set "
                                                      r"and ndarray:uint16 in another"):
        next(iter(ShardDataset(streams=[{"inputs": a}, {"inputs": b}], fields=["tokens"])))


# -- bad sets -------------------------------------------------------------------------------------

@pytest.fixture
def small(tmp_path):
    return write_mds(tmp_path / "small", None, n=20, columns={"label": "int", "text": "str"},
                     make=lambda i: {"label": i, "text": "x" * i}, size_limit=256)


def edit_index(path, change):
    p = os.path.join(path, "index.json")
    with open(p) as f:
        doc = json.load(f)
    change(doc)
    with open(p, "w") as f:
        json.dump(doc, f)


def test_unknown_index_version_is_refused(small):
    edit_index(small, lambda d: d.update(version=3))
    with pytest.raises(shardstream.ConfigError, match=r"index\.json: version 3"):
        next(iter(ShardDataset(small, fields=["label"])))


def test_unknown_and_pickled_encodings(small, tmp_path):
    edit_index(small, lambda d: d["shards"][0]["column_encodings"].__setitem__(1, "strr"))
    with pytest.raises(shardstream.ConfigError, match=r"shard 0, column 'text'.*unknown MDS column encoding 'strr'"):
        next(iter(ShardDataset(small, fields=["label"])))
    p = write_mds(tmp_path / "pkl", None, n=5, columns={"obj": "pkl", "label": "int"},
                  make=lambda i: {"obj": {"i": i}, "label": i})
    with pytest.raises(shardstream.ConfigError, match=r"column 'obj'.*pickled"):
        next(iter(ShardDataset(p, fields=["obj"])))
    # The other columns read; the pickle's bytes only when asked for as bytes.
    assert sorted(int(s["label"]) for s in ShardDataset(p, fields=["label"], batch_size=None)) == list(range(5))
    raw = next(iter(ShardDataset(p, fields=[{"name": "obj", "decode": "bytes"}], batch_size=None)))
    assert isinstance(raw["obj"], bytes) and len(raw["obj"]) > 0


def test_truncated_shard_is_an_error_naming_it(small):
    shard = os.path.join(small, "shard.00001.mds")
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.truncate(size - 3)
    # The size index.json gives is checked as a manifest's is, when the shard is opened.
    with pytest.raises(shardstream.ChecksumError, match=r"shard\.00001\.mds has \d+ bytes, its manifest entry says"):
        list(ShardDataset(small, fields=["label"], batch_size=None, shuffle=False))
    # Without that size (the index edited), the reader's own check names the sample.
    edit_index(small, lambda d: d["shards"][1]["raw_data"].pop("bytes"))
    with pytest.raises(shardstream.CorruptError, match=r"shard\.00001\.mds.*shorter .* than its index says"):
        list(ShardDataset(small, fields=["label"], batch_size=None, shuffle=False))


def test_skip_policy_counts_a_bad_shard(small):
    shard = os.path.join(small, "shard.00001.mds")
    with open(shard, "r+b") as f:
        f.seek(0)
        f.write((999).to_bytes(4, "little"))  # a sample count the index does not say
    with open(os.path.join(small, "index.json")) as f:
        bad = json.load(f)["shards"][1]["samples"]
    ds = ShardDataset(small, fields=["label"], batch_size=None, shuffle=False, error_policy="skip_shard")
    got = [int(s["label"]) for s in ds]
    assert len(got) == 20 - bad
    assert ds.stats()["skipped_shards"] == 1


def test_bad_sample_sizes_name_the_sample_and_column(small):
    with open(os.path.join(small, "index.json")) as f:
        first = json.load(f)["shards"][0]["samples"]
    shard = os.path.join(small, "shard.00000.mds")
    with open(shard, "r+b") as f:
        data = f.read()
        n = int.from_bytes(data[:4], "little")
        begin = int.from_bytes(data[4 + 4 * 2:4 + 4 * 3], "little")  # sample 2
        f.seek(begin)
        f.write((10 ** 6).to_bytes(4, "little"))  # its text column's size
    assert n == first
    with pytest.raises(shardstream.CorruptError, match=r"sample 2, column 'text'"):
        list(ShardDataset(small, fields=["label"], batch_size=None, shuffle=False))
    ds = ShardDataset(small, fields=["label"], batch_size=None, shuffle=False, error_policy="skip_sample")
    assert sorted(int(s["label"]) for s in ds) == [i for i in range(20) if i != 2]
    assert ds.stats()["skipped_samples"] == 1
