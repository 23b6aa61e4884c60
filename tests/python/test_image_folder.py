"""shardstream.convert.images_to_shards: an ImageFolder tree (made with Pillow) in, image
shards out. The shards must be the bytes `shardstream pack --image-folder` writes (sidecars,
classes.txt and manifest entries too), whatever the process count; they read back through
ShardDataset with every image once under its class's label; bad trees and files that vanish
or change mid-conversion name the file and leave nothing behind."""

import io
import os
import subprocess

import numpy as np
import pytest
from PIL import Image

import shardstream
from conftest import cli_dir, read_manifest
from shardstream import convert, image_folder

CLASSES = ["cat", "dog", "n01.x"]  # a dot in a class name is kept; in a stem it becomes "_"


def make_tree(root, per_class=30, seed=1):
    """<class>/<image> with .jpg, .JPEG and .png files of varied sizes, plus files the
    conversion leaves out: a text file at the top and in a class, a symlink, a nested image."""
    rng = np.random.RandomState(seed)
    images = {}
    for c in CLASSES:
        os.makedirs(os.path.join(root, c))
        for i in range(per_class):
            h, w = rng.randint(16, 96, size=2)
            pixels = rng.randint(0, 255, size=(h, w, 3), dtype=np.uint8)
            ext = ["jpg", "JPEG", "png"][i % 3]
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, format="PNG" if ext == "png" else "JPEG")
            name = f"img.{i}.{ext}"
            with open(os.path.join(root, c, name), "wb") as f:
                f.write(buf.getvalue())
            images[f"{c}/img_{i}"] = (buf.getvalue(), CLASSES.index(c))
    # A member path over 100 bytes takes a pax record: the plan must count it.
    long = "L" * 120
    Image.new("RGB", (8, 8)).save(os.path.join(root, "cat", long + ".jpg"), format="JPEG")
    with open(os.path.join(root, "cat", long + ".jpg"), "rb") as f:
        images[f"cat/{long}"] = (f.read(), 0)
    with open(os.path.join(root, "README.txt"), "w") as f:
        f.write("not an image")
    with open(os.path.join(root, "dog", "notes.txt"), "w") as f:
        f.write("not an image")
    os.symlink(os.path.join(root, "cat", "img.0.jpg"), os.path.join(root, "dog", "link.jpg"))
    os.makedirs(os.path.join(root, "dog", "nested"))
    Image.new("RGB", (8, 8)).save(os.path.join(root, "dog", "nested", "deep.jpg"), format="JPEG")
    return images


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tree") / "train")
    return root, make_tree(root)


def files_of(out):
    return sorted(n for n in os.listdir(out) if not n.startswith("."))


@pytest.mark.parametrize("processes", [1, 2])
def test_the_shards_are_the_bytes_pack_writes(tree, tmp_path, processes):
    src, images = tree
    packed = tmp_path / "pack"
    subprocess.run([os.path.join(cli_dir(), "shardstream"), "pack", "--image-folder", "--index",
                    "--shard-size", "48KiB", src, str(packed)], check=True, capture_output=True)
    s = convert.images_to_shards(src, tmp_path / "out", max_bytes="48KiB", processes=processes)
    assert s["images"] == len(images) and s["classes"] == 3 and s["left_out"] == 4
    assert s["processes"] == processes and s["shards"] >= 4
    ours, theirs = read_manifest(s["manifest"]), read_manifest(str(packed / "manifest.jsonl"))
    assert len(ours) == len(theirs) == s["shards"]
    for n, (a, b) in enumerate(zip(ours, theirs)):
        assert a["url"] == f"part-{n:05d}-000000.tar" and b["url"] == f"shard-{n:06d}.tar"
        assert {k: v for k, v in a.items() if k != "url"} == \
            {k: v for k, v in b.items() if k != "url"}
        for ext in ("", ".idx"):
            assert (tmp_path / "out" / (a["url"] + ext)).read_bytes() == \
                (packed / (b["url"] + ext)).read_bytes(), a["url"] + ext
    assert (tmp_path / "out" / "classes.txt").read_text() == "cat\ndog\nn01.x\n" == \
        (packed / "classes.txt").read_text()


def test_max_samples_and_one_shard_per_task(tree, tmp_path):
    src, images = tree
    s = convert.images_to_shards(src, tmp_path / "out", max_samples=7, processes=2)
    counts = [e["nsamples"] for e in read_manifest(s["manifest"])]
    assert counts == [7] * (len(images) // 7) + ([len(images) % 7] if len(images) % 7 else [])


def test_every_image_reads_back_once_under_its_label(tree, tmp_path):
    torch = pytest.importorskip("torch")
    from shardstream.torch import ShardDataset
    src, images = tree
    s = convert.images_to_shards(src, tmp_path / "out", max_bytes="64KiB", processes=2)
    seen = {}
    ds = ShardDataset(s["manifest"], batch_size=8, seed=3, fields=["jpg;jpeg;png", "cls"])
    for batch in ds:
        for key, data, label in zip(batch["__key__"], batch["jpg"], batch["cls"]):
            assert key not in seen, key
            seen[key] = (bytes(data), int(label))
    assert seen == images
    del torch


def test_an_earlier_output_is_refused_or_replaced(tree, tmp_path):
    src, _ = tree
    out = tmp_path / "out"
    first = convert.images_to_shards(src, out, max_bytes="32KiB", processes=1)
    with pytest.raises(shardstream.ConfigError, match="already holds a manifest.jsonl"):
        convert.images_to_shards(src, out, processes=1)
    again = convert.images_to_shards(src, out, processes=1, overwrite=True)
    assert again["shards"] == 1 < first["shards"]
    assert files_of(out) == ["classes.txt", "manifest.jsonl", "part-00000-000000.tar",
                             "part-00000-000000.tar.idx"]


def test_two_images_of_one_key_and_a_tree_without_images_are_refused(tmp_path):
    src = tmp_path / "t"
    (src / "a").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(src / "a" / "x.jpg", format="JPEG")
    Image.new("RGB", (4, 4)).save(src / "a" / "x.png", format="PNG")
    with pytest.raises(shardstream.ConfigError, match=r"two images of one sample key a/x: .*x\."):
        convert.images_to_shards(src, tmp_path / "out", processes=1)
    assert not (tmp_path / "out").exists()
    (src / "a" / "x.png").unlink()
    (src / "a" / "x.jpg").rename(src / "x.jpg")  # not in a class folder
    with pytest.raises(shardstream.ConfigError, match="no <class>/<image> files under"):
        convert.images_to_shards(src, tmp_path / "out", processes=1)
    with pytest.raises(shardstream.ConfigError, match="not a folder"):
        convert.images_to_shards(src / "missing", tmp_path / "out")
    with pytest.raises(shardstream.ConfigError, match="engine 'spark'"):
        convert.images_to_shards(src, tmp_path / "out", engine="spark")


@pytest.mark.parametrize("change", ["removed", "grown"])
def test_a_file_that_changes_after_listing_names_it_and_leaves_nothing(tree, tmp_path,
                                                                       monkeypatch, change):
    src, _ = tree
    victim = os.path.join(tmp_path, "t", "dog", "img.3.jpg")
    import shutil
    shutil.copytree(src, tmp_path / "t", symlinks=True)
    listed = image_folder._list_tree

    def list_then_change(root):
        found = listed(root)
        if change == "removed":
            os.remove(victim)
        else:
            with open(victim, "ab") as f:
                f.write(b"more")
        return found

    monkeypatch.setattr(image_folder, "_list_tree", list_then_change)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    if change == "removed":
        with pytest.raises(shardstream.IoError, match=f"cannot read {victim}: No such file"):
            convert.images_to_shards(tmp_path / "t", out, max_bytes="32KiB", processes=1)
    else:
        with pytest.raises(shardstream.ConfigError,
                           match=f"{victim}: .* bytes, .* when the tree was listed"):
            convert.images_to_shards(tmp_path / "t", out, max_bytes="32KiB", processes=1)
    assert files_of(out) == ["mine.txt"]  # no shard, manifest or classes.txt is left
