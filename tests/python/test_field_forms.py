"""Fields as users have them: ``.json`` as Python objects, images in several
formats under one field, and a resume state that does not care whether the
same shards are given as a manifest, a folder or a brace pattern."""

import io
import json

import numpy as np
import pytest

import shardstream
from shardstream.torch import ShardDataset

PIL = pytest.importorskip("PIL.Image")


def write_json_set(root):
    with shardstream.ShardWriter(str(root)) as w:
        for i in range(12):
            sample = {"__key__": f"k{i:03d}", "cls": i}
            if i % 3:
                sample["meta.json"] = json.dumps({"i": i, "tags": ["a", "b"][: i % 3],
                                                  "caption": "caf\u00e9"}).encode()
            w.write(sample)
    return str(root)


def test_json_fields_are_python_objects_and_absent_ones_none(tmp_path):
    root = write_json_set(tmp_path)
    lo = shardstream.Loader(root, batch_size=4, shuffle=False,
                            fields=[{"name": "meta.json", "optional": True}, "cls"])
    seen = {}
    for b in lo:
        for key, meta, present in zip(b["__key__"], b["meta.json"], b["meta.json.present"]):
            seen[key] = (meta, bool(present))
    assert len(seen) == 12
    for i in range(12):
        meta, present = seen[f"k{i:03d}"]
        if i % 3:
            assert present and meta == {"i": i, "tags": ["a", "b"][: i % 3], "caption": "caf\u00e9"}
        else:
            assert not present and meta is None
    # The text as it is, when asked.
    raw = shardstream.Loader(root, batch_size=12, shuffle=False,
                             fields=[{"name": "meta.json", "optional": True, "decode": "string"}])
    texts = next(iter(raw))["meta.json"]
    assert texts[1] == json.dumps({"i": 1, "tags": ["a"], "caption": "caf\u00e9"})
    assert texts[0] == ""


def test_broken_json_names_the_sample_and_offset_or_is_skipped(tmp_path):
    with shardstream.ShardWriter(str(tmp_path)) as w:
        for i in range(6):
            w.write({"__key__": f"k{i}", "meta.json": b'{"ok": true}' if i != 4 else b'{"ok": tru'})
    lo = shardstream.Loader(str(tmp_path), batch_size=2, shuffle=False, fields=["meta.json"])
    with pytest.raises(shardstream.CorruptError) as e:
        list(b["meta.json"] for b in lo)
    msg = str(e.value)
    assert "sample 'k4' field 'meta.json'" in msg and "not valid JSON" in msg
    assert "shard-000000.tar at offset" in msg
    skipping = shardstream.Loader(str(tmp_path), batch_size=2, shuffle=False, fields=["meta.json"],
                                  error_policy="skip_sample")
    got = [m for b in skipping for m in b["meta.json"]]
    assert got == [{"ok": True}] * 5
    assert skipping.stats()["skipped_samples"] == 1


def image_bytes(fmt, seed):
    rng = np.random.default_rng(seed)
    img = PIL.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8))
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


def test_images_in_several_formats_are_one_field(tmp_path):
    # An ImageFolder with PNGs and a WebP among JPEGs, packed as pack
    # --image-folder names them: by extension.
    formats = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}
    with shardstream.ShardWriter(str(tmp_path)) as w:
        for i in range(9):
            ext = ["jpg", "jpg", "png", "jpg", "webp", "jpg", "png", "jpg", "jpg"][i]
            w.write({"__key__": f"k{i}", ext: image_bytes(formats[ext], i), "cls": i})
    image = {"decode": "image", "size": [16, 16], "crop": "center"}
    ds = ShardDataset(str(tmp_path), batch_size=9, shuffle=False,
                      fields=[dict(image, name="jpg;png;webp", output="image"), "cls"])
    batch = next(iter(ds))
    assert tuple(batch["image"].shape) == (9, 16, 16, 3)
    assert sorted(batch["cls"].tolist()) == list(range(9))
    # One extension only: the first PNG is a clear usage error naming the fix.
    only_jpg = ShardDataset(str(tmp_path), batch_size=9, shuffle=False,
                            fields=[dict(image, name="jpg"), "cls"])
    with pytest.raises(shardstream.ConfigError, match=r'"jpg;jpeg;png;webp"'):
        next(iter(only_jpg))


def test_a_state_resumes_over_the_same_shards_as_a_folder_manifest_or_pattern(tmp_path):
    with shardstream.ShardWriter(str(tmp_path), max_samples=25) as w:
        for i in range(100):
            w.write({"__key__": f"k{i:03d}", "cls": i})
    forms = [str(tmp_path / "manifest.jsonl"), str(tmp_path),
             str(tmp_path / "shard-{000000..000003}.tar")]
    for saved in forms:
        ds = ShardDataset(saved, batch_size=10, fields=["cls"], seed=5)
        it = iter(ds)
        head = [c for _ in range(3) for c in next(it)["cls"].tolist()]
        state = ds.state_dict()
        for form in forms:
            again = ShardDataset(form, batch_size=10, fields=["cls"], seed=5)
            again.load_state_dict(state)
            rest = [c for b in again for c in b["cls"].tolist()]
            assert sorted(head + rest) == list(range(100)), (saved, form)
    # Another data set: the error says what differs.
    fewer = ShardDataset(str(tmp_path / "shard-{000000..000002}.tar"), batch_size=10,
                         fields=["cls"], seed=5)
    fewer.load_state_dict(state)
    with pytest.raises(shardstream.ConfigError,
                       match="has 4 shards and 100 samples, this one 3 shards and 75 samples"):
        next(iter(fewer))


def test_index_dir_keeps_built_indexes_out_of_the_data_folder(tmp_path):
    data, indexes = tmp_path / "data", tmp_path / "indexes"
    with shardstream.ShardWriter(str(data), max_samples=40, manifest_name="") as w:
        for i in range(200):
            w.write({"__key__": f"d{i:04d}",
                     "tokens.npy": np.arange(5 + i % 50, dtype=np.int32) + 1})
    before = sorted(p.name for p in data.iterdir())
    tokens = {"field": "tokens.npy", "seq_len": 32, "eod_token": 0}
    counts = []
    for rank in range(2):
        # Equal batches over 2 ranks need every document's token count: the
        # indexes are built (or read) for it, in index_dir.
        ds = ShardDataset(str(data), batch_size=4, tokens=tokens, rank=rank, world_size=2,
                          index_dir=str(indexes))
        counts.append(sum(1 for _ in ds))
        assert counts[-1] == len(ds)
    assert counts[0] == counts[1] > 0
    assert sorted(p.name for p in data.iterdir()) == before, "nothing written beside the shards"
    kept = sorted(p.name for p in indexes.iterdir())
    assert len(kept) == 5 and all(n.startswith("shard-") and n.endswith(".idx") for n in kept)
