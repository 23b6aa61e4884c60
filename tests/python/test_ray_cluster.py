"""shardstream.ray on a Ray cluster of two nodes on loopback (ray.cluster_utils.Cluster, as
Ray's own tests make one: two raylets, one CPU each): text_to_shards(engine="ray") runs its
tasks on both nodes and writes the same bytes as one process; ShardSink writes from both and
read_shards reads it back on both, every row once."""

import os

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra (shardstream[ray])")

import shardstream
from shardstream import convert
from shardstream.ray import ShardSink, read_shards


@pytest.fixture(scope="module")
def two_nodes():
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


def test_a_sink_writes_from_both_nodes_and_the_source_reads_it_back(two_nodes, tmp_path):
    rows = [{"__key__": f"r{i:05d}", "tokens.npy": np.arange(i % 50 + 1, dtype=np.int32),
             "cls": i % 5} for i in range(600)]
    ds = ray.data.from_items(rows, override_num_blocks=6)
    nodes = set(ds.map_batches(lambda b: {"node": [ray.get_runtime_context().get_node_id()]},
                               batch_size=None).unique("node"))
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
