"""Writes the image test files in this directory (run with Pillow 13 and numpy).

Good images in every colour mode the decoders convert, the RGB pixels Pillow
gives for each (<name>.rgb.npy, Image.convert("RGB")), and bad ones: truncated,
corrupt, unsupported, and a decompression bomb header.
"""
import io
import os
import struct
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def scene(h, w, seed):
    """A natural-looking test picture: gradients, discs and a little noise."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / w * 255, y / h * 255, (x + y) / (w + h) * 255], -1)
    for _ in range(6):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(5, min(h, w) / 3)
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def save(name, im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    data = b.getvalue()
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    np.save(os.path.join(HERE, name + ".rgb.npy"), ref)
    return data


def png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def adam7_png(rgb):
    """An interlaced RGB PNG (Pillow writes none): Adam7 passes, filter 0."""
    h, w, _ = rgb.shape
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = rgb[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in sub:
            raw += b"\x00" + row.tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw))
            + png_chunk(b"IEND", b""))


def main():
    rgb = Image.fromarray(scene(61, 83, 1))
    save("rgb.jpg", rgb, "JPEG", quality=90)
    save("rgb420_odd.jpg", Image.fromarray(scene(97, 131, 2)), "JPEG", quality=85, subsampling=2)
    save("progressive.jpg", rgb, "JPEG", quality=90, progressive=True)
    save("gray.jpg", rgb.convert("L"), "JPEG", quality=90)
    save("cmyk.jpg", rgb.convert("CMYK"), "JPEG", quality=95)
    save("rgb.png", rgb, "PNG")
    data = adam7_png(np.asarray(rgb))
    with open(os.path.join(HERE, "interlaced.png"), "wb") as f:
        f.write(data)
    np.save(os.path.join(HERE, "interlaced.png.rgb.npy"),
            np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    assert Image.open(io.BytesIO(data)).info.get("interlace") == 1
    rgba = rgb.copy()
    rgba.putalpha(Image.fromarray(scene(61, 83, 3)[:, :, 0]))
    save("rgba.png", rgba, "PNG")
    save("la.png", rgba.convert("LA"), "PNG")
    save("palette.png", rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=40), "PNG",
         transparency=3)
    g16 = (scene(61, 83, 4)[:, :, 0].astype(np.uint16) * 3)  # values above 255: clipped
    save("gray16.png", Image.fromarray(g16), "PNG")
    save("gray1.png", rgb.convert("1"), "PNG")
    save("lossy.webp", rgb, "WEBP", quality=80)
    save("lossless_alpha.webp", rgba, "WEBP", lossless=True)

    jpg = open(os.path.join(HERE, "rgb.jpg"), "rb").read()
    bad = {
        "truncated.jpg": jpg[: len(jpg) * 2 // 3],
        "corrupt.jpg": jpg[:200] + bytes(b ^ 0x5A for b in jpg[200:600]) + jpg[600:],
        "empty.jpg": b"",
        "not_image.jpg": b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
    }
    png = open(os.path.join(HERE, "rgb.png"), "rb").read()
    bad["truncated.png"] = png[: len(png) // 2]
    crc = bytearray(png)
    crc[len(png) // 2] ^= 0xFF  # inside the image data: a bad CRC or bad deflate
    bad["corrupt.png"] = bytes(crc)
    # A bomb: the header declares 20000 x 20000 pixels over a tiny body.
    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    bad["bomb.png"] = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                       png_chunk(b"IDAT", zlib.compress(b"\x00" * 100)) + png_chunk(b"IEND", b""))
    webp = open(os.path.join(HERE, "lossy.webp"), "rb").read()
    bad["truncated.webp"] = webp[: len(webp) // 2]
    for name, data in bad.items():
        with open(os.path.join(HERE, "bad_" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
