"""shardstream.convert.text_to_shards: JSON Lines (plain, .gz, .zst), Parquet, a
datasets.Dataset and a generator in, token shards out. Everything is read back:
the token stream through shardstream.Loader (packed rows), the samples and keys
straight from the tar files; the output must not depend on the process count,
and bad input must name the file and line and leave no manifest behind."""

import filecmp
import gzip
import io
import json
import os
import re
import tarfile

import numpy as np
import pytest

import shardstream
from shardstream import convert

EOD = 256  # not a byte value


# Module-level, so they pickle into spawn workers (they import this module).
def byte_tokenize(text):
    return list(text.encode("utf-8"))


def byte_tokenize_batch(texts):
    return [np.frombuffer(t.encode("utf-8"), np.uint8) for t in texts]


def make_byte_tokenizer():
    return byte_tokenize


class FakeEncoding:
    """What tokenizers.Tokenizer.encode returns: the ids are in .ids."""

    def __init__(self, ids):
        self.ids = ids
        self.tokens = [str(i) for i in ids]


def encoding_tokenize(text):
    return FakeEncoding(byte_tokenize(text))


def batch_encoding_tokenize(text):
    """What a transformers tokenizer returns: a mapping with input_ids."""
    return {"input_ids": byte_tokenize(text), "attention_mask": [1] * len(text.encode())}


def big_id_tokenize(text):
    return [70000 if b == ord("!") else b for b in text.encode("utf-8")]


def explode_tokenize(text):
    if text == "boom":
        raise RuntimeError("cannot tokenize this")
    return byte_tokenize(text)


def die_tokenize(text):
    if text == "die":
        os._exit(3)  # as if the kernel killed the worker
    return byte_tokenize(text)


def failing_factory():
    raise RuntimeError("no vocabulary file")


def _cannot_load():
    raise RuntimeError("this tokenizer only loads in the parent")


class LoadsOnlyHere:
    """Pickles fine, but unpickling it fails (as a function of a notebook's __main__ would)."""

    def __call__(self, text):
        return byte_tokenize(text)

    def __reduce__(self):
        return (_cannot_load, ())


def documents(n, seed):
    """Varied texts: ASCII, multi-byte UTF-8, newlines and quotes, a few empty."""
    rng = np.random.default_rng(seed)
    words = ["the", "shard", "token", "naïve", "日本語", "emoji 🙂", "a\nb", 'q"uote', "tab\t"]
    out = []
    for i in range(n):
        if i % 37 == 5:
            out.append("")
            continue
        k = int(rng.integers(1, 60))
        out.append(f"doc {seed}-{i}: " + " ".join(rng.choice(words, size=k)))
    return out


def write_jsonl(path, texts, extra=None):
    lines = []
    for i, t in enumerate(texts):
        rec = {"id": f"k{i}", "text": t, "meta": {"n": i}}
        lines.append(json.dumps(rec, ensure_ascii=(i % 2 == 0)) + "\n")
        if i == 3:
            lines.append("\n")  # blank lines are not documents
    data = "".join(lines).encode("utf-8")
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    elif path.endswith(".zst"):
        import zstandard
        # two frames: readers must go on past the first
        half = len(data) // 2
        c = zstandard.ZstdCompressor()
        data = c.compress(data[:half]) + c.compress(data[half:])
    with open(path, "wb") as f:
        f.write(data)
    return path


def write_parquet(path, texts, row_group_size=50):
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table({"id": [f"r{i}" for i in range(len(texts))], "text": texts,
                      "score": np.arange(len(texts), dtype=np.float64)})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def expected_stream(texts, eod=EOD):
    parts = [np.array(byte_tokenize(t) + [eod], np.int64) for t in texts if t]
    return np.concatenate(parts)


def loader_stream(manifest, eod=EOD):
    """The packed token stream as the Loader gives it (padding dropped)."""
    out = []
    with shardstream.Loader(manifest, tokens={"field": "tokens.npy", "seq_len": 64,
                                              "eod_token": eod},
                            batch_size=4, shuffle=False, mode="eval") as lo:
        for batch in lo:
            assert batch["tokens"].shape == (4, 64) or batch["tokens"].shape[1] == 64
            out.append(batch["tokens"][batch["doc_ids"] >= 0])
    return np.concatenate(out).astype(np.int64)


def tar_samples(out_dir):
    """(shard url, key, tokens array) of every document, in manifest order, read with
    tarfile and NumPy alone: a document alone in its member, or each document of a
    document group (tokens.npy cut at doc_offsets.npy, keys from doc_keys.txt or
    "<group key>#<i>")."""
    rows = []
    for entry in read_manifest(out_dir):
        with tarfile.open(os.path.join(out_dir, entry["url"])) as tf:
            samples = {}
            for m in tf.getmembers():
                key, field = m.name.split(".", 1)
                samples.setdefault(key, {})[field] = tf.extractfile(m).read()
            for key, fields in samples.items():
                arr = np.load(io.BytesIO(fields.pop("tokens.npy")), allow_pickle=False)
                if not fields:
                    rows.append((entry["url"], key, arr))
                    continue
                assert set(fields) <= {"doc_offsets.npy", "doc_keys.txt"}, fields
                bounds = np.load(io.BytesIO(fields["doc_offsets.npy"]), allow_pickle=False)
                assert bounds[0] == 0 and bounds[-1] == arr.size
                n = bounds.size - 1
                keys = (fields["doc_keys.txt"].decode().split("\n") if "doc_keys.txt" in fields
                        else [f"{key}#{i}" for i in range(n)])
                assert len(keys) == n
                for i in range(n):
                    rows.append((entry["url"], keys[i], arr[bounds[i]:bounds[i + 1]]))
    return rows


def read_manifest(out_dir):
    with open(os.path.join(out_dir, "manifest.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def dir_files(out_dir):
    return sorted(os.listdir(out_dir))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Four inputs: plain, gzip, zstd (two frames) JSON Lines and Parquet."""
    pytest.importorskip("zstandard")
    d = tmp_path_factory.mktemp("corpus")
    texts = [documents(180, s) for s in range(4)]
    paths = [write_jsonl(str(d / "a.jsonl"), texts[0]),
             write_jsonl(str(d / "b.jsonl.gz"), texts[1]),
             write_jsonl(str(d / "c.jsonl.zst"), texts[2]),
             write_parquet(str(d / "d.parquet"), texts[3])]
    return paths, texts


@pytest.fixture(scope="module")
def converted(corpus, tmp_path_factory):
    """The corpus converted with 1 and with 3 processes (small shards: several per input)."""
    paths, _ = corpus
    outs = {}
    for p in (1, 3):
        out = str(tmp_path_factory.mktemp(f"out{p}"))
        outs[p] = (out, convert.text_to_shards(paths, out, byte_tokenize, processes=p,
                                               max_bytes="40KB"))
    return outs


def test_files_read_back_exactly(corpus, converted):
    paths, texts = corpus
    out, summary = converted[1]
    flat = [t for ts in texts for t in ts]
    nonempty = [t for t in flat if t]
    want = expected_stream(flat)
    assert np.array_equal(loader_stream(os.path.join(out, "manifest.jsonl")), want)
    assert summary["documents"] == len(nonempty)
    assert summary["skipped"] == len(flat) - len(nonempty)
    assert summary["tokens"] == sum(len(t.encode()) for t in flat)
    assert [i["input"] for i in summary["inputs"]] == paths
    manifest = read_manifest(out)
    assert summary["shards"] == len(manifest) and summary["bytes"] == sum(m["size"] for m in manifest)
    assert all(list(m) == ["url", "size", "nsamples", "checksum", "ntokens"] for m in manifest)
    # input order, then shard order; several shards per input
    urls = [m["url"] for m in manifest]
    assert urls == sorted(urls) and {u[:10] for u in urls} == {f"part-{i:05d}" for i in range(4)}
    assert all(sum(1 for u in urls if u.startswith(f"part-{i:05d}")) > 1 for i in range(4))
    # per-shard counts match the shards' contents
    samples = tar_samples(out)
    for m in manifest:
        mine = [a for url, _, a in samples if url == m["url"]]
        assert m["nsamples"] == len(mine) and m["ntokens"] == sum(a.size for a in mine)
        assert os.path.exists(os.path.join(out, m["url"] + ".idx"))
    assert sum(m["ntokens"] for m in manifest) == summary["tokens"]
    assert sum(m["nsamples"] for m in manifest) == summary["documents"]
    # every document, int32, in document groups keyed by input number and the line (row
    # for Parquet) of their first document
    assert all(a.dtype == np.int32 and a.ndim == 1 for _, _, a in samples)
    assert [a.tolist() for _, _, a in samples] == [byte_tokenize(t) for t in nonempty]
    keys = [k for _, k, _ in samples]
    assert keys[0] == "00000-000000001#0" and keys[4] == "00000-000000001#4"
    with tarfile.open(os.path.join(out, manifest[0]["url"])) as tf:
        names = tf.getnames()
    assert names[:2] == ["00000-000000001.doc_offsets.npy", "00000-000000001.tokens.npy"]
    assert all(n.endswith((".doc_offsets.npy", ".tokens.npy")) for n in names)


def test_one_document_per_sample_layout(corpus, tmp_path):
    paths, texts = corpus
    out = str(tmp_path / "docs")
    s = convert.text_to_shards(paths, out, byte_tokenize, processes=1, max_bytes="40KB",
                               layout="documents")
    flat = [t for ts in texts for t in ts]
    assert np.array_equal(loader_stream(os.path.join(out, "manifest.jsonl")), expected_stream(flat))
    samples = tar_samples(out)
    assert [a.tolist() for _, _, a in samples] == [byte_tokenize(t) for t in flat if t]
    # one document per sample, keyed by input number and line (row for Parquet)
    keys = [k for _, k, _ in samples]
    assert keys[0] == "00000-000000001" and keys[4] == "00000-000000006"  # blank line 5 skipped
    assert keys[-1] == f"00003-{len(texts[3]):09d}"  # the last Parquet row
    assert s["documents"] == len(samples)
    with pytest.raises(shardstream.ConfigError, match="layout 'pages'"):
        convert.text_to_shards(paths, str(tmp_path / "bad"), byte_tokenize, layout="pages")


def test_same_bytes_whatever_the_process_count(converted):
    (out1, s1), (out3, s3) = converted[1], converted[3]
    assert s1["processes"] == 1 and s3["processes"] == 3
    names = dir_files(out1)
    assert names == dir_files(out3) and "manifest.jsonl" in names
    match, mismatch, errors = filecmp.cmpfiles(out1, out3, names, shallow=False)
    assert mismatch == [] and errors == [] and len(match) == len(names)
    assert not [n for n in names if n.startswith(".") or "tmp" in n]


def test_native_reader_takes_the_manifest(converted):
    out, summary = converted[1]
    # the C++ reader parses it (ntokens is an extra key, kept) and counts every sample
    with shardstream.Loader(os.path.join(out, "manifest.jsonl"), fields=["tokens.npy"],
                            batch_size=1, shuffle=False, mode="eval") as lo:
        assert lo.samples_per_epoch == summary["documents"]


def test_dataset_and_generator(tmp_path):
    datasets = pytest.importorskip("datasets")
    texts = documents(300, 7)
    ds = datasets.Dataset.from_dict({"text": texts, "other": list(range(len(texts)))})
    want = expected_stream(texts)
    outs = []
    for p in (1, 2):
        out = str(tmp_path / f"ds{p}")
        s = convert.text_to_shards(ds, out, byte_tokenize, processes=p, max_bytes="20KB")
        assert s["documents"] == sum(1 for t in texts if t) and s["inputs"][0]["input"] == "<Dataset>"
        assert np.array_equal(loader_stream(os.path.join(out, "manifest.jsonl")), want)
        outs.append(out)
    names = dir_files(outs[0])
    assert names == dir_files(outs[1])
    assert filecmp.cmpfiles(outs[0], outs[1], names, shallow=False)[1] == []

    def gen():
        for i, t in enumerate(texts):
            yield {"text": t, "id": f"g{i}"}

    out = str(tmp_path / "gen")
    s = convert.text_to_shards(gen(), out, byte_tokenize, processes=2, key_field="id",
                               max_bytes="20KB")
    assert np.array_equal(loader_stream(os.path.join(out, "manifest.jsonl")), want)
    keys = [k for _, k, _ in tar_samples(out)]
    assert keys == [f"g{i}" for i, t in enumerate(texts) if t]
    assert sum(m["ntokens"] for m in read_manifest(out)) == s["tokens"]

    # an IterableDataset (streamed; read in this process), plain strings too
    out = str(tmp_path / "iterable")
    convert.text_to_shards(ds.to_iterable_dataset(), out, byte_tokenize, processes=1)
    assert np.array_equal(loader_stream(os.path.join(out, "manifest.jsonl")), want)
    out = str(tmp_path / "strings")
    convert.text_to_shards(iter(texts), out, byte_tokenize, processes=1)
    assert np.array_equal(loader_stream(os.path.join(out, "manifest.jsonl")), want)


def test_parquet_keys_eod_and_uint16(tmp_path):
    texts = documents(120, 3)
    src = write_parquet(str(tmp_path / "in.parquet"), texts, row_group_size=17)
    out = str(tmp_path / "out")
    s = convert.text_to_shards(src, out, byte_tokenize, key_field="id", dtype="uint16",
                               append_eod=EOD, processes=1)
    samples = tar_samples(out)
    assert [k for _, k, _ in samples] == [f"r{i}" for i, t in enumerate(texts) if t]
    assert all(a.dtype == np.uint16 and a[-1] == EOD for _, _, a in samples)
    assert s["tokens"] == sum(len(t.encode()) + 1 for t in texts if t)
    # the EOD is in the data, so the Loader adds none
    assert np.array_equal(loader_stream(os.path.join(out, "manifest.jsonl"), eod=-1),
                          expected_stream(texts))


def test_tokenizer_kinds(corpus, converted, tmp_path):
    """Encoding objects (.ids), mappings with input_ids, a batched tokenizer and a
    factory give the same bytes as the plain tokenizer."""
    paths, _ = corpus
    ref, _ = converted[1]
    runs = [dict(tokenize=encoding_tokenize, processes=1),
            dict(tokenize=batch_encoding_tokenize, processes=1),
            dict(tokenize=byte_tokenize_batch, batched=True, processes=1),
            dict(tokenizer_factory=make_byte_tokenizer, processes=2),  # a file per worker
            dict(tokenize=byte_tokenize, processes=2, parallel="documents")]
    for i, kw in enumerate(runs):
        out = str(tmp_path / f"k{i}")
        convert.text_to_shards(paths, out, max_bytes="40KB", **kw)
        names = dir_files(out)
        assert names == dir_files(ref), kw
        assert filecmp.cmpfiles(ref, out, names, shallow=False)[1] == [], kw


def test_unpicklable_tokenizer(tmp_path):
    srcs = [write_jsonl(str(tmp_path / f"{i}.jsonl"), ["hello", "world"]) for i in range(2)]
    with pytest.raises(shardstream.ConfigError, match="cannot be pickled.*tokenizer_factory"):
        convert.text_to_shards(srcs, str(tmp_path / "out"), lambda s: [1, 2], processes=2)
    assert not os.path.exists(str(tmp_path / "out" / "manifest.jsonl"))
    # in one process it need not pickle
    s = convert.text_to_shards(srcs, str(tmp_path / "out"), lambda s: [1, 2], processes=1)
    assert s["tokens"] == 8


def test_overwrite_removes_stale_shards(tmp_path):
    src = write_jsonl(str(tmp_path / "in.jsonl"), [f"document {i}" for i in range(20)])
    out = str(tmp_path / "out")
    convert.text_to_shards(src, out, byte_tokenize, processes=1, max_bytes="2KB",
                           layout="documents")
    assert len(read_manifest(out)) > 2
    with pytest.raises(shardstream.ConfigError, match="already holds a manifest.jsonl"):
        convert.text_to_shards(src, out, byte_tokenize, processes=1)
    convert.text_to_shards(src, out, byte_tokenize, processes=1, overwrite=True)
    assert dir_files(out) == ["manifest.jsonl", "part-00000-000000.tar",
                              "part-00000-000000.tar.idx"]


def _bad_cases(d):
    """(inputs, keyword arguments, error class, message pattern) of each bad input."""
    import zstandard
    good = write_jsonl(os.path.join(d, "good.jsonl"), documents(50, 1))
    cases = []

    def lines_file(name, lines):
        p = os.path.join(d, name)
        with open(p, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        return p

    p = lines_file("notjson.jsonl", ['{"text": "a"}', '{"text": "b"}', '{"text": "c",', '{"text": "d"}'])
    cases.append(([good, p], {}, shardstream.CorruptError, f"{re.escape(p)} line 3: not JSON"))
    p = lines_file("nofield.jsonl", ['{"text": "a"}', '{"body": "b", "id": 1}'])
    cases.append(([good, p], {}, shardstream.ConfigError,
                  f"{re.escape(p)} line 2: no 'text' field \\(fields: 'body', 'id'\\)"))
    p = lines_file("nonstring.jsonl", ['{"text": "a"}', '', '{"text": "b"}', '{"text": 17}'])
    cases.append(([p], {}, shardstream.ConfigError,
                  f"{re.escape(p)} line 4: the text is a number, not a string"))
    p = lines_file("array.jsonl", ['["text"]'])
    cases.append(([p], {}, shardstream.ConfigError,
                  f"{re.escape(p)} line 1: expected a JSON object with 'text', got a list"))
    p = lines_file("bigid.jsonl", ['{"text": "ok"}', '{"text": "fine"}', '{"text": "no!"}'])
    for inputs in ([good, p], [p]):  # in a worker: a file per worker, then batches of one file
        cases.append((inputs, {"tokenize": big_id_tokenize, "dtype": "uint16"},
                      shardstream.ConfigError,
                      f"{re.escape(p)} line 3: token id 70000 does not fit dtype uint16 \\(0..65535\\)"))
    p = lines_file("boom.jsonl", ['{"text": "fine"}', '{"text": "boom"}'])
    for inputs in ([good, p], [p]):
        cases.append((inputs, {"tokenize": explode_tokenize}, shardstream.Error,
                      f"{re.escape(p)} line 2: the tokenizer raised RuntimeError: cannot tokenize"))
    p = lines_file("nokey.jsonl", ['{"text": "a", "id": "x"}', '{"text": "b"}'])
    cases.append(([p], {"key_field": "id"}, shardstream.ConfigError,
                  f"{re.escape(p)} line 2: no 'id' field"))
    p = lines_file("dotkey.jsonl", ['{"text": "a", "id": "x.y"}'])
    cases.append(([p], {"key_field": "id", "layout": "documents"}, shardstream.ConfigError,
                  f"{re.escape(p)} line 1: ShardWriter: sample 'x.y': .*no '\\.'"))
    p = lines_file("newlinekey.jsonl", ['{"text": "a", "id": "x"}', '{"text": "b", "id": "y\\nz"}'])
    cases.append(([p], {"key_field": "id"}, shardstream.ConfigError,
                  f"{re.escape(p)} line 2: key 'y\\\\nz' is empty or holds a line break"))
    p = lines_file("utf8.jsonl", ['{"text": "a"}'])
    with open(p, "ab") as f:
        f.write(b'{"text": "\xff\xfe"}\n')
    cases.append(([p], {}, shardstream.CorruptError, f"{re.escape(p)} line 2: not JSON"))
    p = os.path.join(d, "cut.jsonl.gz")
    with open(p, "wb") as f:
        f.write(gzip.compress(('{"text": "abc"}\n' * 5000).encode())[:-20])
    cases.append(([p], {}, shardstream.CorruptError, f"{re.escape(p)} line \\d+: damaged gzip data"))
    p = os.path.join(d, "notgzip.jsonl.gz")
    with open(p, "w") as f:
        f.write('{"text": "abc"}\n')
    cases.append(([p], {}, shardstream.CorruptError, f"{re.escape(p)} line 1: damaged gzip data"))
    p = os.path.join(d, "cut.jsonl.zst")
    with open(p, "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(('{"text": "abc"}\n' * 5000).encode())[:-9])
    cases.append(([p], {}, shardstream.CorruptError, f"{re.escape(p)} line \\d+: damaged zstd data"))
    p = os.path.join(d, "bad.parquet")
    with open(p, "wb") as f:
        f.write(b"not parquet at all" * 10)
    cases.append(([good, p], {}, shardstream.CorruptError, f"{re.escape(p)}: not a readable Parquet"))
    p = write_parquet(os.path.join(d, "nulltext.parquet"), ["a", "b", None, "d"])
    cases.append(([p], {}, shardstream.ConfigError,
                  f"{re.escape(p)} row 3: the text is a null \\(None\\), not a string"))
    cases.append(([p], {"text_field": "body"}, shardstream.ConfigError,
                  f"{re.escape(p)}: no column 'body' \\(columns: id, text, score\\)"))
    cases.append(([p], {"text_field": "score"}, shardstream.ConfigError,
                  f"{re.escape(p)}: column 'score' holds double, not strings"))
    p = lines_file("data.csv", ["text", "a"])
    cases.append(([good, p], {}, shardstream.ConfigError,
                  f"{re.escape(p)}: unsupported input file \\(supported endings: .jsonl"))
    p = os.path.join(d, "missing.jsonl")
    cases.append(([good, p], {}, shardstream.ConfigError,
                  f"{re.escape(p)}: cannot read input file: no such file"))
    cases.append((os.path.join(d, "nothing-*.jsonl"), {}, shardstream.ConfigError, "no input file matches"))
    cases.append(([good, good], {}, shardstream.ConfigError, "input file given twice"))
    if os.geteuid() != 0:  # root reads anything
        p = lines_file("secret.jsonl", ['{"text": "a"}'])
        os.chmod(p, 0)
        cases.append(([p], {}, shardstream.ConfigError, f"{re.escape(p)}: cannot read input file"))
    cases.append(([{"text": "a"}, {"text": "b"}, {"txt": "c"}], {}, shardstream.ConfigError,
                  "input record 3: no 'text' field"))
    cases.append(([{"text": "a"}, {"text": None}], {}, shardstream.ConfigError,
                  "input record 2: the text is a null \\(None\\), not a string"))
    import pyarrow as pa
    cases.append((pa.table({"text": ["a", "b"]}), {}, shardstream.ConfigError,
                  "a Table is not an iterable of records"))
    cases.append(([{"text": "a"}, 5], {}, shardstream.ConfigError,
                  "input record 2: expected a dict with 'text' \\(or a string\\), got a number"))
    return cases


@pytest.mark.parametrize("processes", [1, 2])
def test_bad_input_names_file_and_line(tmp_path, processes):
    pytest.importorskip("zstandard")
    d = str(tmp_path / "in")
    os.makedirs(d)
    for i, (inputs, kw, cls, pattern) in enumerate(_bad_cases(d)):
        in_workers = "tokenize" in kw or (isinstance(inputs, list) and len(inputs) == 2
                                          and isinstance(inputs[0], str))
        if processes == 2 and not in_workers:
            continue  # a pool per case is slow: only the cases whose error comes from a worker
        kw = dict(kw)
        tokenize = kw.pop("tokenize", byte_tokenize)
        out = str(tmp_path / f"out{i}")
        with pytest.raises(cls, match=pattern):
            convert.text_to_shards(inputs, out, tokenize, processes=processes, **kw)
        # nothing is left behind, not even the folder it made
        assert not os.path.exists(out), (pattern, os.listdir(out))


def test_tokenizer_failure_and_arguments(tmp_path):
    src = write_jsonl(str(tmp_path / "in.jsonl"), ["fine", "boom", "x"])
    with pytest.raises(shardstream.Error, match=f"{re.escape(src)} line 2: the tokenizer raised "
                                                "RuntimeError: cannot tokenize this"):
        convert.text_to_shards(src, str(tmp_path / "o1"), explode_tokenize, processes=1)
    with pytest.raises(shardstream.ConfigError, match="shape \\(1, 4\\)"):
        convert.text_to_shards(src, str(tmp_path / "o2"), lambda t: np.zeros((1, 4), np.int64),
                               processes=1)
    with pytest.raises(shardstream.ConfigError, match="float64 values, not integer"):
        convert.text_to_shards(src, str(tmp_path / "o3"), lambda t: [1.5], processes=1)
    with pytest.raises(shardstream.ConfigError, match="dtype 'int8'"):
        convert.text_to_shards(src, str(tmp_path / "o4"), byte_tokenize, dtype="int8")
    with pytest.raises(shardstream.ConfigError, match="append_eod 70000"):
        convert.text_to_shards(src, str(tmp_path / "o5"), byte_tokenize, dtype="uint16",
                               append_eod=70000)
    with pytest.raises(shardstream.ConfigError, match="exactly one of tokenize and tokenizer_factory"):
        convert.text_to_shards(src, str(tmp_path / "o6"))
    with pytest.raises(shardstream.ConfigError, match="no documents to write.*3 skipped"):
        convert.text_to_shards(src, str(tmp_path / "o7"), lambda t: [], processes=1)
    for i in range(1, 8):
        assert not os.path.exists(str(tmp_path / f"o{i}" / "manifest.jsonl"))
    # skip_empty=False keeps empty documents as empty samples
    s = convert.text_to_shards(src, str(tmp_path / "o8"), lambda t: [], processes=1,
                               skip_empty=False)
    assert s["documents"] == 3 and s["tokens"] == 0


def test_npy_bytes_match_the_writers_encoding():
    """The converter's fast .npy encoding is byte for byte ShardWriter's (encode_field)."""
    for dt in (np.uint16, np.int32, np.uint32):
        for n in (0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 54321, 100000, 1234567):
            ids = (np.arange(n) % 65536).astype(dt)
            assert convert._npy_bytes(ids) == shardstream.encode_field("tokens.npy", ids), (dt, n)


def test_worker_setup_failures_and_deaths_do_not_hang(tmp_path):
    src = write_jsonl(str(tmp_path / "in.jsonl"), ["fine", "die", "x"])
    with pytest.raises(shardstream.Error, match="tokenizer_factory raised RuntimeError: no vocabulary"):
        convert.text_to_shards(src, str(tmp_path / "o1"), tokenizer_factory=failing_factory,
                               processes=2)
    with pytest.raises(shardstream.Error, match="tokenizer_factory raised RuntimeError: no vocabulary"):
        convert.text_to_shards(src, str(tmp_path / "o2"), tokenizer_factory=failing_factory,
                               processes=1)
    with pytest.raises(shardstream.ConfigError, match="cannot unpickle the tokenizer.*only loads"):
        convert.text_to_shards(src, str(tmp_path / "o3"), LoadsOnlyHere(), processes=2)
    with pytest.raises(shardstream.Error, match=f"a worker process died .* before {re.escape(src)} "
                                                "line 1 to .* line 3 was converted"):
        convert.text_to_shards(src, str(tmp_path / "o4"), die_tokenize, processes=2)
    # a worker dies while writing a file's shards: its temporary files go too
    other = write_jsonl(str(tmp_path / "other.jsonl"), documents(400, 9))
    # (the first input not done is named: other.jsonl, or in.jsonl if other.jsonl was finished)
    with pytest.raises(shardstream.Error,
                       match=r"a worker process died .* before .*(other|in)\.jsonl was converted"):
        convert.text_to_shards([other, src], str(tmp_path / "o5"), die_tokenize, processes=2,
                               max_bytes="8KB")
    for i in range(1, 6):  # nothing left, not even the folder each made
        assert not os.path.exists(str(tmp_path / f"o{i}"))
