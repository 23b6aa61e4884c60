"""Parquet files written by pyarrow read as rows: every column's value equals
pyarrow's own reading, field by field; the plan splits rows exactly once over
2 ranks x 2 DataLoader workers with a resume (ranges opened at a row, in a later
row group); a prefix on (moto's) S3 is read through the Source; a column the
loader does not read, a file that is not Parquet and a missing column are errors
naming the file and the column."""

import collections
import os

import pytest

import shardstream
from resume_check import delivered_over_two_ranks
from shardstream.torch import ShardDataset

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N = 300  # rows over three files, row groups of 32


def table(lo, hi):
    ids = list(range(lo, hi))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "text": [f"row {i} é \"q\"" if i % 17 else None for i in ids],
        "score": pa.array([i / 8 for i in ids], pa.float64()),
        "f32": pa.array([i / 10 for i in ids], pa.float32()),
        "small": pa.array([i % 100 for i in ids], pa.int8()),
        "flag": [i % 3 == 0 for i in ids],
        "blob": pa.array([bytes([i % 256]) * (i % 5) for i in ids], pa.binary()),
        "big": pa.array([f"x{i}" for i in ids], pa.large_string()),
    })


@pytest.fixture(scope="module")
def pq_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("parquet")
    for k in range(3):
        pq.write_table(table(k * 100, (k + 1) * 100), d / f"part-{k}.parquet", row_group_size=32)
    return str(d)


def test_values_match_pyarrow(pq_dir):
    want = {r["id"]: r for k in range(3)
            for r in pq.read_table(os.path.join(pq_dir, f"part-{k}.parquet")).to_pylist()}
    ds = ShardDataset(pq_dir, fields=["id", {"name": "text", "optional": True}, "score", "f32", "small",
                                      "flag", "blob", "big"], batch_size=16, shuffle=False)
    seen = 0
    for b in ds:
        for k in range(len(b["id"])):
            i = int(b["id"][k])
            w = want[i]
            if w["text"] is None:
                assert not bool(b["text.present"][k])
            else:
                assert b["text"][k] == w["text"]
            assert b["score"][k] == w["score"] and type(b["score"][k]) is float  # 1.0 too
            assert b["f32"][k] == w["f32"]  # the float32's value, as pyarrow gives it
            assert int(b["small"][k]) == w["small"]
            assert b["flag"][k] is w["flag"]
            assert bytes(b["blob"][k]) == w["blob"]
            assert b["big"][k] == w["big"]
            seen += 1
    assert seen == N


def make_ds(path, rank, **kw):
    return ShardDataset(path, fields=["id"], batch_size=4, seed=3, shuffle_buffer=16,
                        rank=rank, world_size=2, **kw)


def test_two_ranks_two_workers_resume_exactly_once(pq_dir):
    delivered = delivered_over_two_ranks(lambda rank: make_ds(pq_dir, rank), "id", 5)
    counts = collections.Counter(delivered)
    assert set(counts) == set(range(N))
    assert max(counts.values()) == 1


def test_a_folder_named_like_a_file(tmp_path, pq_dir):
    """Spark writes "out.parquet/" folders of part files."""
    import shutil
    shutil.copytree(pq_dir, tmp_path / "out.parquet")
    ds = ShardDataset(str(tmp_path / "out.parquet"), fields=["id"], batch_size=50)
    assert sorted(int(x) for b in ds for x in b["id"]) == list(range(N))


def test_a_damaged_row_group(tmp_path):
    """A row group whose compressed bytes are damaged: a CorruptError naming the file, or under
    skip_shard the rest of the file skipped and counted."""
    p = tmp_path / "c.parquet"
    pq.write_table(table(0, 100), p, row_group_size=25, compression="zstd")
    chunk = pq.ParquetFile(p).metadata.row_group(2).column(1)  # the text of rows 50..74
    b = bytearray(p.read_bytes())
    for k in range(chunk.data_page_offset + 20, chunk.data_page_offset + 60):
        b[k] ^= 0x5A
    p.write_bytes(bytes(b))
    with pytest.raises(shardstream.CorruptError, match=r"Parquet file .*c.parquet: reading a row group"):
        list(ShardDataset(str(p), fields=["id", "text"], batch_size=10, shuffle=False))
    ds = ShardDataset(str(p), fields=["id", "text"], batch_size=10, shuffle=False, error_policy="skip_shard")
    got = [int(x) for b in ds for x in b["id"]]
    assert got == list(range(len(got))) and len(got) <= 50
    assert ds.stats()["skipped_shards"] == 1


def test_from_s3(pq_dir, moto_s3):
    moto_s3.create_bucket(Bucket="data")
    for name in os.listdir(pq_dir):
        moto_s3.upload_file(os.path.join(pq_dir, name), "data", f"pq/{name}")
    ds = ShardDataset("s3://data/pq/", fields=["id", "big"], batch_size=32, seed=1)
    assert sorted(int(x) for b in ds for x in b["id"]) == list(range(N))
    assert len(ds) == (N + 31) // 32  # counts from the footers


def test_bad_inputs_name_file_and_column(tmp_path, pq_dir):
    pq.write_table(pa.table({"id": [1, 2], "tags": [["a"], ["b", "c"]]}), tmp_path / "lists.parquet")
    with pytest.raises(shardstream.ConfigError, match=r"field 'tags' is a Parquet column of type list"):
        next(iter(ShardDataset(str(tmp_path / "lists.parquet"), fields=["id", "tags"], batch_size=2)))
    # Not named, such a column is left out.
    batch = next(iter(ShardDataset(str(tmp_path / "lists.parquet"), batch_size=2)))
    assert "id" in batch and "tags" not in batch
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all" * 10)
    with pytest.raises(shardstream.CorruptError, match=r"junk.parquet"):
        next(iter(ShardDataset(str(tmp_path / "junk.parquet"), fields=["id"], batch_size=2)))
    with pytest.raises(shardstream.ConfigError, match=r"'missing' is not in the first sample \('part-0/0+'"):
        next(iter(ShardDataset(os.path.join(pq_dir, "part-0.parquet"), fields=["id", "missing"],
                               batch_size=2, shuffle=False)))
    # A file of the set without a column the others have: the row is named.
    d = tmp_path / "set"
    d.mkdir()
    pq.write_table(table(0, 10), d / "a.parquet")
    pq.write_table(table(10, 20).drop_columns(["big"]), d / "b.parquet")
    with pytest.raises(shardstream.Error, match=r"b/0+\d+.*'big'|'big'.*b/0+\d+"):
        list(ShardDataset(str(d), fields=["id", "big"], batch_size=2, shuffle=False))
    ds = ShardDataset(str(d), fields=["id", "big"], batch_size=2, shuffle=False,
                      error_policy="skip_sample")
    assert sorted(int(x) for b in ds for x in b["id"]) == list(range(10))
    assert ds.stats()["skipped_samples"] == 10
