"""ImageNet-style input: shardstream vs WebDataset vs MosaicML Streaming vs the JPEG decode limit.

    python benchmarks/vision_benchmark.py [--images 20000] [--runs 3] [--threads 2] [--json]

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
4. The decode limit: benchmarks/decode_limit_benchmark (C++, TurboJPEG) decodes
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

The Streaming environment: bash scripts/bench_env.sh (makes .venv-bench);
the decode limit: cmake --build build --target decode_limit_benchmark, or
g++ -O2 -std=c++17 benchmarks/decode_limit_benchmark.cc -lturbojpeg -pthread
and --decode-limit-bin. A contender that is skipped or fails is null in the
JSON, with a *_reason field.
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

from bench_common import (ensure_mds, finish_dir, import_torch_rss, interleave, log,
                          prepare_dir, shard_paths, warm_cache)

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


def rrc_flip_to_tensor(img):
    """torchvision v2 RandomResizedCrop(224, antialias=True) + RandomHorizontalFlip()
    on a PIL image, with the calls torchvision 0.28 makes; then a [224, 224, 3] uint8 tensor."""
    import numpy as np
    import torch
    from PIL import Image
    width, height = img.size
    area = height * width
    for _ in range(10):  # RandomResizedCrop.make_params
        target_area = area * torch.empty(1).uniform_(0.08, 1.0).item()
        aspect_ratio = math.exp(torch.empty(1).uniform_(_LOG_RATIO[0], _LOG_RATIO[1]).item())
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,)).item())
            j = int(torch.randint(0, width - w + 1, size=(1,)).item())
            break
    else:  # central fallback
        in_ratio = float(width) / float(height)
        if in_ratio < 3 / 4:
            w = width
            h = int(round(w / (3 / 4)))
        elif in_ratio > 4 / 3:
            h = height
            w = int(round(h * (4 / 3)))
        else:
            w, h = width, height
        i = (height - h) // 2
        j = (width - w) // 2
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


# -- one contender, in its own process -------------------------------------------------------

def run_one(cfg: dict) -> dict:
    """Child: iterates cfg["epochs"] epochs of contender cfg["lib"], returns timings."""
    import torch
    t_start = time.perf_counter()
    lib, epochs, threads = cfg["lib"], cfg["epochs"], cfg["threads"]
    versions = {"torch": torch.__version__}
    set_epoch = None
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
    else:
        raise SystemExit(f"unknown contender {lib}")

    first = t_first = None
    images = batches = first_images = 0
    t_iter = time.perf_counter()
    for epoch in range(epochs):
        if set_epoch is not None:
            set_epoch(epoch)
        for b in dl:
            if isinstance(b, dict):
                x, y = b["jpg"], b["cls"]
            else:
                x, y = b[0], b[1]
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
    t_end = time.perf_counter()
    seconds = t_end - t_first
    return {"first_batch_s": first, "images": images, "batches": batches, "seconds": seconds,
            "images_per_s": images / seconds if seconds > 0 else None,
            # Everything from the first iter() on, the first batch included: a shuffle
            # buffer that decodes before the first batch is not hidden here.
            "with_first_batch_images_per_s": (images + first_images) / (t_end - t_iter),
            "versions": versions}


# -- the driver ----------------------------------------------------------------------------

CONTENDERS = (
    ("shardstream", "shardstream"),
    ("shardstream_noshuffle", "shardstream (shuffle=False)"),
    ("webdataset", "WebDataset"),
    ("streaming", "Streaming"),
    ("decode_limit", "decode limit"),
)


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/ss-vision", help="data directory [/tmp/ss-vision]")
    ap.add_argument("--images", type=int, default=20000, help="images in the data set [20000]")
    ap.add_argument("--runs", type=int, default=3, help="runs of each contender; medians [3]")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run [1]")
    ap.add_argument("--threads", type=int, default=2,
                    help="reader threads / DataLoader workers / decode threads [2]")
    ap.add_argument("--skip-streaming", action="store_true")
    ap.add_argument("--skip-webdataset", action="store_true")
    ap.add_argument("--decode-limit-bin",
                    default=os.path.join(ROOT, "build", "benchmarks", "decode_limit_benchmark"),
                    help="the decode limit program [build/benchmarks/decode_limit_benchmark]")
    ap.add_argument("--decode-limit-seconds", type=float, default=3.0,
                    help="the decode limit runs at least this long, and at least one pass [3]")
    ap.add_argument("--streaming-python",
                    default=os.path.join(ROOT, ".venv-bench", "bin", "python"),
                    help="Python of the Streaming environment (scripts/bench_env.sh) "
                         "[.venv-bench/bin/python]")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object (last stdout line) instead of the table")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--write-mds", nargs=2, metavar=("MANIFEST", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(json.loads(args.child))))
        return
    if args.write_mds:
        write_mds(*args.write_mds)
        return

    load_before = os.getloadavg()
    root = os.path.abspath(args.dir)
    info = make_data(root, args.images)
    manifest = os.path.join(root, "manifest.jsonl")
    shards = shard_paths(manifest)

    skipped = {}  # contender -> reason it has no figure
    if args.skip_webdataset:
        skipped["webdataset"] = "skipped (--skip-webdataset)"
    mds = None
    streaming_python = os.path.abspath(args.streaming_python)
    if args.skip_streaming:
        skipped["streaming"] = "skipped (--skip-streaming)"
    elif not os.path.exists(streaming_python):
        skipped["streaming"] = (f"no Streaming environment at {streaming_python}: run "
                                "scripts/bench_env.sh, or pass --streaming-python")
    else:
        try:
            mds = ensure_mds(streaming_python, ME, manifest, os.path.join(root, "mds"),
                             info["params"])
        except RuntimeError as e:
            skipped["streaming"] = str(e)
    decode_bin = os.path.abspath(args.decode_limit_bin)
    if not os.access(decode_bin, os.X_OK):
        skipped["decode_limit"] = (f"{decode_bin} not built (cmake --build build --target "
                                   "decode_limit_benchmark, or g++ -O2 -std=c++17 "
                                   "benchmarks/decode_limit_benchmark.cc -lturbojpeg -pthread)")

    warm_cache(shards + ([os.path.join(mds, f) for f in sorted(os.listdir(mds))] if mds else []))

    def command(name: str) -> list:
        if name == "decode_limit":
            return [decode_bin, "--threads", str(args.threads), "--seconds",
                    str(args.decode_limit_seconds)] + shards
        cfg = {"lib": name, "manifest": manifest, "mds": mds, "epochs": args.epochs,
               "threads": args.threads}
        python = streaming_python if name == "streaming" else sys.executable
        return [python, ME, "--child", json.dumps(cfg)]

    torch_rss = import_torch_rss(args.runs)

    def report(r: int, name: str, res):
        if isinstance(res, RuntimeError):
            why = f"failed: {res}"
            log(f"run {r + 1}/{args.runs} {name}: {why}")
            return why
        log(f"run {r + 1}/{args.runs} {name}: {res['images_per_s']:.1f} images/s"
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
        else:
            res["with_first_batch_images_per_s"] = median_or_none(
                x["with_first_batch_images_per_s"] for x in rs)
            res["images_per_run"] = [x["images"] for x in rs]
            res["versions"] = rs[-1].get("versions")
        results[name] = res

    def rate(name):
        return results[name]["images_per_s"]

    def ratio(a, b):
        return rate(a) / rate(b) if rate(a) and rate(b) else None

    summary = {
        "images_per_s": rate("shardstream"),
        "with_first_batch_images_per_s": results["shardstream"].get(
            "with_first_batch_images_per_s"),
        "first_batch_s": results["shardstream"].get("first_batch_s"),
        "peak_rss_bytes": results["shardstream"].get("peak_rss_bytes"),
        "shardstream_noshuffle_images_per_s": rate("shardstream_noshuffle"),
        "webdataset_images_per_s": rate("webdataset"),
        "streaming_images_per_s": rate("streaming"),
        "decode_limit_images_per_s": rate("decode_limit"),
        "ratio_to_webdataset": ratio("shardstream", "webdataset"),
        "ratio_to_streaming": ratio("shardstream", "streaming"),
        "ratio_to_decode_limit": ratio("shardstream", "decode_limit"),
        "noshuffle_ratio_to_webdataset": ratio("shardstream_noshuffle", "webdataset"),
        "noshuffle_ratio_to_decode_limit": ratio("shardstream_noshuffle", "decode_limit"),
    }
    for name in ("webdataset", "streaming", "decode_limit", "shardstream_noshuffle"):
        prefix = name
        if rate(name) is None:
            summary[f"{prefix}_reason"] = results[name]["reason"]
        else:
            if name != "decode_limit":
                summary[f"{prefix}_first_batch_s"] = results[name].get("first_batch_s")
                summary[f"{prefix}_with_first_batch_images_per_s"] = results[name].get(
                    "with_first_batch_images_per_s")
            summary[f"{prefix}_peak_rss_bytes"] = results[name].get("peak_rss_bytes")
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
            "dir": root, "images": args.images, "runs": args.runs, "epochs": args.epochs,
            "threads": args.threads, "batch_size": BATCH, "size": SIZE,
            "decode_limit_bin": decode_bin, "decode_limit_seconds": args.decode_limit_seconds,
            "streaming_python": streaming_python if "streaming" not in skipped else None,
            "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "load_average_before": load_before,
        },
        "data": info,
    })

    if args.json:
        print(json.dumps(summary))
        return
    mib = 2 ** 20
    print(f"{args.images} JPEGs ({info['mean_megapixels']:.2f} MP, "
          f"{info['mean_jpeg_bytes'] / 1024:.0f} KiB on average) -> [{BATCH}, {SIZE}, {SIZE}, 3] "
          f"uint8, {args.threads} threads/workers, {args.epochs} epoch(s), median of {args.runs}; "
          f"import torch alone: {torch_rss / mib:.0f} MiB")
    print(f"{'contender':28s} {'images/s':>9s} {'(with 1st)':>10s} {'first batch':>12s} "
          f"{'peak RSS':>9s} {'shardstream/x':>14s}  runs")
    for name, label in CONTENDERS:
        res = results[name]
        if res["images_per_s"] is None:
            print(f"{label:28s} {'-':>9s}  ({res['reason']})")
            continue
        fb = (f"{res['first_batch_s'] * 1000:9.0f} ms" if res.get("first_batch_s") is not None
              else f"{'-':>12s}")
        x = ratio("shardstream", name)
        wf = res.get("with_first_batch_images_per_s")
        wf = f"{wf:10.1f}" if wf is not None else f"{'-':>10s}"
        print(f"{label:28s} {res['images_per_s']:9.1f} {wf} {fb} "
              f"{res['peak_rss_bytes'] / mib:5.0f} MiB"
              f" {(f'{x:.2f}x' if x else '-'):>14s}  "
              + ", ".join(f"{v:.0f}" for v in res["runs_images_per_s"]))
    if results["decode_limit"].get("megapixels_per_s"):
        print(f"decode limit: {results['decode_limit']['megapixels_per_s']:.0f} MP/s "
              "(full-size TurboJPEG decode only; its RSS holds every JPEG in memory)")
    print("images/s: whole epochs after the first batch; (with 1st): from the first iter() "
          "on, first batch included")
    for n in notes:
        print("note: " + n)


if __name__ == "__main__":
    main()
