"""shardstream.ray on a Ray cluster of two nodes on loopback (ray.cluster_utils.Cluster, as
Ray's own tests make one: two raylets, one CPU each): text_to_shards(engine="ray") runs its
tasks on both nodes and writes the same bytes as one process; ShardSink writes from both and
read_shards reads it back on both, every row once, to a local folder and to moto's S3 (signing
enforced; every node has the credentials in its environment, as on a real cluster)."""

import os
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra (shardstream[ray])")

import shardstream
from shardstream import convert
from shardstream.ray import ShardSink, read_shards


@pytest.fixture(scope="module")
def s3():
    """moto's S3 with a bucket, and its credentials in this process's environment from before
    the cluster starts, so every node's workers have them."""
    import boto3
    from conftest import moto_s3_server
    saved = dict(os.environ)
    with moto_s3_server() as (endpoint, keys):
        os.environ.update({"AWS_ACCESS_KEY_ID": keys["access_key"],
                           "AWS_SECRET_ACCESS_KEY": keys["secret_key"],
                           "AWS_ENDPOINT_URL_S3": endpoint, "AWS_REGION": "us-east-1",
                           "AWS_EC2_METADATA_DISABLED": "true"})
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="ray-out")
        try:
            yield client
        finally:
            os.environ.clear()
            os.environ.update(saved)


@pytest.fixture(scope="module")
def two_nodes(s3):
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def marking_tokenizer(marks):
    """A byte tokenizer that leaves a file named after the node it runs on."""
    def tokenize(text):
        node = ray.get_runtime_context().get_node_id()
        path = os.path.join(marks, node)
        if not os.path.exists(path):
            open(path, "w").close()
        return list(text.encode("utf-8"))
    return tokenize


def test_text_converts_on_both_nodes_to_the_bytes_of_one_process(two_nodes, tmp_path):
    from test_convert import byte_tokenize, documents, write_jsonl
    files = [write_jsonl(str(tmp_path / f"in{i}.jsonl"), documents(400, i)) for i in range(6)]
    marks = tmp_path / "nodes"
    marks.mkdir()
    one = convert.text_to_shards(files, tmp_path / "one", byte_tokenize, processes=1,
                                 max_bytes="16KB")
    s = convert.text_to_shards(files, tmp_path / "ray", marking_tokenizer(str(marks)),
                               engine="ray", parallel="files", max_bytes="16KB")
    assert s["processes"] == 2 and s["documents"] == one["documents"] > 2000
    assert len(os.listdir(marks)) == 2, "tasks ran on both nodes"
    names = sorted(os.listdir(tmp_path / "one"))
    assert names == sorted(os.listdir(tmp_path / "ray")) and "manifest.jsonl" in names
    for n in names:
        assert (tmp_path / "one" / n).read_bytes() == (tmp_path / "ray" / n).read_bytes(), n


def test_an_image_folder_converts_on_the_cluster_to_the_bytes_pack_writes(two_nodes, tmp_path):
    import subprocess
    from conftest import cli_dir
    from test_image_folder import make_tree
    make_tree(str(tmp_path / "train"), per_class=20)
    subprocess.run([os.path.join(cli_dir(), "shardstream"), "pack", "--image-folder", "--index",
                    "--shard-size", "24KiB", str(tmp_path / "train"), str(tmp_path / "pack")],
                   check=True, capture_output=True)
    s = convert.images_to_shards(tmp_path / "train", tmp_path / "ray", max_bytes="24KiB",
                                 engine="ray")
    assert s["processes"] == 2 and s["shards"] >= 6
    for n in range(s["shards"]):
        for ext in ("", ".idx"):
            assert (tmp_path / "ray" / f"part-{n:05d}-000000.tar{ext}").read_bytes() == \
                (tmp_path / "pack" / f"shard-{n:06d}.tar{ext}").read_bytes()
    assert (tmp_path / "ray" / "classes.txt").read_bytes() == \
        (tmp_path / "pack" / "classes.txt").read_bytes()


def test_a_sink_writes_from_both_nodes_and_the_source_reads_it_back(two_nodes, tmp_path):
    rows = [{"__key__": f"r{i:05d}", "tokens.npy": np.arange(i % 50 + 1, dtype=np.int32),
             "cls": i % 5} for i in range(600)]
    ds = ray.data.from_items(rows, override_num_blocks=6)

    def where(batch):
        time.sleep(0.2)  # a block is busy long enough for the other node to take the next
        return {"node": [ray.get_runtime_context().get_node_id()]}

    # SPREAD: Ray's default packs small, quick tasks onto the node that asks, which once put
    # all six on one node here and made this precondition, not the sink, fail. The nodes are
    # gathered here, not with Dataset.unique, whose aggregation runs an actor that can hold a
    # node's only CPU while the blocks are mapped (a CI run found all six on one node again).
    # The placement is Ray's, and only a precondition here: asked again (up to 3 times) when a
    # busy machine found all six on one node anyway.
    for _ in range(3):
        nodes = {r["node"] for r in ds.map_batches(where, batch_size=None,
                                                   scheduling_strategy="SPREAD").take_all()}
        if len(nodes) == 2:
            break
    assert len(nodes) == 2, "blocks are processed on both nodes"
    ds.write_datasink(ShardSink(tmp_path / "set", shard_size="8KiB"))
    got = read_shards(tmp_path / "set" / "manifest.jsonl").take_all()
    assert sorted(r["__key__"] for r in got) == [f"r{i:05d}" for i in range(600)]
    for r in got:
        i = int(r["__key__"][1:])
        assert r["cls"] == i % 5 and len(r["tokens.npy"]) == i % 50 + 1
    # The folder is a data set as it is: every row once through the Loader.
    with shardstream.Loader(str(tmp_path / "set"), mode="eval", batch_size=50,
                            fields=["cls"]) as loader:
        keys = [k for b in loader for k in b["__key__"]]
    assert sorted(keys) == [f"r{i:05d}" for i in range(600)]


def test_a_sink_writes_to_s3_from_both_nodes_and_it_reads_back(two_nodes, s3):
    rows = [{"__key__": f"s{i:05d}", "txt": f"row {i}", "cls": i % 3} for i in range(300)]
    ds = ray.data.from_items(rows, override_num_blocks=4)
    ds.write_datasink(ShardSink("s3://ray-out/set/", shard_size="4KiB"))
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="ray-out")["Contents"])
    assert "set/manifest.jsonl" in keys
    assert not [k for k in keys if k.endswith("part.jsonl") or ".tmp" in k], keys
    shards = [k for k in keys if k.endswith(".tar")]
    assert len(shards) > 4 and all(k + ".idx" in keys for k in shards)
    got = read_shards("s3://ray-out/set/manifest.jsonl", fields=["txt", "cls"]).take_all()
    assert sorted(r["__key__"] for r in got) == [f"s{i:05d}" for i in range(300)]
    assert all(r["txt"] == f"row {int(r['__key__'][1:])}" for r in got)
    with shardstream.Loader("s3://ray-out/set/", mode="eval", batch_size=64,
                            fields=["cls"]) as loader:
        assert sorted(k for b in loader for k in b["__key__"]) == [f"s{i:05d}" for i in range(300)]
    # An earlier output is refused, or replaced whole with overwrite=True.
    with pytest.raises(Exception, match="exists .*overwrite=True"):
        ds.write_datasink(ShardSink("s3://ray-out/set/"))
    ray.data.from_items(rows[:10], override_num_blocks=1).write_datasink(
        ShardSink("s3://ray-out/set/", overwrite=True))
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="ray-out")["Contents"])
    assert keys == ["set/manifest.jsonl", "set/part-00000/shard-000000.tar",
                    "set/part-00000/shard-000000.tar.idx"], "the earlier parts are gone"
    got = read_shards("s3://ray-out/set/manifest.jsonl", fields=["cls"]).take_all()
    assert sorted(r["__key__"] for r in got) == [f"s{i:05d}" for i in range(10)]
