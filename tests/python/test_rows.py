"""JSON Lines files read as rows: plain, gzip and zstd files give the rows that
Hugging Face `datasets` gives for the same files, field by field; the plan splits
them exactly once over 2 ranks x 2 DataLoader workers with a resume; a text
column is tokenized on the fly by a Python callable in the DataLoader workers and
packed; a prefix on (moto's) S3 is read through the cache; bad lines name the
file, line and byte, and the skip policies count them."""

import collections
import gzip
import json
import os

import pytest
import zstandard
from torchdata.stateful_dataloader import StatefulDataLoader

import shardstream
from resume_check import delivered_over_two_ranks
from shardstream.torch import ShardDataset, passthrough

N = 120  # rows over three files


def row(i):
    return {"id": i, "text": f"row {i}: \"quoted\" é \u2603 {'x' * (i % 13)}", "score": i / 4 + 0.5,
            "meta": {"tags": ["a", str(i)], "ok": i % 2 == 0}, "label": -i}


@pytest.fixture(scope="module")
def rows_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rows")
    lines = [json.dumps(row(i), ensure_ascii=i % 2 == 0) + "\n" for i in range(N)]
    third = N // 3
    with open(d / "a.jsonl", "w") as f:
        f.write("".join(lines[:third]))
    with gzip.open(d / "b.jsonl.gz", "wt") as f:
        f.write("".join(lines[third:2 * third]))
    with open(d / "c.jsonl.zst", "wb") as f:
        f.write(zstandard.ZstdCompressor().compress("".join(lines[2 * third:]).encode()))
    return str(d)


def test_rows_match_hugging_face_datasets(rows_dir):
    datasets = pytest.importorskip("datasets")
    files = sorted(os.path.join(rows_dir, n) for n in os.listdir(rows_dir) if ".jsonl" in n
                   and not n.endswith(".idx"))
    hf = {r["id"]: r for r in datasets.load_dataset("json", data_files=files, split="train",
                                                    streaming=True)}
    assert len(hf) == N
    ds = ShardDataset(rows_dir, batch_size=8, shuffle=False)
    got = 0
    for b in ds:
        for k in range(len(b["id"])):
            i = int(b["id"][k])
            want = hf[i]
            assert b["text"][k] == want["text"]
            assert int(b["label"][k]) == want["label"]
            assert b["score"][k] == pytest.approx(want["score"])
            assert b["meta"][k] == want["meta"]
            got += 1
    assert got == N


def make_ds(path, rank, **kw):
    return ShardDataset(path, fields=["id"], batch_size=4, seed=3, shuffle_buffer=16,
                        rank=rank, world_size=2, **kw)


def test_two_ranks_two_workers_resume_exactly_once(rows_dir):
    delivered = delivered_over_two_ranks(lambda rank: make_ds(rows_dir, rank), "id", 3)
    counts = collections.Counter(delivered)
    assert set(counts) == set(range(N))
    assert max(counts.values()) == 1
    # The row counts came from indexes built beside the files, once.
    assert os.path.exists(os.path.join(rows_dir, "a.jsonl.idx"))


def byte_tokenizer(text):
    return list(text.encode())


def test_text_tokenized_in_workers_and_packed(rows_dir):
    ds = ShardDataset(rows_dir, tokens={"field": "text", "tokenizer": byte_tokenizer, "seq_len": 64,
                                        "eod_token": 0, "equal_batches": False},
                      batch_size=4, seed=5, drop_last=False)
    sdl = StatefulDataLoader(ds, batch_size=None, num_workers=2, collate_fn=passthrough)
    got = collections.Counter()
    for b in sdl:
        t = b["tokens"]
        assert tuple(t.shape)[1] == 64
        got.update(int(x) for x in t.flatten() if int(x) != 0)
    want = collections.Counter(x for i in range(N) for x in row(i)["text"].encode())
    # Every document's tokens; packing cuts the last partial row of each worker at most.
    missing = want - got
    assert not got - want
    assert sum(missing.values()) <= 2 * 64, sum(missing.values())
    with pytest.raises(TypeError):
        len(ds)


def test_tokenizer_results_and_failures(tmp_path, rows_dir):
    class Encoding:  # as tokenizers.Encoding
        def __init__(self, ids):
            self.ids = ids
    import numpy as np
    for tok in (lambda t: Encoding([1, 2, 3]), lambda t: {"input_ids": [4, 5]},
                lambda t: np.array([6, 7], dtype=np.int64)):
        ds = ShardDataset(rows_dir, tokens={"field": "text", "tokenizer": tok, "seq_len": 8,
                                            "equal_batches": False}, batch_size=2)
        assert next(iter(ds))["tokens"].shape == (2, 8)
    def boom(text):
        raise ValueError("no vocabulary")
    ds = ShardDataset(rows_dir, tokens={"field": "text", "tokenizer": boom, "seq_len": 8},
                      batch_size=2, error_policy="skip_sample")
    with pytest.raises(shardstream.ConfigError, match=r"tokenizing field 'text' of sample '\w+/0+\d+'.*no vocabulary"):
        next(iter(ds))
    # Text that is not UTF-8 is damaged data: skipped and counted under skip_sample.
    bad = tmp_path / "utf8.jsonl"
    bad.write_bytes(b'{"text": "ok"}\n{"text": "\xff\xfe"}\n{"text": "fine"}\n')
    ds = ShardDataset(str(bad), tokens={"field": "text", "tokenizer": byte_tokenizer, "seq_len": 4},
                      batch_size=1, error_policy="skip_sample", shuffle=False, drop_last=False)
    got = [int(x) for b in ds for x in b["tokens"].flatten() if int(x) != 0]
    assert bytes(got) == b"okfine"
    assert ds.stats()["skipped_samples"] == 1
    ds = ShardDataset(rows_dir, tokens={"field": "text", "tokenizer": lambda t: t, "seq_len": 8},
                      batch_size=2)
    with pytest.raises(shardstream.ConfigError, match="returned text, not token ids"):
        next(iter(ds))
    # Text without a tokenizer, and equal batches that cannot be counted, say what to do.
    with pytest.raises(shardstream.ConfigError, match="give a tokenizer"):
        next(iter(ShardDataset(rows_dir, tokens={"field": "text", "seq_len": 8}, batch_size=2)))
    ds = ShardDataset(rows_dir, tokens={"field": "text", "tokenizer": byte_tokenizer, "seq_len": 8},
                      batch_size=2, rank=0, world_size=2)
    with pytest.raises(shardstream.ConfigError, match="equal_batches=false"):
        next(iter(ds))


def test_from_s3_through_the_cache(rows_dir, tmp_path, moto_s3):
    moto_s3.create_bucket(Bucket="data")
    for name in os.listdir(rows_dir):
        if not name.endswith(".idx"):
            moto_s3.upload_file(os.path.join(rows_dir, name), "data", f"rows/{name}")
    ds = ShardDataset("s3://data/rows/", fields=["id", "text"], batch_size=8, seed=1,
                      cache_dir=str(tmp_path / "cache"), cache_limit="1GB")
    for epoch in range(2):
        ds.set_epoch(epoch)
        assert sorted(int(x) for b in ds for x in b["id"]) == list(range(N))
    assert ds.stats()["cache_hits"] > 0
    # One remote .jsonl: rows, by its first line (no manifest's keys in it).
    ds = ShardDataset("s3://data/rows/a.jsonl", fields=["id"], batch_size=8)
    assert sorted(int(x) for b in ds for x in b["id"]) == list(range(N // 3))


def test_a_manifest_jsonl_is_still_a_manifest(tmp_path):
    with shardstream.ShardWriter(str(tmp_path / "t"), max_samples=5) as w:
        for i in range(12):
            w.write({"__key__": f"k{i:03d}", "cls": i})
    os.rename(tmp_path / "t" / "manifest.jsonl", tmp_path / "t" / "list.jsonl")
    ds = ShardDataset(str(tmp_path / "t" / "list.jsonl"), fields=["cls"], batch_size=4)
    assert sorted(int(x) for b in ds for x in b["cls"]) == list(range(12))


def test_bad_lines_name_file_line_and_byte(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": 0}\n{"id": 1,}\n{"id": 2}\n[3]\n{"id": 4}\n')
    with pytest.raises(shardstream.CorruptError, match=r"bad.jsonl, line 2 \(byte 19\): not a JSON object"):
        list(ShardDataset(str(p), fields=["id"], batch_size=1, shuffle=False))
    ds = ShardDataset(str(p), fields=["id"], batch_size=1, shuffle=False, error_policy="skip_sample",
                      learn_sample_counts=False)
    assert [int(b["id"][0]) for b in ds] == [0, 2, 4]
    assert ds.stats()["skipped_samples"] == 2
    # A missing column is named with the row's key.
    q = tmp_path / "miss.jsonl"
    q.write_text('{"id": 0, "text": "a"}\n{"id": 1}\n')
    with pytest.raises(shardstream.Error, match=r"miss/000000001"):
        list(ShardDataset(str(q), fields=["id", "text"], batch_size=1, shuffle=False))
