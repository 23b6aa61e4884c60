"""ImageNet-style input: shardstream vs WebDataset, MosaicML Streaming, LitData, Grain, SPDL,
Megatron-Energon, DALI's CPU pipeline and the JPEG decode limit.

    python benchmarks/vision_benchmark.py [--images 20000] [--runs 3] [--threads 2] [--json]
    python benchmarks/vision_benchmark.py --long-side 256 --libs all   # LitData's recipe, every peer

The data set: --images synthetic JPEGs (each side drawn independently from
300..640 px, quality 90, Pillow's default 4:2:0 subsampling) with natural-image
statistics: a smooth two-colour gradient with low-frequency colour variation,
overlapping discs, rectangles and polygons, a little blur, a band of
mid-frequency texture and mild pixel noise (not pure noise, which compresses
unnaturally); labels 0..999. Written once with shardstream.ShardWriter
(max_bytes="128MiB", write_index=True) into --dir, on 2 processes, and reused
while the parameters recorded in --dir/params.json match. The shards are plain
WebDataset tars.

Every contender produces batches of 256 random-resized-cropped (scale
0.08..1, ratio 3/4..4/3), randomly flipped 224x224 RGB uint8 images, laid out
[256, 224, 224, 3], plus int64 labels [256], and uses --threads threads or
worker processes for the work:

1. shardstream, as users run it (shuffle on, everything else default):
   ShardDataset(manifest, batch_size=256, reader_threads=--threads,
   fields=[{"name": "jpg", "decode": "image", "size": [224, 224],
   "crop": "random_resized", "flip": True}, "cls"]) under ds.dataloader()
   (num_workers=0: C++ reader threads decode, crop and resize). A second row,
   "shardstream (shuffle=False)", is a tuned setting reported beside it.
2. WebDataset 1.0.2 in its recommended setup:
   wds.WebDataset(urls, shardshuffle=len(urls)).shuffle(1000).decode("pil")
   .to_tuple("jpg", "cls").map_tuple(rrc_flip_to_tensor, identity).batched(256)
   under DataLoader(batch_size=None, num_workers=--threads, pin_memory=False).
3. MosaicML Streaming 0.13.0 (in its own virtual environment, made by
   scripts/bench_env.sh, since it pins numpy<2.2): the same JPEG bytes and
   labels written once with MDSWriter(columns={"jpg": "bytes", "cls": "int"}),
   read with StreamingDataset(local=..., shuffle=True, batch_size=256) whose
   __getitem__ decodes with Pillow and applies rrc_flip_to_tensor, under
   DataLoader(batch_size=256, num_workers=--threads).
4. With --libs (all, or a list), the peers of benchmarks/peers_benchmark.py, each reading its
   own format written once from the same shards (under --dir/NAME) by its own writer:
   LitData (optimize with the JPEG bytes and the label, StreamingDataset(shuffle=True) decoding
   with Pillow in __getitem__, StreamingDataLoader); Grain (ArrayRecord, MapDataset .shuffle
   .repeat .map .batch, mp_prefetch); SPDL (its thread pipeline over a table of the images'
   places in the tar shards, Pillow on its threads); Megatron-Energon (energon prepare,
   ImageClassificationSample, a task encoder cropping in encode_sample, get_train_dataset with
   its documented shuffle_buffer_size=100, max_samples_per_sequence=100); DALI's CPU pipeline
   (device_id=None: readers.webdataset with wds2idx indexes, decoders.image_random_crop, resize,
   flip, DALIGenericIterator). Energon and DALI run under --peers-python (the venv of
   scripts/bench_env.sh --peers-venv); the others need scripts/bench_env.sh --peers.
5. The decode limit: benchmarks/decode_limit_benchmark (C++, TurboJPEG) decodes
   every JPEG of the shards at full size to RGB on --threads threads, with no
   reading, cropping, resizing or batching: the ceiling of a loader that decodes
   each image in full.

rrc_flip_to_tensor is torchvision v2's RandomResizedCrop(224, antialias=True)
followed by RandomHorizontalFlip(p=0.5) on a PIL image, written out with the
same calls torchvision makes for PIL inputs (torchvision is not installable
next to the CPU build of torch here; the code follows torchvision 0.28):
the parameters from torch's RNG exactly as RandomResizedCrop.make_params draws
them (10 tries of area * U(0.08, 1) and exp(U(log 3/4, log 4/3)), w and h by
int(round(...)), i and j by torch.randint, then the central fallback), then
F.resized_crop's PIL kernel, img.crop((left, top, left + w, top + h)) followed
by img.resize((224, 224), Image.BILINEAR) (skipped when the crop is 224x224
already; Pillow's BILINEAR resize antialiases when it shrinks), then the flip
when torch.rand(1) < 0.5, img.transpose(Image.FLIP_LEFT_RIGHT), and finally
torch.from_numpy(np.asarray(img)), [224, 224, 3] uint8. The decode before it
is the one WebDataset's "pil" decoder does: Image.open, load, convert("RGB").

Each contender runs in a fresh process, one at a time, the runs interleaved
(run 1 of every contender, then run 2, ...), after the data files have been
read once so that all find them in the page cache. The driver samples the RSS
of the process and all its children every 5 ms (/proc) for the peak memory of
the process tree. Reported, medians of --runs: images/s over --epochs whole
epochs counted from the first batch on (the first batch's images not counted,
its time excluded); the same rate with the first batch included, from the
first iter() of the DataLoader on (with_first_batch_images_per_s: a shuffle
buffer filled with decoded images before the first batch is work the first
rate does not see, about 1000 images of each epoch, so compare the two on
small data sets); time to first batch (from just after `import torch` in the
fresh process: library import, data set set-up, worker start-up, first
batch); and peak tree RSS. --json prints one JSON object as the last line of
stdout (progress goes to stderr).

Images per CPU second: every image delivered over the CPU seconds of the contender's process
tree from just after `import torch` (set-up, worker start-up and every batch; worker processes
count once joined, and each contender drops its loader before the count).

The Streaming environment: bash scripts/bench_env.sh (makes .venv-bench); the decode limit:
build/benchmarks/decode_limit_benchmark, or, where it is not built, the benchmark compiles
benchmarks/decode_limit_benchmark.cc with g++ into --dir (it needs only TurboJPEG). A contender
that is skipped or fails is null in the JSON, with a *_reason field, and a row with the reason in
the table.
"""

import argparse
import io
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time

from bench_common import (cpu_seconds, energon_prepare, ensure_mds, finish_dir,
                          import_torch_rss, interleave, log, peer_missing, prepare_dir,
                          shard_paths, warm_cache, write_array_records)

BATCH = 256
SIZE = 224
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ME = os.path.abspath(__file__)

# What the data set is; a data directory is reused only while this matches.
DATA_PARAMS = {
    "version": 1,
    "generator": "synthetic natural-statistics JPEGs (gradients, shapes, texture, noise)",
    "min_side": 300,
    "max_side": 640,
    "quality": 90,
    "classes": 1000,
    "max_bytes": "128MiB",
    "seed": 0,
}


# -- the data set -------------------------------------------------------------------------

def _noise_field(rng, w: int, h: int, cell: float):
    """Smooth noise with features about `cell` px wide: a coarse grid of normal
    values upsampled bilinearly to w x h (float32, about unit variance)."""
    import numpy as np
    from PIL import Image
    gw, gh = max(2, int(w / cell) + 2), max(2, int(h / cell) + 2)
    grid = rng.standard_normal((gh, gw), dtype=np.float32)
    return np.asarray(Image.fromarray(grid, "F").resize((w, h), Image.BILINEAR))


def synth_jpeg(index: int) -> tuple:
    """Image `index` of the data set: (key, JPEG bytes, label, width, height).

    Natural-image statistics, drawn with numpy and Pillow: a smooth two-colour
    gradient with low-frequency colour variation; 6-24 objects (discs, ellipses,
    rectangles, polygons) each with its own shading; a slight blur (edges in
    photos are not pixel-sharp); multi-octave texture with a roughly 1/f
    spectrum whose strength varies across the image (sky next to foliage); mild
    sensor noise."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter
    p = DATA_PARAMS
    rng = np.random.default_rng([p["seed"], index])
    w = int(rng.integers(p["min_side"], p["max_side"] + 1))
    h = int(rng.integers(p["min_side"], p["max_side"] + 1))
    if p.get("long_side"):  # LitData's ImageNet recipe: the long side resized to 256
        scale = p["long_side"] / max(w, h)
        w, h = max(1, int(round(w * scale))), max(1, int(round(h * scale)))
    label = int(rng.integers(0, p["classes"]))

    # Background, drawn at 1/8 size and upsampled (it is smooth): a two-colour
    # gradient at a random angle plus low-frequency colour variation.
    sw, sh = w // 8 + 2, h // 8 + 2
    angle = rng.uniform(0, 2 * math.pi)
    t = (np.arange(sw, dtype=np.float32)[None, :] * math.cos(angle)
         + np.arange(sh, dtype=np.float32)[:, None] * math.sin(angle))
    t = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
    c0, c1 = rng.uniform(0, 255, 3).astype(np.float32), rng.uniform(0, 255, 3).astype(np.float32)
    small = c0 + (c1 - c0) * t[..., None]
    small += np.stack([_noise_field(rng, sw, sh, max(sw, sh) / rng.uniform(2, 5))
                       for _ in range(3)], -1) * rng.uniform(10, 30)
    pil = Image.fromarray(np.clip(small, 0, 255).astype(np.uint8)).resize((w, h), Image.BICUBIC)

    # Objects, each shaded by a gradient of its own (pasted through its mask).
    for _ in range(int(rng.integers(6, 25))):
        r = rng.uniform(0.03, 0.3) * min(w, h)
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        box = [int(cx - 1.7 * r), int(cy - 1.7 * r), int(cx + 1.7 * r) + 1, int(cy + 1.7 * r) + 1]
        bw, bh = box[2] - box[0], box[3] - box[1]
        mask = Image.new("L", (bw, bh), 0)
        draw = ImageDraw.Draw(mask)
        ox, oy = cx - box[0], cy - box[1]
        kind = rng.integers(0, 4)
        if kind == 0:
            draw.ellipse([ox - r, oy - r, ox + r, oy + r], fill=255)
        elif kind == 1:
            rx = r * rng.uniform(0.4, 1.6)
            draw.ellipse([ox - rx, oy - r, ox + rx, oy + r], fill=255)
        elif kind == 2:
            draw.rectangle([ox - r, oy - r * rng.uniform(0.3, 1.5), ox + r, oy + r], fill=255)
        else:
            n = int(rng.integers(3, 8))
            angles = np.sort(rng.uniform(0, 2 * math.pi, n))
            radii = r * rng.uniform(0.5, 1.6, n)
            draw.polygon([(float(ox + a * math.cos(b)), float(oy + a * math.sin(b)))
                          for a, b in zip(radii, angles)], fill=255)
        # The shading is linear: drawn at 1/4 size and upsampled.
        qw, qh = bw // 4 + 2, bh // 4 + 2
        a = rng.uniform(0, 2 * math.pi)
        s = (np.arange(qw, dtype=np.float32)[None, :] * math.cos(a)
             + np.arange(qh, dtype=np.float32)[:, None] * math.sin(a)) / max(qw, qh)
        shade = rng.uniform(0, 255, 3).astype(np.float32) + s[..., None] * rng.uniform(-120, 120)
        shade = Image.fromarray(np.clip(shade, 0, 255).astype(np.uint8))
        pil.paste(shade.resize((bw, bh), Image.BILINEAR), box[:2], mask)
    pil = pil.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 1.2))))

    # Texture in luminance: octaves of smooth noise, amplitude falling with
    # scale about as 1/f, under a smooth mask that varies its strength across
    # the image; plus sensor noise.
    tex = _noise_field(rng, w, h, 32) * 2.0
    for cell, amp in ((12, 1.8), (5, 1.7), (2, 1.6)):
        tex += _noise_field(rng, w, h, cell) * amp
    strength = _noise_field(rng, w, h, max(w, h) / 3)
    strength = np.clip(strength * 0.8 + rng.uniform(0.2, 1.0), 0.05, 1.5) * rng.uniform(6, 12)
    tex *= strength
    tex += rng.standard_normal((h, w), dtype=np.float32) * rng.uniform(2, 4.5)
    # Slightly different gains per channel: some colour in the texture too.
    gains = rng.uniform(0.7, 1.3, 3).astype(np.float32)
    img = np.asarray(pil, np.float32) + 0.5
    img += tex[..., None] * gains
    np.clip(img, 0, 255, out=img)

    out = io.BytesIO()
    Image.fromarray(img.astype(np.uint8)).save(
        out, format="JPEG", quality=p["quality"])
    return f"img{index:08d}", out.getvalue(), label, w, h


def make_data(root: str, images: int) -> dict:
    """Writes the data set into `root` unless it is there with the same parameters;
    returns the contents of root/params.json."""
    want = dict(DATA_PARAMS, images=images)
    have = prepare_dir(root, want, key="params")
    if have is not None:
        return have
    import multiprocessing
    import shardstream
    log(f"data: writing {images} JPEGs into {root} on 2 processes")
    t0 = time.perf_counter()
    total_bytes = total_pixels = 0
    writer = shardstream.ShardWriter(root, max_bytes=DATA_PARAMS["max_bytes"], write_index=True)
    with multiprocessing.get_context("fork").Pool(2) as pool, writer as w:
        for n, (key, jpeg, label, width, height) in enumerate(
                pool.imap(synth_jpeg, range(images), chunksize=16), 1):
            w.write({"__key__": key, "jpg": jpeg, "cls": label})
            total_bytes += len(jpeg)
            total_pixels += width * height
            if n % 2000 == 0:
                log(f"data: {n}/{images} ({time.perf_counter() - t0:.0f} s)")
    shards = len(shard_paths(os.path.join(root, "manifest.jsonl")))
    info = {"params": want, "shards": shards, "jpeg_bytes": total_bytes,
            "mean_jpeg_bytes": total_bytes / images,
            "mean_megapixels": total_pixels / images / 1e6,
            "bits_per_pixel": total_bytes * 8 / total_pixels,
            "seconds_to_write": time.perf_counter() - t0}
    finish_dir(root, info)
    log(f"data: {images} JPEGs, {total_bytes / 2**20:.0f} MiB in {shards} shards, "
        f"{info['seconds_to_write']:.0f} s")
    return info


def tar_samples(paths: list):
    """(key, jpeg bytes, label) of every sample of the tar shards, in order (stdlib only)."""
    import tarfile
    for path in paths:
        cur, fields = None, {}
        with tarfile.open(path, "r:") as tar:
            for m in tar:
                if not m.isfile():
                    continue
                key, _, ext = m.name.partition(".")
                if key != cur:
                    if cur is not None:
                        yield cur, fields["jpg"], int(fields["cls"])
                    cur, fields = key, {}
                fields[ext] = tar.extractfile(m).read()
        if cur is not None:
            yield cur, fields["jpg"], int(fields["cls"])


# -- what the Python contenders do per image ---------------------------------------------

def pil_decode(data: bytes):
    """WebDataset's "pil" decoder: Image.open, load, convert("RGB")."""
    from PIL import Image
    img = Image.open(io.BytesIO(data))
    img.load()
    return img.convert("RGB")


_LOG_RATIO = (math.log(3 / 4), math.log(4 / 3))


def rrc_params(width: int, height: int) -> tuple:
    """torchvision v2 RandomResizedCrop(224).make_params on a width x height image, drawn
    from torch's RNG as torchvision 0.28 draws them: (top, left, h, w)."""
    import torch
    area = height * width
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(0.08, 1.0).item()
        aspect_ratio = math.exp(torch.empty(1).uniform_(_LOG_RATIO[0], _LOG_RATIO[1]).item())
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,)).item())
            j = int(torch.randint(0, width - w + 1, size=(1,)).item())
            return i, j, h, w
    # central fallback
    in_ratio = float(width) / float(height)
    if in_ratio < 3 / 4:
        w = width
        h = int(round(w / (3 / 4)))
    elif in_ratio > 4 / 3:
        h = height
        w = int(round(h * (4 / 3)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def rrc_flip_to_tensor(img):
    """torchvision v2 RandomResizedCrop(224, antialias=True) + RandomHorizontalFlip()
    on a PIL image, with the calls torchvision 0.28 makes; then a [224, 224, 3] uint8 tensor."""
    import numpy as np
    import torch
    from PIL import Image
    i, j, h, w = rrc_params(*img.size)
    # F.resized_crop's PIL kernel: _FP.crop, then _resize_image_pil.
    img = img.crop((j, i, j + w, i + h))
    if img.size != (SIZE, SIZE):
        img = img.resize((SIZE, SIZE), Image.BILINEAR)
    if torch.rand(1) < 0.5:  # RandomHorizontalFlip(p=0.5): _FP.hflip
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return torch.from_numpy(np.asarray(img))


def identity(x):
    return x


# -- MosaicML Streaming (runs in its own virtual environment) -----------------------------

def stub_torchvision() -> None:
    """`import streaming` imports streaming.vision, whose base module does
    `from torchvision.datasets import VisionDataset` and
    `from torchvision.transforms.functional import to_tensor` for its
    StreamingImageNet/CIFAR10/COCO/ADE20K classes. No torchvision loads next to the
    CPU build of torch here (PyPI's torchvision 0.28.0 links libc10_cuda.so), and
    MDSWriter and StreamingDataset never touch it, so these two names are stubs
    that raise if anything calls them. A real torchvision is used when present."""
    import importlib.util
    import types
    if importlib.util.find_spec("torchvision") is not None or "torchvision" in sys.modules:
        return
    tv = types.ModuleType("torchvision")
    tv.__path__ = []
    datasets = types.ModuleType("torchvision.datasets")
    transforms = types.ModuleType("torchvision.transforms")
    transforms.__path__ = []
    functional = types.ModuleType("torchvision.transforms.functional")

    class VisionDataset:  # noqa: D401 - a stub
        def __init__(self, *a, **k):
            raise RuntimeError("torchvision stub (vision_benchmark.stub_torchvision)")

    def to_tensor(*a, **k):
        raise RuntimeError("torchvision stub (vision_benchmark.stub_torchvision)")

    datasets.VisionDataset = VisionDataset
    functional.to_tensor = to_tensor
    # A spec, for importlib.util.find_spec callers (transformers' availability
    # checks, which then find no torchvision distribution and leave it alone).
    import importlib.machinery
    for m in (tv, datasets, transforms, functional):
        m.__spec__ = importlib.machinery.ModuleSpec(m.__name__, None,
                                                    is_package=hasattr(m, "__path__"))
    tv.datasets, tv.transforms, transforms.functional = datasets, transforms, functional
    sys.modules.update({"torchvision": tv, "torchvision.datasets": datasets,
                        "torchvision.transforms": transforms,
                        "torchvision.transforms.functional": functional})


def import_streaming():
    import warnings
    warnings.filterwarnings("ignore")
    stub_torchvision()
    import streaming
    return streaming


def write_mds(manifest: str, out: str) -> None:
    """Child (Streaming venv): the data set's JPEG bytes and labels as MDS, once."""
    streaming = import_streaming()
    if os.path.exists(out):
        shutil.rmtree(out)
    n = 0
    with streaming.MDSWriter(out=out, columns={"jpg": "bytes", "cls": "int"}) as w:
        for _key, jpeg, label in tar_samples(shard_paths(manifest)):
            w.write({"jpg": jpeg, "cls": label})
            n += 1
    print(json.dumps({"samples": n, "streaming_version": streaming.__version__}))


# -- the peers' own formats, each written once by its own writer ----------------------------

def litdata_shard_images(path: str):
    """LitData's optimize fn: a shard's samples as {"jpg": JPEG bytes, "cls": label}. The bytes
    are stored as they are: LitData's JPEG serializer decodes with torchvision, which does not
    load beside the CPU build of torch here, so the reader decodes with Pillow, as the
    WebDataset and Streaming contenders do."""
    for _key, jpeg, label in tar_samples([path]):
        yield {"jpg": jpeg, "cls": label}


def write_litdata(manifest: str, out: str) -> None:
    """Child: the images as LitData chunks (optimize, 64 MB chunks as in its ImageNet recipe)."""
    import litdata
    if os.path.exists(out):
        shutil.rmtree(out)
    litdata.optimize(fn=litdata_shard_images, inputs=shard_paths(manifest), output_dir=out,
                     chunk_bytes="64MB", num_workers=2, verbose=False)
    print(json.dumps({"litdata_version": litdata.__version__}))


def write_grain(manifest: str, out: str) -> None:
    """Child: the images as ArrayRecord files, a record per sample: its label as 8 bytes, then
    the JPEG."""
    import struct
    n = write_array_records(manifest, out, lambda path: (
        struct.pack("<q", label) + jpeg for _key, jpeg, label in tar_samples([path])))
    print(json.dumps({"samples": n}))


def write_dali_index(manifest: str, out: str) -> None:
    """Child (peers' venv): DALI's index of each tar shard, made by its wds2idx tool, as DALI's
    webdataset reader docs advise (it otherwise indexes every shard at start-up)."""
    import subprocess
    tool = os.path.join(os.path.dirname(sys.executable), "wds2idx")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for i, path in enumerate(shard_paths(manifest)):
        subprocess.run([tool, path, os.path.join(out, f"part-{i:05d}.idx")], check=True,
                       stdout=subprocess.DEVNULL)
    print(json.dumps({"shards": i + 1}))


def write_energon(manifest: str, out: str) -> None:
    """Child (peers' venv): an Energon data set: links to the tar shards, then `energon
    prepare` (its index, split and dataset.yaml: ImageClassificationSample, image from .jpg,
    label from .cls)."""
    energon_prepare(manifest, out, ["--sample-type", "ImageClassificationSample",
                                    "--field-map", '{"image": "jpg", "label": "cls"}'])
    print(json.dumps({"prepared": out}))


def tar_members(paths: list) -> list:
    """[(path, JPEG offset, JPEG size, label)] of every sample: SPDL has no format of its own,
    so its source is a table of where each image lies in the tar shards (headers only)."""
    import tarfile
    table = []
    for path in paths:
        with tarfile.open(path, "r:") as tar, open(path, "rb") as f:
            fields = {}
            for m in tar:
                key, _, ext = m.name.partition(".")
                if ext == "jpg":
                    fields.setdefault(key, {})["jpg"] = (m.offset_data, m.size)
                elif ext == "cls":
                    f.seek(m.offset_data)
                    fields.setdefault(key, {})["cls"] = int(f.read(m.size))
                else:
                    continue
                if len(fields[key]) == 2:
                    v = fields.pop(key)
                    table.append((path, v["jpg"][0], v["jpg"][1], v["cls"]))
    return table


def grain_image(record):
    """Grain's map: a record to ([224, 224, 3] uint8, label) (module level: its workers import
    it)."""
    import struct
    label = struct.unpack_from("<q", record)[0]
    return {"jpg": rrc_flip_to_tensor(pil_decode(record[8:])).numpy(), "cls": label}


# -- one contender, in its own process -------------------------------------------------------

def run_one(cfg: dict) -> dict:
    """Child: iterates cfg["epochs"] epochs of contender cfg["lib"], returns timings."""
    import torch
    t_start = time.perf_counter()
    cpu_start = cpu_seconds()
    lib, epochs, threads = cfg["lib"], cfg["epochs"], cfg["threads"]
    versions = {"torch": torch.__version__}
    set_epoch = None
    epoch_batches = None  # epoch -> iterable of batches, where a DataLoader does not fit
    if lib in ("shardstream", "shardstream_noshuffle"):
        import shardstream
        from shardstream.torch import ShardDataset
        versions["shardstream"] = getattr(shardstream, "__version__", None)
        ds = ShardDataset(cfg["manifest"], batch_size=BATCH, reader_threads=threads,
                          shuffle=(lib == "shardstream"), fields=[
                              {"name": "jpg", "decode": "image", "size": [SIZE, SIZE],
                               "crop": "random_resized", "flip": True}, "cls"])
        dl = ds.dataloader()
        set_epoch = ds.set_epoch
    elif lib == "webdataset":
        import webdataset as wds
        versions["webdataset"] = wds.__version__
        urls = shard_paths(cfg["manifest"])
        ds = (wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False).shuffle(1000)
              .decode("pil").to_tuple("jpg", "cls").map_tuple(rrc_flip_to_tensor, identity)
              .batched(BATCH))
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=threads,
                                         pin_memory=False)
    elif lib == "streaming":
        streaming = import_streaming()
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
        versions["streaming"] = streaming.__version__

        class StreamingImages(streaming.StreamingDataset):
            def __getitem__(self, idx):
                s = super().__getitem__(idx)
                return rrc_flip_to_tensor(pil_decode(s["jpg"])), s["cls"]

        ds = StreamingImages(local=cfg["mds"], shuffle=True, batch_size=BATCH)
        dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=threads)
    elif lib == "litdata":
        import litdata
        from litdata import StreamingDataLoader, StreamingDataset
        versions["litdata"] = litdata.__version__

        class LitImages(StreamingDataset):
            def __getitem__(self, index):
                s = super().__getitem__(index)
                return rrc_flip_to_tensor(pil_decode(s["jpg"])), s["cls"]

        ds = LitImages(cfg["copies"]["litdata"], shuffle=True)
        dl = StreamingDataLoader(ds, batch_size=BATCH, num_workers=threads)
        set_epoch = getattr(ds, "set_epoch", None)
    elif lib == "grain":
        import grain
        from importlib.metadata import version
        versions["grain"] = version("grain")
        d = cfg["copies"]["grain"]
        source = grain.sources.ArrayRecordDataSource(sorted(
            os.path.join(d, f) for f in os.listdir(d) if f.endswith(".array_record")))
        ds = grain.MapDataset.source(source).shuffle(seed=0)
        dl = (ds.repeat(epochs).map(grain_image).batch(BATCH).to_iter_dataset()
              .mp_prefetch(grain.MultiprocessingOptions(num_workers=threads)))
        it = iter(dl)
        per_epoch = -(-len(source) // BATCH)  # whole batches of one epoch, the last partial

        def epoch_batches(epoch):
            for _ in range(per_epoch):
                b = next(it)
                yield torch.from_numpy(b["jpg"]), torch.from_numpy(b["cls"])
    elif lib == "spdl":
        import numpy as np
        from importlib.metadata import version
        from spdl.pipeline import PipelineBuilder
        versions["spdl"] = version("spdl")
        table = tar_members(shard_paths(cfg["manifest"]))
        files = {p: os.open(p, os.O_RDONLY) for p in {t[0] for t in table}}

        def decode(row):
            # On SPDL's threads: Pillow releases the GIL while it decodes and resizes. (SPDL's
            # own image I/O, FFmpeg with a crop-and-scale filter graph per image, does 0.8x
            # Pillow's images per second on these 256-pixel JPEGs: a decoder and a graph set up
            # for every image.)
            path, offset, size, label = row
            return rrc_flip_to_tensor(pil_decode(os.pread(files[path], size, offset))), label

        def collate(items):
            return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])

        def epoch_batches(epoch):
            # Its thread pipeline: the samples (shuffled per epoch) as the source, decoded on
            # its threads, batched, collated; completion order, its default.
            order = np.random.default_rng(epoch).permutation(len(table))
            pipeline = (PipelineBuilder()
                        .add_source(table[k] for k in order)
                        .pipe(decode, concurrency=threads)
                        .aggregate(BATCH)
                        .pipe(collate)
                        .add_sink(3)
                        .build(num_threads=threads))
            with pipeline.auto_stop():
                yield from pipeline.get_iterator()
    elif lib == "energon":
        from importlib.metadata import version
        from megatron.energon import (DefaultTaskEncoder, ImageClassificationSample,
                                      SampleDecoder, WorkerConfig, get_loader, get_train_dataset)
        versions["megatron-energon"] = version("megatron-energon")

        class Encoder(DefaultTaskEncoder):
            decoder = SampleDecoder(image_decode="pilrgb")

            def encode_sample(self, s):
                return ImageClassificationSample.derive_from(
                    s, image=rrc_flip_to_tensor(s.image), label=int(s.label))

            def batch(self, samples):
                return (torch.stack([s.image for s in samples]),
                        torch.tensor([s.label for s in samples]))

        # Its documented training set-up: a shuffle buffer of 100, sequences of at most 100
        # samples from one shard, the workers in WorkerConfig. A training set repeats
        # forever, so an epoch is the data set's count of images.
        ds = get_train_dataset(cfg["copies"]["energon"], batch_size=BATCH,
                               shuffle_buffer_size=100, max_samples_per_sequence=100,
                               worker_config=WorkerConfig(rank=0, world_size=1,
                                                          num_workers=threads),
                               task_encoder=Encoder())
        dl = get_loader(ds)
        it = iter(dl)

        def epoch_batches(epoch):
            n = 0
            while n < cfg["images"]:
                b = next(it)
                n += int(b[0].shape[0])
                yield b
    elif lib == "dali":
        from importlib.metadata import version
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
        versions["nvidia-dali"] = version("nvidia-dali-cuda120")
        paths = shard_paths(cfg["manifest"])
        idx = cfg["copies"]["dali"]

        # The CPU pipeline (device_id=None) of DALI's ResNet-50 recipe: its webdataset reader
        # shuffling, image_random_crop decoding only the crop (its defaults are torchvision's
        # scale and ratio), resize (antialiased), a random flip.
        @pipeline_def(batch_size=BATCH, num_threads=threads, device_id=None, seed=0)
        def pipe():
            jpegs, cls = fn.readers.webdataset(
                paths=paths, index_paths=[os.path.join(idx, f"part-{i:05d}.idx")
                                          for i in range(len(paths))],
                ext=["jpg", "cls"], random_shuffle=True, name="Reader",
                missing_component_behavior="error")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
            images = fn.flip(images, horizontal=fn.random.coin_flip())
            # The label's text, padded to a fixed width so the batch is one tensor.
            return images, fn.pad(cls, fill_value=0, shape=[16], axes=[0])

        p = pipe()
        p.build()
        dali_it = DALIGenericIterator(p, ["jpg", "cls"], reader_name="Reader",
                                      last_batch_policy=LastBatchPolicy.PARTIAL)

        def epoch_batches(epoch):
            for b in dali_it:
                text = b[0]["cls"].numpy()
                yield b[0]["jpg"], torch.tensor([int(bytes(r).rstrip(b"\0")) for r in text])
            dali_it.reset()
    else:
        raise SystemExit(f"unknown contender {lib}")

    first = t_first = None
    images = batches = first_images = 0
    images_per_epoch = []
    t_iter = time.perf_counter()
    for epoch in range(epochs):
        if set_epoch is not None:
            set_epoch(epoch)
        epoch_images = 0
        for b in (epoch_batches(epoch) if epoch_batches is not None else dl):
            if isinstance(b, dict):
                x, y = b["jpg"], b["cls"]
            else:
                x, y = b[0], b[1]
            epoch_images += int(x.shape[0])
            if first is None:
                first = time.perf_counter() - t_start
                t_first = time.perf_counter()
                first_images = int(x.shape[0])
                assert (tuple(x.shape[1:]) == (SIZE, SIZE, 3) and x.dtype == torch.uint8
                        and y.dtype == torch.int64 and y.shape == x.shape[:1]), \
                    (lib, x.shape, x.dtype, y.shape, y.dtype)
            else:
                images += int(x.shape[0])
                batches += 1
            del b, x, y
        images_per_epoch.append(epoch_images)
    t_end = time.perf_counter()
    seconds = t_end - t_first
    # Worker processes count once they are joined: drop the loader first.
    dl = ds = it = epoch_batches = None
    import gc
    gc.collect()
    # The whole run after `import torch`: set-up, start-up, every batch (a loader that works
    # ahead before its first batch is not flattered by a window that starts after it).
    cpu = cpu_seconds() - cpu_start
    return {"first_batch_s": first, "images": images, "batches": batches, "seconds": seconds,
            "images_per_s": images / seconds if seconds > 0 else None,
            # Everything from the first iter() on, the first batch included: a shuffle
            # buffer that decodes before the first batch is not hidden here.
            "with_first_batch_images_per_s": (images + first_images) / (t_end - t_iter),
            "cpu_s": cpu,
            "images_per_cpu_s": (images + first_images) / cpu if cpu > 0 else None,
            "images_per_epoch": images_per_epoch, "versions": versions}


# -- the driver ----------------------------------------------------------------------------

CONTENDERS = (
    ("shardstream", "shardstream"),
    ("shardstream_noshuffle", "shardstream (shuffle=False)"),
    ("webdataset", "WebDataset"),
    ("streaming", "Streaming"),
    ("litdata", "LitData"),
    ("grain", "Grain"),
    ("spdl", "SPDL"),
    ("energon", "Megatron-Energon"),
    ("dali", "DALI (CPU)"),
    ("decode_limit", "decode limit"),
)
PEERS = ("webdataset", "streaming", "litdata", "grain", "spdl", "energon", "dali")
# Peers whose own format is written once, by a child running this file with the flag, under
# the Python that has the peer (PEERS_PYTHON: the peers' venv of scripts/bench_env.sh).
COPIES = {"litdata": "--write-litdata", "grain": "--write-grain", "dali": "--write-dali-index",
          "energon": "--write-energon"}
PEERS_PYTHON = ("dali", "energon")
IMPORTS = {"litdata": "litdata", "grain": "array_record", "spdl": "spdl.pipeline",
           "energon": "megatron.energon", "dali": "nvidia.dali", "webdataset": "webdataset"}


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ensure_decode_limit(path: str, out_dir: str) -> tuple:
    """(program, None), or (None, why): the CMake-built decode limit at `path`, else the same
    source compiled here with g++ into out_dir (it needs only TurboJPEG)."""
    if os.access(path, os.X_OK):
        return path, None
    built = os.path.join(out_dir, "decode_limit_benchmark")
    src = os.path.join(ROOT, "benchmarks", "decode_limit_benchmark.cc")
    if os.access(built, os.X_OK) and os.path.getmtime(built) >= os.path.getmtime(src):
        return built, None
    import subprocess
    log(f"decode limit: {path} not built; compiling {src} with g++")
    r = subprocess.run(["g++", "-O2", "-std=c++17", src, "-o", built, "-lturbojpeg", "-pthread"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"could not compile {src}: {r.stderr.strip()[-300:]}"
    return built, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None,
                    help="data directory [/tmp/ss-vision, or /tmp/ss-vision-lsN with --long-side]")
    ap.add_argument("--images", type=int, default=20000, help="images in the data set [20000]")
    ap.add_argument("--long-side", type=int, default=None,
                    help="resize each image so its long side is this (LitData's ImageNet recipe: "
                         "256) [sides drawn from 300..640]")
    ap.add_argument("--runs", type=int, default=3, help="runs of each contender; medians [3]")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run [1]")
    ap.add_argument("--threads", type=int, default=2,
                    help="reader threads / DataLoader workers / decode threads [2]")
    ap.add_argument("--libs", default="shardstream,shardstream_noshuffle,webdataset,streaming",
                    help="contenders, comma-separated, from: " +
                         ",".join(n for n, _ in CONTENDERS if n != "decode_limit") +
                         ", or 'all' [shardstream,shardstream_noshuffle,webdataset,streaming]; "
                         "the decode limit always runs")
    ap.add_argument("--skip-streaming", action="store_true")
    ap.add_argument("--skip-webdataset", action="store_true")
    ap.add_argument("--decode-limit-bin",
                    default=os.path.join(ROOT, "build", "benchmarks", "decode_limit_benchmark"),
                    help="the decode limit program [build/benchmarks/decode_limit_benchmark; "
                         "compiled with g++ into --dir when missing]")
    ap.add_argument("--decode-limit-seconds", type=float, default=3.0,
                    help="the decode limit runs at least this long, and at least one pass [3]")
    ap.add_argument("--streaming-python",
                    default=os.path.join(ROOT, ".venv-bench", "bin", "python"),
                    help="Python of the Streaming environment (scripts/bench_env.sh) "
                         "[.venv-bench/bin/python]")
    ap.add_argument("--peers-python",
                    default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="Python with DALI and Megatron-Energon (scripts/bench_env.sh "
                         "--peers-venv) [.venv-peers/bin/python]")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object (last stdout line) instead of the table")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    for flag in ("--write-mds",) + tuple(COPIES.values()):
        ap.add_argument(flag, nargs=2, metavar=("MANIFEST", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(json.loads(args.child))))
        return
    for flag, fn in (("write_mds", write_mds), ("write_litdata", write_litdata),
                     ("write_grain", write_grain), ("write_dali_index", write_dali_index),
                     ("write_energon", write_energon)):
        if getattr(args, flag):
            fn(*getattr(args, flag))
            return

    load_before = os.getloadavg()
    if args.long_side:
        # Images of 15-20 KiB: shards of 32 MiB, so that every worker of a shard-splitting
        # peer gets several (20,000 images make 10).
        DATA_PARAMS.update(long_side=args.long_side, max_bytes="32MiB")
    root = os.path.abspath(args.dir or ("/tmp/ss-vision" + (f"-ls{args.long_side}"
                                                             if args.long_side else "")))
    info = make_data(root, args.images)
    manifest = os.path.join(root, "manifest.jsonl")
    shards = shard_paths(manifest)
    names = [n for n, _ in CONTENDERS if n != "decode_limit"]
    want = names if args.libs == "all" else [x for x in args.libs.split(",") if x]
    unknown = sorted(set(want) - set(names))
    if unknown:
        raise SystemExit(f"--libs: unknown contender(s) {', '.join(unknown)}; "
                         f"known: {', '.join(names)}")

    skipped = {n: "not asked for (--libs)" for n in names if n not in want}
    if args.skip_webdataset:
        skipped["webdataset"] = "skipped (--skip-webdataset)"
    if args.skip_streaming:
        skipped["streaming"] = "skipped (--skip-streaming)"
    streaming_python = os.path.abspath(args.streaming_python)
    peers_python = os.path.abspath(args.peers_python)

    def python_of(name: str) -> str:
        return (streaming_python if name == "streaming" else
                peers_python if name in PEERS_PYTHON else sys.executable)

    mds = None
    if "streaming" not in skipped:
        if not os.path.exists(streaming_python):
            skipped["streaming"] = (f"no Streaming environment at {streaming_python}: run "
                                    "scripts/bench_env.sh, or pass --streaming-python")
        else:
            try:
                mds = ensure_mds(streaming_python, ME, manifest, os.path.join(root, "mds"),
                                 info["params"])
            except RuntimeError as e:
                skipped["streaming"] = str(e)
    copies = {}  # peer -> the directory of its own format
    for name in IMPORTS:
        if name in skipped:
            continue
        why = peer_missing(python_of(name), IMPORTS[name], "bash scripts/bench_env.sh " +
                           ("--peers-venv" if name in PEERS_PYTHON else "--peers"))
        if why:
            skipped[name] = why
            continue
        if name in COPIES:
            try:
                copies[name] = ensure_mds(python_of(name), ME, manifest,
                                          os.path.join(root, name), info["params"],
                                          flag=COPIES[name], what=f"{name} copy")
            except RuntimeError as e:
                skipped[name] = str(e)
    decode_bin, why = ensure_decode_limit(os.path.abspath(args.decode_limit_bin), root)
    if why:
        skipped["decode_limit"] = why

    extra = [os.path.join(mds, f) for f in sorted(os.listdir(mds))] if mds else []
    for d in copies.values():
        extra += [os.path.join(d, f) for f in sorted(os.listdir(d))
                  if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))]
    warm_cache(shards + extra)

    def command(name: str) -> list:
        if name == "decode_limit":
            return [decode_bin, "--threads", str(args.threads), "--seconds",
                    str(args.decode_limit_seconds)] + shards
        cfg = {"lib": name, "manifest": manifest, "mds": mds, "epochs": args.epochs,
               "threads": args.threads, "copies": copies, "images": args.images}
        return [python_of(name), ME, "--child", json.dumps(cfg)]

    torch_rss = import_torch_rss(args.runs)

    def report(r: int, name: str, res):
        if isinstance(res, RuntimeError):
            why = f"failed: {res}"
            log(f"run {r + 1}/{args.runs} {name}: {why}")
            return why
        log(f"run {r + 1}/{args.runs} {name}: {res['images_per_s']:.1f} images/s"
            + (f", {res['images_per_cpu_s']:.1f} per CPU s"
               if res.get("images_per_cpu_s") else "")
            + (f", first batch {res['first_batch_s'] * 1000:.0f} ms"
               if res.get("first_batch_s") is not None else "")
            + f", peak RSS {res['peak_rss'] / 2**20:.0f} MiB")

    runs = interleave(args.runs, [(n, n, command(n)) for n, _ in CONTENDERS if n not in skipped],
                      skipped, report)

    results = {}
    for name, label in CONTENDERS:
        if name in skipped or not runs.get(name):
            results[name] = {"label": label, "images_per_s": None,
                             "reason": skipped.get(name, "no runs")}
            continue
        rs = runs[name]
        res = {"label": label,
               "images_per_s": median_or_none(x["images_per_s"] for x in rs),
               "first_batch_s": median_or_none(x.get("first_batch_s") for x in rs),
               "peak_rss_bytes": median_or_none(x["peak_rss"] for x in rs),
               "runs_images_per_s": [x["images_per_s"] for x in rs]}
        if name == "decode_limit":
            res["megapixels_per_s"] = median_or_none(x["megapixels_per_s"] for x in rs)
            res["decoded_per_run"] = [x["decoded"] for x in rs]
            # Its threads are busy the whole time: a CPU second per thread-second.
            res["images_per_cpu_s"] = res["images_per_s"] / args.threads
        else:
            res["with_first_batch_images_per_s"] = median_or_none(
                x["with_first_batch_images_per_s"] for x in rs)
            res["images_per_cpu_s"] = median_or_none(x.get("images_per_cpu_s") for x in rs)
            res["images_per_epoch"] = rs[-1].get("images_per_epoch")
            res["images_per_run"] = [x["images"] for x in rs]
            res["versions"] = rs[-1].get("versions")
        results[name] = res

    def rate(name, key="images_per_s"):
        return results[name].get(key)

    def ratio(a, b, key="images_per_s"):
        return rate(a, key) / rate(b, key) if rate(a, key) and rate(b, key) else None

    ran_peers = [n for n in PEERS if rate(n)]
    fastest = max(ran_peers, key=rate, default=None)
    fastest_cpu = max(ran_peers, key=lambda n: rate(n, "images_per_cpu_s") or 0, default=None)
    summary = {
        "images_per_s": rate("shardstream"),
        "images_per_cpu_s": rate("shardstream", "images_per_cpu_s"),
        "with_first_batch_images_per_s": results["shardstream"].get(
            "with_first_batch_images_per_s"),
        "first_batch_s": results["shardstream"].get("first_batch_s"),
        "peak_rss_bytes": results["shardstream"].get("peak_rss_bytes"),
        "shardstream_noshuffle_images_per_s": rate("shardstream_noshuffle"),
        "decode_limit_images_per_s": rate("decode_limit"),
        "ratio_to_decode_limit": ratio("shardstream", "decode_limit"),
        "noshuffle_ratio_to_decode_limit": ratio("shardstream_noshuffle", "decode_limit"),
        "noshuffle_ratio_to_webdataset": ratio("shardstream_noshuffle", "webdataset"),
        "fastest_peer": fastest,
        "ratio_to_fastest_peer": ratio("shardstream", fastest) if fastest else None,
        "fastest_peer_per_cpu_s": fastest_cpu,
        "ratio_to_fastest_peer_per_cpu_s": (ratio("shardstream", fastest_cpu, "images_per_cpu_s")
                                            if fastest_cpu else None),
    }
    for name in PEERS:
        summary[f"{name}_images_per_s"] = rate(name)
        summary[f"ratio_to_{name}"] = ratio("shardstream", name)
        summary[f"ratio_to_{name}_per_cpu_s"] = ratio("shardstream", name, "images_per_cpu_s")
    for name in PEERS + ("decode_limit", "shardstream_noshuffle"):
        if rate(name) is None:
            summary[f"{name}_reason"] = results[name]["reason"]
        else:
            if name != "decode_limit":
                summary[f"{name}_first_batch_s"] = results[name].get("first_batch_s")
                summary[f"{name}_with_first_batch_images_per_s"] = results[name].get(
                    "with_first_batch_images_per_s")
            summary[f"{name}_peak_rss_bytes"] = results[name].get("peak_rss_bytes")
    notes = []
    if args.images * args.epochs < 20 * 1000:
        notes.append(f"{args.images} images x {args.epochs} epoch(s) is small next to the "
                     "1000-sample shuffle buffers: a loader that decodes into its buffer before "
                     "the first batch (shardstream with shuffle on) does that work outside the "
                     "after-first-batch window; compare with_first_batch_images_per_s")
    if info["shards"] < args.threads:
        notes.append(f"{info['shards']} shard(s) for {args.threads} workers: WebDataset splits "
                     "shards between workers, so some of its workers get nothing")
    summary.update({
        "notes": notes,
        "import_torch_rss_bytes": torch_rss,
        "contenders": results,
        "settings": {
            "dir": root, "images": args.images, "long_side": args.long_side, "runs": args.runs,
            "epochs": args.epochs, "threads": args.threads, "batch_size": BATCH, "size": SIZE,
            "decode_limit_bin": decode_bin, "decode_limit_seconds": args.decode_limit_seconds,
            "streaming_python": streaming_python if "streaming" not in skipped else None,
            "peers_python": peers_python,
            "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "load_average_before": load_before,
        },
        "data": info,
    })

    if args.json:
        print(json.dumps(summary))
        return
    print_table(args, info, torch_rss, results, notes)


def print_table(args, info, torch_rss, results, notes) -> None:
    mib = 2 ** 20
    print(f"{args.images} JPEGs ({info['mean_megapixels']:.2f} MP, "
          f"{info['mean_jpeg_bytes'] / 1024:.0f} KiB on average) -> [{BATCH}, {SIZE}, {SIZE}, 3] "
          f"uint8, {args.threads} threads/workers, {args.epochs} epoch(s), median of {args.runs}; "
          f"import torch alone: {torch_rss / mib:.0f} MiB")
    print(f"{'contender':28s} {'images/s':>9s} {'(with 1st)':>10s} {'per CPU s':>9s} "
          f"{'first batch':>12s} {'peak RSS':>9s} {'shardstream/x':>14s} {'per CPU s':>9s}  runs")
    ss = results["shardstream"]
    for name, label in CONTENDERS:
        res = results[name]
        if res["images_per_s"] is None:
            print(f"{label:28s} {'-':>9s}  ({res['reason']})")
            continue
        fb = (f"{res['first_batch_s'] * 1000:9.0f} ms" if res.get("first_batch_s") is not None
              else f"{'-':>12s}")
        x = (ss["images_per_s"] / res["images_per_s"]) if ss["images_per_s"] else None
        xc = (ss["images_per_cpu_s"] / res["images_per_cpu_s"]
              if ss.get("images_per_cpu_s") and res.get("images_per_cpu_s") else None)
        wf = res.get("with_first_batch_images_per_s")
        wf = f"{wf:10.1f}" if wf is not None else f"{'-':>10s}"
        pc = res.get("images_per_cpu_s")
        pc = f"{pc:9.1f}" if pc else f"{'-':>9s}"
        print(f"{label:28s} {res['images_per_s']:9.1f} {wf} {pc} {fb} "
              f"{res['peak_rss_bytes'] / mib:5.0f} MiB"
              f" {(f'{x:.2f}x' if x else '-'):>14s} {(f'{xc:.2f}x' if xc else '-'):>9s}  "
              + ", ".join(f"{v:.0f}" for v in res["runs_images_per_s"]))
    if results["decode_limit"].get("megapixels_per_s"):
        print(f"decode limit: {results['decode_limit']['megapixels_per_s']:.0f} MP/s "
              "(full-size TurboJPEG decode only; its RSS holds every JPEG in memory; per CPU s "
              "counts its threads busy throughout)")
    print("images/s: whole epochs after the first batch; (with 1st): from the first iter() "
          "on, first batch included; per CPU s: every image delivered over the process tree's CPU "
          "seconds after `import torch` (set-up, workers' start-up and every batch)")
    for n in notes:
        print("note: " + n)


if __name__ == "__main__":
    main()
