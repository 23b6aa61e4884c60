"""ShardWriter.write encodes values by the field's extension, as WebDataset's
TarWriter does: PIL images and uint8 arrays as images, numbers as decimal text
or 0-d .npy, dicts as JSON; unsupported values raise a TypeError that names the
sample and the field. Everything is read back through shardstream.Loader."""

import io
import json
import os
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pytest

import shardstream

Image = pytest.importorskip("PIL.Image")

N = 4


def rgb_image(i, w=96, h=64):
    """A smooth RGB picture (waves and gradients) that JPEG keeps close."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    arr = np.stack([128 + 100 * np.sin(x / 15 + i), 30 + 3 * y,
                    100 + 40 * np.cos((x + y) / 20) + 20 * i], axis=-1)
    return np.clip(np.rint(arr), 0, 255).astype(np.uint8)


def rgba_image(i):
    arr = rgb_image(i)
    alpha = np.linspace(0, 255, arr.shape[1], dtype=np.uint8)[None, :].repeat(arr.shape[0], 0)
    return np.dstack([arr, alpha])


def decode(data):
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return im.format, im.mode, np.asarray(im)


def mean_abs_diff(a, b):
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def read_all(manifest, fields):
    rows = []
    with shardstream.Loader(manifest, fields=fields, batch_size=3, shuffle=False) as loader:
        for batch in loader:
            n = len(batch["__key__"])
            for r in range(n):
                rows.append({f: batch[f][r] for f in fields} | {"__key__": batch["__key__"][r]})
    return rows


def test_pil_images_and_arrays_round_trip_as_png_and_jpeg(tmp_path):
    with shardstream.ShardWriter(str(tmp_path)) as w:
        for i in range(N):
            w.write({"__key__": f"img{i}",
                     "rgb.jpg": Image.fromarray(rgb_image(i)),
                     "rgb.png": Image.fromarray(rgb_image(i)),
                     "rgba.png": Image.fromarray(rgba_image(i)),
                     "rgba.jpg": Image.fromarray(rgba_image(i)),
                     "arr.png": rgb_image(i),
                     "gray.png": rgb_image(i)[:, :, 0],
                     "cls": i})
    fields = ["rgb.jpg", "rgb.png", "rgba.png", "rgba.jpg", "arr.png", "gray.png", "cls"]
    rows = read_all(str(tmp_path / "manifest.jsonl"), fields)
    assert [r["__key__"] for r in rows] == [f"img{i}" for i in range(N)]
    for i, row in enumerate(rows):
        assert all(isinstance(row[f], bytes) for f in fields[:-1])
        assert row["cls"] == i
        fmt, mode, px = decode(row["rgb.png"])
        assert (fmt, mode) == ("PNG", "RGB") and np.array_equal(px, rgb_image(i))
        fmt, mode, px = decode(row["rgba.png"])
        assert (fmt, mode) == ("PNG", "RGBA") and np.array_equal(px, rgba_image(i))
        fmt, mode, px = decode(row["arr.png"])
        assert (fmt, mode) == ("PNG", "RGB") and np.array_equal(px, rgb_image(i))
        fmt, mode, px = decode(row["gray.png"])
        assert (fmt, mode) == ("PNG", "L") and np.array_equal(px, rgb_image(i)[:, :, 0])
        fmt, mode, px = decode(row["rgb.jpg"])
        assert (fmt, mode, px.shape) == ("JPEG", "RGB", (64, 96, 3))
        assert mean_abs_diff(px, rgb_image(i)) < 3
        fmt, mode, px = decode(row["rgba.jpg"])  # alpha dropped, colour kept
        assert (fmt, mode, px.shape) == ("JPEG", "RGB", (64, 96, 3))
        assert mean_abs_diff(px, rgba_image(i)[:, :, :3]) < 3


def test_jpeg_is_quality_90_and_converts_palette_images():
    im = Image.fromarray(rgb_image(1))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=90)
    assert shardstream.encode_field("rgb.jpg", im) == buf.getvalue()
    assert shardstream.encode_field("photo.JPEG", im) == buf.getvalue()  # extension: any case

    quads = np.zeros((64, 96), np.uint8)
    quads[32:, :48], quads[:32, 48:], quads[32:, 48:] = 1, 2, 3
    pal = Image.fromarray(quads).convert("P")
    pal.putpalette([200, 40, 40, 40, 200, 40, 40, 40, 200, 220, 220, 60] + [0] * 756)
    pal.info["transparency"] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fmt, mode, px = decode(shardstream.encode_field("jpg", pal))
    assert (fmt, mode) == ("JPEG", "RGB")
    assert mean_abs_diff(px, np.asarray(pal.convert("RGB"))) < 3


@pytest.mark.parametrize("field,fmt,lossless", [
    ("x.png", "PNG", True), ("x.webp", "WEBP", False), ("x.ppm", "PPM", True),
    ("x.bmp", "BMP", True), ("x.tiff", "TIFF", True), ("x.tif", "TIFF", True)])
def test_other_image_extensions(field, fmt, lossless):
    arr = rgb_image(2)
    for value in (Image.fromarray(arr), arr, arr.astype(np.float32) / 255.0):
        got_fmt, mode, px = decode(shardstream.encode_field(field, value))
        assert (got_fmt, mode) == (fmt, "RGB")
        expect = arr
        if isinstance(value, np.ndarray) and value.dtype == np.float32:
            expect = np.array(np.clip(value, 0, 1) * 255.0, np.uint8)  # WebDataset's scaling
        if lossless:
            assert np.array_equal(px, expect)
        else:
            assert mean_abs_diff(px, expect) < 3


def test_numbers_and_numpy_scalars_round_trip(tmp_path):
    floats = [0.1, 1 / 3, -2.5e-300, 1e300]
    f32 = [np.float32(0.5), np.float32(0.1), np.float32(1 / 3), np.float32(-7.25)]
    with shardstream.ShardWriter(str(tmp_path)) as w:
        for i in range(N):
            w.write({"__key__": f"n{i}",
                     "cls": i,                                   # int
                     "label.cls": np.int64(10 * i - 5),          # numpy int, negative
                     "flag.cls": bool(i % 2),                    # bool -> "1"/"0"
                     "small.index": np.uint8(i),
                     "score.txt": floats[i],                     # float, by repr
                     "f32.txt": f32[i],                          # numpy float32
                     "count.txt": np.int32(i * 1000),
                     "meta.json": {"score": floats[i], "n": np.int64(i), "v": np.arange(i)},
                     "num.json": f32[i],
                     "f32.npy": f32[i],                          # 0-d .npy
                     "f64.npy": floats[i],
                     "i64.npy": i - 2,
                     "b.npy": np.bool_(i % 2 == 0),
                     "vec.npy": [i, i + 1, i + 2]})
    fields = ["cls", "label.cls", "flag.cls", "small.index", "score.txt", "f32.txt", "count.txt",
              "meta.json", "num.json", "f32.npy", "f64.npy", "i64.npy", "b.npy", "vec.npy"]
    rows = read_all(str(tmp_path / "manifest.jsonl"), fields)
    assert [r["__key__"] for r in rows] == [f"n{i}" for i in range(N)]
    for i, row in enumerate(rows):
        assert row["cls"] == i
        assert row["label.cls"] == 10 * i - 5
        assert row["flag.cls"] == i % 2
        assert row["small.index"] == i
        assert float(row["score.txt"]) == floats[i]
        assert np.float32(row["f32.txt"]) == f32[i]
        assert row["count.txt"] == str(i * 1000)
        # .json fields arrive parsed, as WebDataset's .decode() gives them.
        assert row["meta.json"] == {"score": floats[i], "n": i, "v": list(range(i))}
        assert np.float32(row["num.json"]) == f32[i]
        assert row["f32.npy"].dtype == np.float32 and row["f32.npy"].size == 1
        assert row["f32.npy"].reshape(()) == f32[i]
        assert row["f64.npy"].dtype == np.float64 and row["f64.npy"].reshape(()) == floats[i]
        assert row["i64.npy"].dtype == np.int64 and row["i64.npy"].reshape(()) == i - 2
        assert row["b.npy"].dtype == np.bool_ and row["b.npy"].reshape(()) == (i % 2 == 0)
        assert list(row["vec.npy"]) == [i, i + 1, i + 2]


def test_encode_field_bytes_for_scalars_npy_and_npz():
    enc = shardstream.encode_field
    assert enc("cls", 3) == b"3" and enc("cls", np.int64(3)) == b"3"
    assert enc("cls", True) == b"1" and enc("cls", np.bool_(False)) == b"0"
    assert enc("txt", 0.5) == b"0.5" and enc("txt", np.float32(0.5)) == b"0.5"
    assert enc("txt", np.float32(0.1)) == b"0.1"          # float32's shortest text
    assert enc("txt", np.float64(0.1)) == b"0.1"          # not "np.float64(0.1)"
    assert float(enc("txt", 2 / 3)) == 2 / 3
    assert enc("json", {"a": [1]}) == b'{"a":[1]}'         # compact, as before
    assert enc("json", None) == b"null" and enc("json", 0.25) == b"0.25"
    assert enc("x.npy", "text") == b"text" and enc("jpg", b"\xff\xd8raw") == b"\xff\xd8raw"

    zero_d = np.load(io.BytesIO(enc("x.npy", np.float32(0.5))))
    assert zero_d.shape == () and zero_d.dtype == np.float32 and zero_d == 0.5
    assert np.load(io.BytesIO(enc("npy", 7))).dtype == np.int64

    arrays = {"a": np.arange(5, dtype=np.int16), "b": np.eye(2)}
    data = enc("feats.npz", arrays)
    assert data == enc("feats.npz", arrays)                 # deterministic: fixed zip times
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zipfile.ZipFile(io.BytesIO(data)).infolist())
    with np.load(io.BytesIO(data)) as z:
        assert sorted(z.files) == ["a", "b"]
        assert np.array_equal(z["a"], arrays["a"]) and z["a"].dtype == np.int16
        assert np.array_equal(z["b"], arrays["b"])
    with np.load(io.BytesIO(enc("npz", np.arange(3)))) as z:
        assert np.array_equal(z["arr_0"], np.arange(3))


def test_torch_tensors_are_stored_as_numpy():
    torch = pytest.importorskip("torch")
    enc = shardstream.encode_field
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    assert np.array_equal(np.load(io.BytesIO(enc("t.npy", t))), t.numpy())
    assert enc("cls", torch.tensor(4)) == b"4"
    img = torch.from_numpy(rgb_image(0))
    assert np.array_equal(decode(enc("x.png", img))[2], rgb_image(0))
    with pytest.raises(TypeError, match="bfloat16"):
        enc("t.npy", torch.zeros(2, dtype=torch.bfloat16))


@pytest.mark.parametrize("field,value,tname", [
    ("tags.txt", {1, 2}, "set"), ("x.cls", object(), "object"), ("photo.jpg", 3, "int"),
    ("photo.png", np.zeros((4, 4), np.int64), "int64"), ("z.json", {1, 2}, "set"),
    ("x.bin", 1 + 2j, "complex"), ("a.npy", [[1], [1, 2]], "list")])
def test_unsupported_values_name_the_key_field_and_type(tmp_path, field, value, tname):
    with pytest.raises(TypeError) as info:
        with shardstream.ShardWriter(str(tmp_path)) as w:
            w.write({"__key__": "ok", "txt": "fine"})
            w.write({"__key__": "s7", "txt": "fine", field: value})
    msg = str(info.value)
    assert "sample 's7'" in msg and f"field '{field}'" in msg and tname in msg
    assert not os.path.exists(tmp_path / "manifest.jsonl")  # the with block aborted


def test_unsupported_value_message_lists_what_is_accepted():
    with pytest.raises(TypeError, match="cannot store a set") as info:
        shardstream.encode_field("x", {1})
    msg = str(info.value)
    assert "accepted" in msg and "PIL" in msg and "str" in msg and ".jpg" in msg


def test_out_of_range_float_image_is_refused():
    with pytest.raises(ValueError, match="field 'x.png'.*\\[0, 1\\]"):
        shardstream.encode_field("x.png", np.full((2, 2), 3.0))


def test_package_imports_and_writes_without_pillow_or_torch(tmp_path):
    code = f"""
import sys
sys.modules["PIL"] = None            # as if Pillow were not installed
import numpy as np, shardstream
with shardstream.ShardWriter({str(tmp_path)!r}) as w:
    w.write({{"__key__": "a", "cls": np.int64(1), "txt": 0.5, "x.npy": np.arange(3),
             "jpg": b"already encoded"}})
assert "torch" not in sys.modules
try:
    shardstream.encode_field("x.png", np.zeros((2, 2), np.uint8))
except ImportError as e:
    assert "Pillow" in str(e) and "x.png" in str(e), e
else:
    raise AssertionError("no ImportError")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_folder_of_shards_is_refused_or_overwritten_never_read_twice(tmp_path):
    def write(n, **kw):
        with shardstream.ShardWriter(tmp_path, max_samples=3, **kw) as w:
            for i in range(n):
                w.write({"__key__": "s%03d" % i, "cls": i})

    write(10)  # 4 shards
    with pytest.raises(shardstream.ConfigError, match="already holds .*overwrite"):
        write(4)
    write(4, overwrite=True)  # 2 shards; the other 2 old ones are gone
    assert sorted(p.name for p in tmp_path.glob("*.tar")) == ["shard-000000.tar", "shard-000001.tar"]
    with shardstream.Loader(str(tmp_path), fields=["cls"], batch_size=1) as loader:
        assert sorted(int(c) for b in loader for c in b["cls"]) == [0, 1, 2, 3]
    # A shard the manifest beside it does not list is refused by a folder read.
    (tmp_path / "zz-old.tar").write_bytes((tmp_path / "shard-000000.tar").read_bytes())
    with pytest.raises(shardstream.ConfigError, match="zz-old.tar"):
        shardstream.Loader(str(tmp_path), fields=["cls"], batch_size=1)
