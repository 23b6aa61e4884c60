"""shardstream.ray on a local Ray cluster: ShardSink writes shards, .idx sidecars and a
manifest (ntokens included) from a Ray Dataset, which the Loader reads back, every row once;
an earlier run's output is refused or replaced; bad rows fail naming the task and row, and
leave no manifest."""

import io
import json
import os
import tarfile
import traceback

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra (shardstream[ray])")

import shardstream
from shardstream.ray import ShardSink


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()


def rows(n=400):
    return [{"__key__": f"d{i:05d}", "tokens.npy": (np.arange(i % 37 + 1) + i).astype(np.int32),
             "cls": i % 7, "txt": f"document {i}"} for i in range(n)]


def manifest_of(folder):
    with open(folder / "manifest.jsonl") as f:
        return [json.loads(line) for line in f]


def failure_text(excinfo):
    return "".join(traceback.format_exception(excinfo.value))


def test_a_key_made_by_a_map_fused_into_the_write_is_taken(cluster, tmp_path):
    # Ray fuses the map into the write tasks and hands the sink the schema from before it.
    ds = ray.data.from_items([{"text": f"t{i}", "label": i % 3} for i in range(50)])
    ds.map(lambda r: {"__key__": r["text"], "txt": r["text"], "cls": r["label"]}).write_datasink(
        ShardSink(tmp_path / "out"))
    assert sum(e["nsamples"] for e in manifest_of(tmp_path / "out")) == 50


def test_a_dataset_is_written_as_shards_and_read_back_every_row_once(cluster, tmp_path):
    out = tmp_path / "out"
    ray.data.from_items(rows(), override_num_blocks=4).write_datasink(
        ShardSink(out, shard_size="16KiB"))
    entries = manifest_of(out)
    assert sum(e["nsamples"] for e in entries) == 400
    parts = {e["url"].split("/")[0] for e in entries}
    assert len(parts) >= 2 and all(p.startswith("part-") for p in parts), parts
    assert len(entries) > len(parts)  # several shards per task at 16 KiB
    for e in entries:
        shard = out / e["url"]
        assert shard.stat().st_size == e["size"] and (out / (e["url"] + ".idx")).exists()
        # ntokens: the lengths of the shard's own token arrays, read from the tar itself.
        with tarfile.open(shard) as t:
            lengths = [len(np.load(io.BytesIO(t.extractfile(m).read()))) for m in t.getmembers()
                       if m.name.endswith(".tokens.npy")]
        assert len(lengths) == e["nsamples"] and e["ntokens"] == sum(lengths), e
    assert not list(out.glob("part-*/part.jsonl"))  # the job's manifest is the only one
    with shardstream.Loader(str(out / "manifest.jsonl"), mode="eval", batch_size=64,
                            fields=["cls", "txt"]) as loader:
        got = {}
        for b in loader:
            for k, c, t in zip(b["__key__"], b["cls"], b["txt"]):
                assert k not in got
                got[k] = (int(c), t)
    assert got == {f"d{i:05d}": (i % 7, f"document {i}") for i in range(400)}
    # Token batches read it without an indexing pass, equal batches over 2 ranks.
    counts = []
    for rank in range(2):
        with shardstream.Loader(str(out / "manifest.jsonl"), batch_size=4, rank=rank,
                                world_size=2, tokens={"field": "tokens.npy", "seq_len": 32,
                                                      "equal_batches": True}) as loader:
            counts.append(sum(1 for _ in loader))
    assert counts[0] == counts[1] > 0


def test_an_earlier_output_is_refused_or_replaced(cluster, tmp_path):
    out = tmp_path / "out"
    ds = ray.data.from_items(rows(120), override_num_blocks=2)
    ds.write_datasink(ShardSink(out, shard_size="8KiB"))
    first = manifest_of(out)
    with pytest.raises(Exception) as e:
        ds.write_datasink(ShardSink(out))
    assert "manifest.jsonl exists" in failure_text(e) and "overwrite=True" in failure_text(e)
    assert manifest_of(out) == first
    # A run killed before its manifest left a part behind; overwrite clears it.
    (out / "part-00077").mkdir()
    (out / "part-00077" / "shard-000000.tar").write_bytes(b"junk")
    ray.data.from_items(rows(50), override_num_blocks=1).write_datasink(
        ShardSink(out, overwrite=True))
    assert not (out / "part-00077").exists()
    assert sum(e["nsamples"] for e in manifest_of(out)) == 50
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("part-")) == \
        sorted({e["url"].split("/")[0] for e in manifest_of(out)})


class Opaque:
    """A value no shard field can hold."""


@pytest.mark.parametrize("case", ["no key", "duplicate key", "unsupported value"])
def test_bad_rows_fail_naming_the_task_and_row_and_leave_no_manifest(cluster, tmp_path, case):
    out = tmp_path / "out"
    data = rows(30)
    if case == "no key":
        for r in data:
            del r["__key__"]
        want = "no key column '__key__'"
    elif case == "duplicate key":
        data[12]["__key__"] = data[3]["__key__"]
        want = "row 12: key 'd00003' again (first at row 3 of this task)"
    else:
        data[7]["cls"] = Opaque()
        want = "row 7: sample 'd00007', field 'cls': cannot store a"
    with pytest.raises(Exception) as e:
        ray.data.from_items(data, override_num_blocks=1).write_datasink(ShardSink(out))
    assert want in failure_text(e), failure_text(e)[-3000:]
    assert not (out / "manifest.jsonl").exists()
    assert not list(out.glob("part-*/*.tar"))


def test_a_folder_or_s3_but_no_other_scheme(tmp_path):
    with pytest.raises(shardstream.ConfigError, match="a local folder .* or s3://"):
        ShardSink("gs://bucket/set/")
    assert ShardSink(f"file://{tmp_path}/x").path == f"{tmp_path}/x"
    assert ShardSink("s3://bucket/set/").path == "s3://bucket/set"


@pytest.fixture(scope="module")
def written(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("ray") / "set"
    ray.data.from_items(rows(), override_num_blocks=4).write_datasink(
        ShardSink(out, shard_size="16KiB"))
    return out


def test_read_shards_gives_every_sample_decoded_one_task_per_shard(written, tmp_path):
    from shardstream.ray import read_shards
    entries = manifest_of(written)
    ds = read_shards(written / "manifest.jsonl")
    got = ds.take_all()
    assert len(got) == 400 and len({r["__key__"] for r in got}) == 400
    for r in got:
        i = int(r["__key__"][1:])
        np.testing.assert_array_equal(r["tokens.npy"], (np.arange(i % 37 + 1) + i).astype(np.int32))
        assert r["cls"] == i % 7 and r["txt"] == f"document {i}"
    assert {r["__url__"] for r in got} == {str(written / e["url"]) for e in entries}
    assert ds.materialize().num_blocks() >= len(entries)
    # Many batches per shard, each block a copy: the Loader's pooled slots are never held.
    small = read_shards(written / "manifest.jsonl", rows_per_block=2).take_all()
    assert sorted(r["__key__"] for r in small) == sorted(r["__key__"] for r in got)
    assert all(r["cls"] == int(r["__key__"][1:]) % 7 for r in small)
    # A read_shards output rewritten under another key column keeps that key.
    again = tmp_path / "again"
    ray.data.from_items([dict(r, doc=f"x{r['__key__']}") for r in got[:40]]).write_datasink(
        ShardSink(again, key="doc"))
    with shardstream.Loader(str(again / "manifest.jsonl"), mode="eval", batch_size=8,
                            fields=["txt"]) as loader:
        keys = [k for b in loader for k in b["__key__"]]
    assert sorted(keys) == sorted(f"x{r['__key__']}" for r in got[:40])
    raw = read_shards(written / "manifest.jsonl", fields=["txt", "cls"], decode=False).take(3)
    assert all(isinstance(r["txt"], bytes) and isinstance(r["cls"], bytes) for r in raw)
    assert all(set(r) == {"__key__", "__url__", "txt", "cls"} for r in raw)


def test_read_shards_fails_naming_a_corrupt_shard_or_skips_it_when_asked(written, tmp_path):
    import shutil
    from shardstream.ray import read_shards
    bad = tmp_path / "bad"
    shutil.copytree(written, bad)
    victim = manifest_of(bad)[1]["url"]
    data = bytearray((bad / victim).read_bytes())
    data[100:612] = b"\xff" * 512          # the first header's checksum no longer holds
    (bad / victim).write_bytes(bytes(data))
    with pytest.raises(Exception) as e:
        read_shards(bad / "manifest.jsonl", fields=["txt"]).take_all()
    assert victim in failure_text(e), failure_text(e)[-3000:]
    kept = read_shards(bad / "manifest.jsonl", fields=["txt"], error_policy="skip_shard").take_all()
    n = manifest_of(bad)[1]["nsamples"]
    assert len(kept) == 400 - n and not any(r["__url__"].endswith(victim) for r in kept)


def test_read_shards_takes_a_remote_manifest(written, tmp_path):
    # The manifest and the shards over HTTP: the manifest through the Loader's sources, each
    # read task streaming its shard from the server.
    import subprocess
    import sys
    from shardstream.ray import read_shards
    server = os.path.join(os.path.dirname(__file__), "..", "servers", "http_server.py")
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, server, "--root", str(written), "--log", str(log)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().split()[1])
        got = read_shards(f"http://127.0.0.1:{port}/manifest.jsonl", fields=["cls"]).take_all()
        assert sorted(r["__key__"] for r in got) == [f"d{i:05d}" for i in range(400)]
        assert all(r["cls"] == int(r["__key__"][1:]) % 7 for r in got)
        assert all(r["__url__"].startswith(f"http://127.0.0.1:{port}/part-") for r in got)
        with pytest.raises(shardstream.NotFoundError, match="nope.jsonl"):
            read_shards(f"http://127.0.0.1:{port}/nope.jsonl")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    served = {json.loads(line)["path"] for line in log.read_text().splitlines()}
    assert {"/" + e["url"] for e in manifest_of(written)} <= served


# -- text_to_shards(engine="ray") -------------------------------------------------------------

def converted_files(out):
    return sorted(n for n in os.listdir(out) if not n.startswith("."))


def assert_same_bytes(a, b):
    names = converted_files(a)
    assert names == converted_files(b) and "manifest.jsonl" in names
    for n in names:
        with open(os.path.join(a, n), "rb") as fa, open(os.path.join(b, n), "rb") as fb:
            assert fa.read() == fb.read(), n


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory):
    from test_convert import documents, write_jsonl, write_parquet
    d = tmp_path_factory.mktemp("text")
    texts = [documents(150, s) for s in range(3)]
    return [write_jsonl(str(d / "a.jsonl"), texts[0]),
            write_jsonl(str(d / "b.jsonl.gz"), texts[1]),
            write_parquet(str(d / "c.parquet"), texts[2])], texts


@pytest.mark.parametrize("parallel", ["files", "documents"])
def test_text_converted_on_ray_is_byte_identical_to_one_machine(cluster, text_corpus, tmp_path,
                                                                parallel):
    from shardstream import convert
    from test_convert import byte_tokenize
    paths, _ = text_corpus
    one = convert.text_to_shards(paths, tmp_path / "one", byte_tokenize, processes=1,
                                 max_bytes="8KB")
    on_ray = convert.text_to_shards(paths, tmp_path / "ray", byte_tokenize, engine="ray",
                                    parallel=parallel, max_bytes="8KB")
    assert on_ray["engine"] == "ray" and on_ray["parallel"] == parallel
    assert on_ray["processes"] == 2  # the cluster's CPUs
    assert on_ray["documents"] == one["documents"] > 400 and on_ray["shards"] >= 3
    assert_same_bytes(tmp_path / "one", tmp_path / "ray")


def test_an_image_folder_converted_on_ray_is_byte_identical_to_one_machine(cluster, tmp_path):
    from shardstream import convert
    from test_image_folder import make_tree
    images = make_tree(str(tmp_path / "train"), per_class=20)
    one = convert.images_to_shards(tmp_path / "train", tmp_path / "one", max_bytes="32KiB",
                                   processes=1)
    on_ray = convert.images_to_shards(tmp_path / "train", tmp_path / "ray", max_bytes="32KiB",
                                      engine="ray")
    assert on_ray["engine"] == "ray" and on_ray["processes"] == 2
    assert on_ray["images"] == one["images"] == len(images) and on_ray["shards"] >= 4
    assert_same_bytes(tmp_path / "one", tmp_path / "ray")


def test_a_data_set_converted_on_ray_with_a_factory_is_byte_identical(cluster, tmp_path):
    datasets = pytest.importorskip("datasets")
    from shardstream import convert
    from test_convert import byte_tokenize, documents, make_byte_tokenizer
    ds = datasets.Dataset.from_dict({"text": documents(3000, 7)})
    one = convert.text_to_shards(ds, tmp_path / "one", byte_tokenize, processes=1,
                                 max_bytes="64KB")
    s = convert.text_to_shards(ds, tmp_path / "ray", tokenizer_factory=make_byte_tokenizer,
                               engine="ray", max_bytes="64KB")
    assert s["parallel"] == "documents" and s["documents"] == one["documents"] > 2500
    assert_same_bytes(tmp_path / "one", tmp_path / "ray")


def test_bad_input_and_a_lost_worker_on_ray_name_the_file_and_leave_nothing(cluster, text_corpus,
                                                                          tmp_path):
    from shardstream import convert
    from test_convert import byte_tokenize, die_tokenize, write_jsonl
    paths, _ = text_corpus
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "broken\n')
    with pytest.raises(shardstream.CorruptError, match=r"bad\.jsonl line 2"):
        convert.text_to_shards([paths[0], str(bad)], tmp_path / "out1", byte_tokenize,
                               engine="ray")
    assert not (tmp_path / "out1").exists()
    dies = write_jsonl(str(tmp_path / "dies.jsonl"), ["a", "die", "b"])
    with pytest.raises(shardstream.Error, match=r"Ray worker died.*dies\.jsonl"):
        convert.text_to_shards([paths[0], dies], tmp_path / "out2", die_tokenize, engine="ray",
                               parallel="files")
    assert not (tmp_path / "out2").exists()
    with pytest.raises(shardstream.ConfigError, match="engine 'spark'"):
        convert.text_to_shards(paths, tmp_path / "out3", byte_tokenize, engine="spark")


def test_a_lambda_tokenizer_travels_to_ray_by_value(cluster, text_corpus, tmp_path):
    # A process pool needs an importable function; Ray's cloudpickle sends a lambda by value.
    from shardstream import convert
    from test_convert import byte_tokenize
    paths, _ = text_corpus
    convert.text_to_shards(paths[:1], tmp_path / "one", byte_tokenize, processes=1)
    convert.text_to_shards(paths[:1], tmp_path / "ray", lambda t: list(t.encode("utf-8")),
                           engine="ray", parallel="documents")
    assert_same_bytes(tmp_path / "one", tmp_path / "ray")


def test_a_write_task_killed_midway_is_retried_and_leaves_no_duplicate_shards(cluster, tmp_path):
    # The first attempt of the task holding row 250 dies with its process after writing some
    # shards of its part; Ray runs the task again, which rewrites that part from the start.
    marker = str(tmp_path / "died")

    def die_once(row):
        if row["__key__"] == "d00250" and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return row

    ray.data.from_items(rows(), override_num_blocks=4).map(die_once).write_datasink(
        ShardSink(tmp_path / "out", shard_size="4KiB"))
    assert os.path.exists(marker), "a task died"
    entries = manifest_of(tmp_path / "out")
    urls = [e["url"] for e in entries]
    assert len(urls) == len(set(urls))
    on_disk = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").glob("part-*/*.tar"))
    assert on_disk == sorted(urls), "no shard of the dead attempt is left beside the manifest's"
    with shardstream.Loader(str(tmp_path / "out"), mode="eval", batch_size=64,
                            fields=["cls"]) as loader:
        keys = [k for b in loader for k in b["__key__"]]
    assert sorted(keys) == [f"d{i:05d}" for i in range(400)]
