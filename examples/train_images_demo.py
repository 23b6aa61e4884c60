"""The shardstream image demo: a small CNN trained from JPEG shards, with each
image decoded, randomly cropped, flipped and resized to 64x64 on the loader's
C++ reader threads (no Python per sample), normalised on the device; then
evaluated with a center crop, and one batch through a Python ``map`` hook on
top of the native path, to show that the two compose.

    python examples/train_images_demo.py [--dir /tmp/shardstream-images] [--images 2048]

The images (random sizes, 96-256 px a side) are a coloured disc on a noisy
gradient, all in the hue of one of 4 classes: easy to learn from random crops.
Prints per epoch: images/s, the time the training loop waited for batches
(the GPU-idle proxy) and the loss; then the evaluation accuracy.
"""

import argparse
import io
import os
import shutil
import time

import numpy as np
import torch
from PIL import Image

import shardstream
from shardstream.torch import ShardDataset

CLASSES = ["red", "yellow-green", "cyan", "purple"]  # hues 0, 90, 180, 270 degrees
SIZE = 64


def hue_rgb(hue: np.ndarray, sat: np.ndarray, val: np.ndarray) -> np.ndarray:
    """HSV (hue in degrees, sat and val in [0, 1]) to RGB floats in [0, 255]."""
    k = (np.array([5.0, 3.0, 1.0]) + np.asarray(hue)[..., None] / 60.0) % 6
    rgb = 1 - np.clip(np.minimum(k, 4 - k), 0, 1) * np.asarray(sat)[..., None]
    return 255 * np.asarray(val)[..., None] * rgb


def make_image(rng: np.random.Generator, label: int) -> bytes:
    """A JPEG: a gradient between two tints of the class hue, a disc of the
    class colour, and pixel noise; the hue is jittered by up to 30 degrees."""
    h, w = (int(v) for v in rng.integers(96, 257, size=2))
    hue = 90.0 * label + rng.uniform(-30, 30, size=3)
    ends = hue_rgb(hue[:2], rng.uniform(0.25, 0.6, 2), rng.uniform(0.35, 0.9, 2))
    t = np.linspace(0, 1, w if rng.random() < 0.5 else h)
    t = t[None, :, None] if len(t) == w else t[:, None, None]
    img = ends[0] * (1 - t) + ends[1] * t + np.zeros((h, w, 3))
    yy, xx = np.mgrid[:h, :w]
    cy, cx, r = rng.uniform(0.25, 0.75) * h, rng.uniform(0.25, 0.75) * w, rng.uniform(0.2, 0.4) * min(h, w)
    img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = hue_rgb(hue[2], rng.uniform(0.7, 1.0), rng.uniform(0.7, 1.0))
    img += rng.normal(0, 18, img.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def make_dataset(out_dir: str, images: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    with shardstream.ShardWriter(out_dir, max_bytes="2MiB") as w:
        for i in range(images):
            label = int(rng.integers(len(CLASSES)))
            w.write({"__key__": f"img{i:06d}", "jpg": make_image(rng, label), "cls": label})
    return os.path.join(out_dir, "manifest.jsonl")


def model() -> torch.nn.Module:
    def block(cin: int, cout: int) -> list:
        return [torch.nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
                torch.nn.BatchNorm2d(cout), torch.nn.ReLU(inplace=True)]
    return torch.nn.Sequential(*block(3, 16), *block(16, 32), *block(32, 64),  # 64 -> 8 px
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(64, len(CLASSES)))


def normalise(batch, device: torch.device) -> torch.Tensor:
    """uint8 [B, H, W, 3] to the ImageNet-normalised float [B, 3, H, W], on the device."""
    x = batch["jpg"].to(device, non_blocking=True).permute(0, 3, 1, 2).float()
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    x = (x - mean) / (torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255)
    return x


def brightness_jitter(sample: dict) -> dict:
    """A per-sample Python hook: scale the pixels by a random factor in [0.6, 1.4]."""
    factor = torch.empty(()).uniform_(0.6, 1.4)
    sample["jpg"] = (sample["jpg"].float() * factor).clamp_(0, 255).to(torch.uint8)
    sample["factor"] = factor.item()
    return sample


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/shardstream-images")
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--eval-images", type=int, default=384)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shutil.rmtree(args.dir, ignore_errors=True)

    print(f"== 1. write {args.images} training and {args.eval_images} evaluation JPEGs "
          f"(96-256 px, {len(CLASSES)} classes) into shards")
    t0 = time.perf_counter()
    train_manifest = make_dataset(os.path.join(args.dir, "train"), args.images, seed=0)
    eval_manifest = make_dataset(os.path.join(args.dir, "eval"), args.eval_images, seed=1)
    n = len(os.listdir(os.path.join(args.dir, "train"))) - 1
    print(f"   {n} training shards, manifest {train_manifest} ({time.perf_counter() - t0:.1f} s)")

    print(f"== 2. train {args.epochs} epochs on {device}: decode, random-resized crop, flip and "
          f"resize to {SIZE}x{SIZE} in C++")
    train = ShardDataset(train_manifest, batch_size=args.batch_size, seed=42, fields=[
        {"name": "jpg", "decode": "image", "size": [SIZE, SIZE], "crop": "random_resized", "flip": True},
        "cls"])
    net = model().to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    before: dict = {}
    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        net.train()
        t0, images, losses = time.perf_counter(), 0, []
        for batch in train.dataloader():
            if epoch == 0 and not images:
                print(f"   a batch: jpg {batch['jpg'].dtype} {list(batch['jpg'].shape)}, "
                      f"cls {batch['cls'].dtype} {list(batch['cls'].shape)}")
            x = normalise(batch, device)
            loss = torch.nn.functional.cross_entropy(net(x), batch["cls"].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            images += len(batch["cls"])
            losses.append(loss.item())
        seconds = time.perf_counter() - t0
        after = train.stats()
        waited = after["wait_seconds"] - before.get("wait_seconds", 0.0)
        print(f"   epoch {epoch}: {images} images in {seconds:.2f} s, {images / seconds:,.0f} images/s "
              f"(loader since its start: {after['samples_per_s']:,.0f}/s), waited for batches "
              f"{waited * 1000:.0f} ms ({100 * waited / seconds:.0f}% of the epoch), "
              f"loss {np.mean(losses):.3f} (last batch {losses[-1]:.3f})")
        before = after
    train.close()

    print(f"== 3. evaluate on {args.eval_images} held-out images (center crop, mode='eval': "
          "manifest order, each once)")
    val = ShardDataset(eval_manifest, batch_size=256, shuffle=False, mode="eval", fields=[
        {"name": "jpg", "decode": "image", "size": [SIZE, SIZE], "crop": "center"}, "cls"])
    net.eval()
    correct = total = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for batch in val.dataloader():
            pred = net(normalise(batch, device)).argmax(1).cpu()
            correct += int((pred == batch["cls"]).sum())
            total += len(batch["cls"])
    val.close()
    accuracy = correct / total
    print(f"   accuracy {100 * accuracy:.1f}% ({correct}/{total}; chance {100 / len(CLASSES):.0f}%), "
          f"{total / (time.perf_counter() - t0):,.0f} images/s")

    print("== 4. a Python map hook on top of the C++ path: random brightness per sample")
    spec = [{"name": "jpg", "decode": "image", "size": [SIZE, SIZE], "crop": "random_resized",
             "flip": True}, "cls"]
    native_ds = ShardDataset(train_manifest, batch_size=8, seed=42, fields=spec)
    hooked_ds = ShardDataset(train_manifest, batch_size=8, seed=42, fields=spec, map=brightness_jitter)
    plain, hooked = next(iter(native_ds)), next(iter(hooked_ds))
    native_ds.close()
    hooked_ds.close()
    assert plain["__key__"] == hooked["__key__"]  # same samples, same native crops
    ratio = hooked["jpg"].float().mean((1, 2, 3)) / plain["jpg"].float().mean((1, 2, 3))
    print(f"   jpg {hooked['jpg'].dtype} {list(hooked['jpg'].shape)}; per-sample factors "
          f"{' '.join(f'{f:.2f}' for f in hooked['factor'].tolist())}")
    print(f"   mean pixel, hooked / native (same keys, same C++ crops; 255 clips): "
          f"{' '.join(f'{r:.2f}' for r in ratio.tolist())}")

    ok = accuracy > 0.6
    print("image demo done" if ok else "image demo FAILED: accuracy not above 60%")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
