"""Ranged parts from Python: the options, the counters in transfer_stats(), stats() and the
Prometheus text, and a data set read exactly once in parts through resets and a 503 storm,
from our fault-injecting server on loopback."""

import json
import os
import sys
import time
import urllib.request

import numpy as np
import pytest

import shardstream
from conftest import HERE, line_server
from shardstream.torch import ShardDataset

SERVER = os.path.join(HERE, "..", "servers", "http_server.py")


@pytest.fixture
def small_parts(monkeypatch):
    saved = shardstream.transfer_options()
    monkeypatch.setattr(shardstream.transfer, "_explicit", set())
    shardstream.set_transfer_options(part_size="64KiB", parts_per_stream=4)
    yield
    shardstream._core.set_transfer_options(saved)  # as it was, not marked as set


def test_each_process_of_a_node_takes_its_share_of_the_budget(small_parts, monkeypatch, manifest):
    lone = shardstream.transfer_options()
    assert shardstream.transfer.share_node_budget(1)["max_connections"] == lone["max_connections"]
    eight = shardstream.transfer.share_node_budget(8 * 2)  # 8 ranks x 2 DataLoader workers
    assert eight["max_connections"] == 256 // 16
    assert eight["max_bytes_in_flight"] == (2 << 30) // 16
    assert eight["initial_host_connections"] <= eight["max_connections"]
    assert shardstream.transfer.share_node_budget(1000)["max_connections"] == 8  # the least
    # shardstream.torch shares it for the ranks of the node it starts a loader in.
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    next(iter(ShardDataset(manifest, fields=["tokens.npy"], batch_size=4)))
    assert shardstream.transfer_options()["max_connections"] == 256 // 32
    # What the user set stays: by call, or by the environment.
    shardstream.set_transfer_options(max_connections=100)
    next(iter(ShardDataset(manifest, fields=["tokens.npy"], batch_size=4)))
    assert shardstream.transfer_options()["max_connections"] == 100
    monkeypatch.setattr(shardstream.transfer, "_explicit", set())
    monkeypatch.setenv("SHARDSTREAM_MAX_CONNECTIONS", "40")
    assert shardstream.transfer.share_node_budget(64)["max_connections"] == 100


def test_options_take_sizes_and_refuse_unknown_keys(small_parts):
    assert shardstream.transfer_options()["part_size"] == 64 << 10
    assert shardstream.transfer_options()["parts_per_stream"] == 4
    assert shardstream.transfer_options()["host_stall_s"] == 30  # the default
    with pytest.raises(ValueError, match="unknown option 'parts'"):
        shardstream.set_transfer_options(parts=3)
    with pytest.raises(shardstream.ConfigError):
        shardstream.set_transfer_options(part_size="lots")
    assert shardstream.transfer_options()["part_size"] == 64 << 10  # nothing half-applied


def post_faults(base, rule):
    """Adds fault rules (one or a list) to the test server at `base`."""
    req = urllib.request.Request(base + "/_control/faults", data=json.dumps(rule).encode(),
                                 method="POST")
    urllib.request.urlopen(req).read()


def test_a_data_set_in_parts_through_faults_exactly_once(small_parts, tmp_path):
    root = tmp_path / "root"
    n, seq = 400, 1024  # 4 KiB of tokens a sample: 8 shards of about 200 KiB, 4 parts each
    with shardstream.ShardWriter(str(root), max_samples=50) as w:
        for i in range(n):
            w.write({"__key__": f"s{i:06d}", "tokens.npy": np.full(seq, i, dtype=np.int32)})
    with line_server([sys.executable, SERVER, "--root", str(root)]) as (_, words):
        base = f"http://127.0.0.1:{words[0]}"

        post_faults(base, [{"kind": "drop", "random": True, "count": 10},
               {"kind": "status", "code": 503, "count": 5}])
        before = shardstream.transfer_stats()
        ds = ShardDataset(base + "/manifest.jsonl", fields=["tokens.npy"], batch_size=16)
        seen = []
        for batch in ds:
            tokens = batch["tokens.npy"].numpy()
            ids = [int(k[1:]) for k in batch["__key__"]]
            assert all((tokens[j] == i).all() for j, i in enumerate(ids))
            seen += ids
        assert sorted(seen) == list(range(n))
        after = shardstream.transfer_stats()
        assert after["parted_streams"] - before["parted_streams"] == 8
        assert after["parts"] - before["parts"] >= 8 * 3
        assert after["throttles"] - before["throttles"] == 5
        # Every 503 and the resets that hit a shard (some hit the manifest, through another path).
        assert after["retries"] - before["retries"] > 5
        # A hedged or cancelled part may still be closing its connection when the last batch is out;
        # none may stay open.
        deadline = time.monotonic() + 5
        while shardstream.transfer_stats()["connections"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert shardstream.transfer_stats()["connections"] == 0
        assert ds.stats()["transfer"]["parts"] == after["parts"]
        text = shardstream.metrics.to_prometheus({"transfer": after})
        assert f"shardstream_transfer_parts_total {after['parts']}" in text
        assert "# TYPE shardstream_transfer_connections gauge" in text


def test_the_watchdog_reports_a_server_that_stops_sending(tmp_path):
    root = tmp_path / "root"
    with shardstream.ShardWriter(str(root), max_samples=50) as w:
        for i in range(150):
            w.write({"__key__": f"s{i:06d}", "tokens.npy": np.full(1024, i, dtype=np.int32)})
    shard = sorted(p.name for p in root.glob("*.tar"))[1]
    with line_server([sys.executable, SERVER, "--root", str(root)]) as (_, words):
        base = f"http://127.0.0.1:{words[0]}"

        # Shard 1 stops for 4 s part way (fewer than the transfer engine's stall_s: it resumes).
        stall = {"kind": "stall", "after": 60000, "seconds": 4, "path": "/" + shard, "count": -1}
        post_faults(base, stall)
        loader = shardstream.Loader(base + "/manifest.jsonl", fields=["tokens.npy"], batch_size=10,
                                    shuffle=False, watchdog_s=1)
        keys = []
        for batch in loader:
            keys += batch["__key__"]
        assert sorted(keys) == [f"s{i:06d}" for i in range(150)]  # nothing lost to the wait
        st = loader.stats()
        assert st["watchdog_reports"] >= 1
        report = st["watchdog_report"]
        assert "no batch for" in report and f"({base}/{shard})" in report, report
        assert "transfer: " in report and " connections open" in report, report
        assert st["waiting_seconds"] == 0
        assert "shardstream_loader_watchdog_reports_total" in shardstream.metrics.to_prometheus(st)

        # With watchdog_error the wait is next()'s error instead, naming the shard.
        post_faults(base, stall)
        loader = shardstream.Loader(base + "/manifest.jsonl", fields=["tokens.npy"], batch_size=10,
                                    shuffle=False, watchdog_s=1, watchdog_error=True)
        with pytest.raises(shardstream.UnavailableError, match=f"reading shard 1 \\({base}/{shard}"):
            for _ in loader:
                pass
        loader.close()
