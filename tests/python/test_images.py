"""Image fields end to end: real JPEG/PNG/WebP files made with Pillow, written
to real shards, decoded, cropped and resized by the loader's reader threads.

The reference for the pixels is Pillow's decode followed by the call
torchvision's resize(antialias=True) makes on a uint8 tensor:
torch.nn.functional.interpolate(mode="bilinear", antialias=True).
"""

import io
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

import shardstream
from shardstream.image import crop_box, decode_image
from shardstream.torch import ShardDataset

TRAIN = {"name": "jpg", "decode": "image", "size": [96, 112], "crop": "random_resized",
         "flip": True}


def scene(rng, h, w):
    """A natural-looking picture: gradients, discs and noise (not pure noise)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / w * 255, y / h * 255, (x + y) / (w + h) * 255], -1)
    for _ in range(8):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(5, min(h, w) / 3)
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 8, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(arr, fmt="JPEG", **kw):
    b = io.BytesIO()
    Image.fromarray(arr).save(b, fmt, **kw)
    return b.getvalue()


def write_set(root, n=120, per_shard=40, seed=0, sizes=(120, 400)):
    rng = np.random.RandomState(seed)
    images = {}
    with shardstream.ShardWriter(str(root), max_samples=per_shard) as w:
        for i in range(n):
            h, wd = rng.randint(*sizes), rng.randint(*sizes)
            jpg = encode(scene(rng, h, wd), quality=90)
            key = f"img{i:05d}"
            images[key] = jpg
            w.write({"__key__": key, "jpg": jpg, "cls": i % 10})
    return str(root / "manifest.jsonl"), images


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_set(tmp_path_factory.mktemp("images"))


def reference(jpg, top, left, h, w, size, flip=False):
    a = torch.from_numpy(np.array(Image.open(io.BytesIO(jpg)).convert("RGB"))).permute(2, 0, 1)
    a = a[:, top:top + h, left:left + w].contiguous()
    r = torch.nn.functional.interpolate(a[None], size=size, mode="bilinear", align_corners=False,
                                        antialias=True)[0]
    if flip:
        r = r.flip(-1)
    return r.permute(1, 2, 0).numpy()


def mad(a, b):
    return float(np.abs(a.astype(np.int32) - b.astype(np.int32)).mean())


def test_the_issue_call_works_as_written(data):
    manifest, images = data
    ds = ShardDataset(manifest, batch_size=64, shuffle=False, fields=[
        {"name": "jpg", "decode": "image", "size": [224, 224], "crop": "center"}, "cls"])
    batch = next(iter(ds.dataloader()))
    assert batch["jpg"].dtype == torch.uint8 and batch["jpg"].shape == (64, 224, 224, 3)
    assert batch["cls"].dtype == torch.int64 and batch["cls"].shape == (64,)
    # Each row is its sample's image, resized (shorter side 224) and center-cropped.
    for r in (0, 17, 63):
        key = batch["__key__"][r]
        img = Image.open(io.BytesIO(images[key]))
        w, h = img.size
        if w <= h:
            nw, nh = 224, int(224 * h / w)
        else:
            nw, nh = int(224 * w / h), 224
        full = reference(images[key], 0, 0, h, w, [nh, nw])
        top, left = int(round((nh - 224) / 2)), int(round((nw - 224) / 2))
        want = full[top:top + 224, left:left + 224]
        assert mad(batch["jpg"][r].numpy(), want) <= 3.0
        assert batch["cls"][r].item() == int(key[3:]) % 10


def test_crops_match_pillow_then_torchvision_resize_within_mad_3():
    # Sizes from small to 1400 px, so 1/2, 1/4 and 1/8 DCT scaling all occur.
    rng = np.random.RandomState(1)
    worst = 0.0
    for i in range(24):
        H, W = rng.randint(150, 1400), rng.randint(150, 1400)
        jpg = encode(scene(rng, H, W), quality=90)
        for k in range(4):
            t, l, h, w, f = crop_box(W, H, size=160, crop="random_resized", flip=True,
                                     key=f"{i}-{k}", seed=3)
            t, l, h, w = int(t), int(l), int(h), int(w)
            ours = decode_image(jpg, size=160, box=(t, l, h, w, f))
            worst = max(worst, mad(ours, reference(jpg, t, l, h, w, [160, 160], f)))
    assert worst <= 3.0, worst
    # PNG and WebP (lossless) through the same resampler.
    arr = scene(rng, 333, 517)
    for data in (encode(arr, "PNG"), encode(arr, "WEBP", lossless=True)):
        ours = decode_image(data, size=[100, 150], box=(20, 30, 300, 450))
        assert mad(ours, reference(data, 20, 30, 300, 450, [100, 150])) <= 1.0


def test_center_crop_is_resize_then_center_crop():
    rng = np.random.RandomState(2)
    for H, W in ((375, 500), (900, 640), (256, 256), (1200, 300)):
        jpg = encode(scene(rng, H, W), quality=92)
        ours = decode_image(jpg, size=224, crop="center", resize=256)
        if W <= H:
            nw, nh = 256, int(256 * H / W)
        else:
            nw, nh = int(256 * W / H), 256
        full = reference(jpg, 0, 0, H, W, [nh, nw])
        top, left = int(round((nh - 224) / 2)), int(round((nw - 224) / 2))
        assert mad(ours, full[top:top + 224, left:left + 224]) <= 3.0, (H, W)


def test_layout_chw_and_flip():
    rng = np.random.RandomState(3)
    jpg = encode(scene(rng, 200, 300))
    hwc = decode_image(jpg, size=[64, 80], box=(10, 20, 150, 200))
    chw = decode_image(jpg, size=[64, 80], box=(10, 20, 150, 200), layout="CHW")
    flipped = decode_image(jpg, size=[64, 80], box=(10, 20, 150, 200, True))
    assert chw.shape == (3, 64, 80)
    assert np.array_equal(chw, hwc.transpose(2, 0, 1))
    assert np.array_equal(flipped, hwc[:, ::-1])


def test_loader_pixels_are_the_keys_own_draw(data):
    # The geometry is a function of (seed, epoch, key): the loader's row for a
    # key equals decode_image with that key, in any epoch.
    manifest, images = data
    ds = ShardDataset(manifest, batch_size=16, fields=[TRAIN, "cls"], seed=9, epoch=2)
    spec = {k: v for k, v in TRAIN.items() if k not in ("name", "decode")}
    batch = next(iter(ds))
    for r, key in enumerate(batch["__key__"][:6]):
        want = decode_image(images[key], seed=9, epoch=2, key=key, **spec)
        assert np.array_equal(batch["jpg"][r].numpy(), want)
    other = decode_image(images[batch["__key__"][0]], seed=9, epoch=3, key=batch["__key__"][0],
                         **spec)
    assert not np.array_equal(batch["jpg"][0].numpy(), other)


def epoch_digest(manifest, **kw):
    ds = ShardDataset(manifest, batch_size=16, fields=[TRAIN, "cls"], seed=5, **kw)
    return [(b["__key__"], b["jpg"].numpy().tobytes(), b["cls"].tolist()) for b in ds]


def test_same_batches_for_1_2_and_4_threads(data):
    manifest, _ = data
    one = epoch_digest(manifest, reader_threads=1, open_shards=4)
    assert sum(len(k) for k, _, _ in one) == 120
    for threads in (2, 4):
        assert epoch_digest(manifest, reader_threads=threads, open_shards=4) == one


def test_resume_mid_epoch_gives_the_rest_once_with_the_same_pixels(data):
    manifest, _ = data
    # Copies: a batch's tensors view its pool slot, which goes back when dropped.
    full = {}
    for b in ShardDataset(manifest, batch_size=16, fields=[TRAIN, "cls"], seed=5):
        for k, px in zip(b["__key__"], b["jpg"].numpy()):
            full[k] = px.copy()
    ds = ShardDataset(manifest, batch_size=16, fields=[TRAIN, "cls"], seed=5)
    it = iter(ds)
    seen = []
    for _ in range(3):
        seen += next(it)["__key__"]
    state = ds.state_dict()
    del it
    again = ShardDataset(manifest, batch_size=16, fields=[TRAIN, "cls"], seed=5)
    again.load_state_dict(state)
    rest = {}
    for b in again:
        for k, px in zip(b["__key__"], b["jpg"].numpy()):
            rest[k] = px.copy()
    assert not set(seen) & set(rest)
    assert sorted(seen + list(rest)) == sorted(full)
    for k, px in rest.items():
        assert np.array_equal(px, full[k])


def normalize(sample):
    # What a user's per-sample hook might do: float CHW in [0, 1].
    sample["jpg"] = sample["jpg"].permute(2, 0, 1).float() / 255
    return sample


def test_map_hook_under_stateful_dataloader_with_two_workers(data):
    from torchdata.stateful_dataloader import StatefulDataLoader
    manifest, _ = data
    def loader():
        ds = ShardDataset(manifest, batch_size=8, fields=[TRAIN, "cls"], seed=5, map=normalize)
        return StatefulDataLoader(ds, batch_size=None, num_workers=2,
                                  multiprocessing_context="fork")
    dl = loader()
    it = iter(dl)
    seen = []
    for _ in range(5):
        b = next(it)
        assert b["jpg"].dtype == torch.float32 and b["jpg"].shape[1:] == (3, 96, 112)
        seen += b["__key__"]
    state = dl.state_dict()
    del it, dl
    dl = loader()
    dl.load_state_dict(state)
    rest = [k for b in dl for k in b["__key__"]]
    assert not set(seen) & set(rest)
    assert len(rest) == len(set(rest))
    assert len(seen) + len(rest) == 120


def write_bad(root):
    rng = np.random.RandomState(4)
    good = encode(scene(rng, 100, 120))
    bomb = encode(np.zeros((1, 1, 3), np.uint8), "PNG")
    # Patch the IHDR to declare 20000 x 20000 (the CRC is checked after the limit).
    bomb = bomb[:16] + (20000).to_bytes(4, "big") + (20000).to_bytes(4, "big") + bomb[24:]
    samples = [("a0", good), ("a1", good[: len(good) // 2]), ("a2", good), ("a3", bomb),
               ("a4", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"), ("a5", good)]
    with shardstream.ShardWriter(str(root), max_samples=100) as w:
        for key, jpg in samples:
            w.write({"__key__": key, "jpg": jpg, "cls": 1})
    return str(root / "manifest.jsonl")


def test_bad_images_raise_naming_shard_key_field_offset_or_are_skipped(tmp_path):
    manifest = write_bad(tmp_path)
    fields = [{"name": "jpg", "decode": "image", "size": 32, "crop": "center"}, "cls"]
    with pytest.raises(shardstream.CorruptError) as e:
        list(ShardDataset(manifest, batch_size=2, shuffle=False, fields=fields))
    msg = str(e.value)
    shard = tmp_path / "shard-000000.tar"
    with tarfile.open(shard) as t:
        offset = next(m.offset_data for m in t.getmembers() if m.name == "a1.jpg")
    assert "'a1'" in msg and "'jpg'" in msg and "shard-000000.tar" in msg, msg
    assert f"offset {offset}" in msg, msg
    assert e.value.offset == offset
    ds = ShardDataset(manifest, batch_size=2, shuffle=False, fields=fields,
                      error_policy="skip_sample")
    keys = [k for b in ds for k in b["__key__"]]
    assert keys == ["a0", "a2", "a5"]
    assert ds.stats()["skipped_samples"] == 3


def test_the_pixel_limit_is_configurable(tmp_path):
    rng = np.random.RandomState(5)
    jpg = encode(scene(rng, 100, 100))
    with pytest.raises(shardstream.CorruptError, match="decompression bomb"):
        decode_image(jpg, max_pixels=9999)
    assert decode_image(jpg, max_pixels=10000).shape == (100, 100, 3)


def test_ragged_images_and_ragged_arrays(tmp_path):
    rng = np.random.RandomState(6)
    shapes = [(50, 70), (64, 40), (30, 90), (81, 81)]
    with shardstream.ShardWriter(str(tmp_path), max_samples=100) as w:
        for i, (h, wd) in enumerate(shapes):
            arr = scene(rng, h, wd)
            boxes = rng.rand(i + 1, 4).astype(np.float32)
            w.write({"__key__": f"r{i}", "png": encode(arr, "PNG"), "boxes.npy": boxes})
    manifest = str(tmp_path / "manifest.jsonl")
    ds = ShardDataset(manifest, batch_size=4, shuffle=False,
                      fields=[{"name": "png", "decode": "image"},
                              {"name": "boxes.npy", "ragged": "list"}])
    b = next(iter(ds))
    assert [tuple(t.shape) for t in b["png"]] == [(h, wd, 3) for h, wd in shapes]
    assert [tuple(t.shape) for t in b["boxes.npy"]] == [(i + 1, 4) for i in range(4)]
    assert all(t.dtype == torch.float32 for t in b["boxes.npy"])
    ds = ShardDataset(manifest, batch_size=4, shuffle=False,
                      fields=[{"name": "png", "decode": "image", "ragged": "pad"},
                              {"name": "boxes.npy", "ragged": "pad"}])
    p = next(iter(ds))
    assert p["png"].shape == (4, 81, 90, 3)
    assert p["png.lengths"].tolist() == [[h, wd, 3] for h, wd in shapes]
    assert torch.equal(p["png"][1, :64, :40], b["png"][1])
    assert p["png"][1, 64:].abs().sum() == 0
    assert p["boxes.npy"].shape == (4, 4, 4)
    assert p["boxes.npy.lengths"].tolist() == [[i + 1, 4] for i in range(4)]
    # Without "ragged", differing shapes are an error that says what to do.
    ds = ShardDataset(manifest, batch_size=4, shuffle=False, fields=["boxes.npy"])
    with pytest.raises(shardstream.CorruptError, match="ragged"):
        list(ds)


def test_png_and_webp_fields_decode_in_the_loader(tmp_path):
    rng = np.random.RandomState(7)
    arrs = [scene(rng, 60 + i, 70 + i) for i in range(4)]
    with shardstream.ShardWriter(str(tmp_path), max_samples=100) as w:
        for i, a in enumerate(arrs):
            w.write({"__key__": f"p{i}", "png": encode(a, "PNG"),
                     "webp": encode(a, "WEBP", lossless=True)})
    ds = ShardDataset(str(tmp_path / "manifest.jsonl"), batch_size=4, shuffle=False, fields=[
        {"name": "png", "decode": "image", "size": 32},
        {"name": "webp", "decode": "image", "size": 32, "layout": "CHW"}])
    b = next(iter(ds))
    assert b["png"].shape == (4, 32, 32, 3) and b["webp"].shape == (4, 3, 32, 32)
    assert torch.equal(b["png"].permute(0, 3, 1, 2), b["webp"])


@pytest.mark.parametrize("field, says", [
    ({"name": "jpg", "decode": "image", "size": 32, "crop": "middle"}, "crop"),
    ({"name": "jpg", "size": 32}, "decode"),
    ({"name": "jpg", "decode": "image", "size": 224, "crop": "center", "resize": 200}, "resize"),
    ({"name": "jpg", "decode": "image", "crop": "center"}, "size"),
    ({"name": "jpg", "decode": "image", "size": 32, "flip": 2.0}, "flip"),
    ({"name": "jpg", "decode": "image", "size": 32, "scale": [0.5]}, "scale"),
    ({"name": "jpg", "decode": "image", "size": 32, "crops": "center"},
     "unknown key 'crops' in the entry of field 'jpg' \\(did you mean 'crop'\\?\\)"),
])
def test_bad_image_options_are_config_errors(data, field, says):
    manifest, _ = data
    with pytest.raises(shardstream.ConfigError, match=says):
        next(iter(ShardDataset(manifest, batch_size=4, fields=[field])))


@pytest.mark.parametrize("policy", ["raise", "skip_sample"])
def test_a_field_that_holds_no_image_is_a_config_error_under_every_policy(data, policy):
    manifest, _ = data
    ds = ShardDataset(manifest, batch_size=4, error_policy=policy,
                      fields=[{"name": "cls", "decode": "image", "size": 32}])
    with pytest.raises(shardstream.ConfigError, match="'cls' of the first sample .* is not a JPEG"):
        next(iter(ds))


def test_a_stray_non_image_first_is_skipped_under_skip_sample(tmp_path):
    rng = np.random.RandomState(8)
    with shardstream.ShardWriter(str(tmp_path), max_samples=100) as w:
        w.write({"__key__": "g0", "jpg": b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "cls": 0})
        for i in range(1, 6):
            w.write({"__key__": f"g{i}", "jpg": encode(scene(rng, 40, 50)), "cls": i})
    ds = ShardDataset(str(tmp_path / "manifest.jsonl"), batch_size=2, shuffle=False,
                      error_policy="skip_sample",
                      fields=[{"name": "jpg", "decode": "image", "size": 16}, "cls"])
    assert [k for b in ds for k in b["__key__"]] == [f"g{i}" for i in range(1, 6)]
    assert ds.stats()["skipped_samples"] == 1
