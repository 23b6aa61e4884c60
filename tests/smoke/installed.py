"""What an installed shardstream must do on any machine, without torch: the sdist's and the
wheels' check (scripts/test_sdist.sh, scripts/test_wheels.sh on Debian 11).

Run from a directory it may write to: python installed.py. It writes shards with ShardWriter and
reads them back with the Loader, shuffled (every sample once, the same order twice); decodes a
JPEG, a PNG and a WebP in C++ and compares the pixels with Pillow's when Pillow is installed;
reads the set again over HTTP from a loopback server (the libcurl the package carries); and runs
the command-line tool as `shardstream` and as `python -m shardstream`. Where torch is not
installed, importing shardstream.torch must name the extra to install.
"""
import functools
import http.server
import io
import os
import subprocess
import sys
import threading

import numpy as np

import shardstream

assert shardstream.__file__.startswith(sys.prefix), shardstream.__file__
with shardstream.ShardWriter("set", max_samples=50) as w:
    for i in range(200):
        w.write({"__key__": f"s{i:04d}", "x.npy": np.full(4, i, dtype=np.int32), "cls": i % 10})


def read(manifest, **kw):
    seen = []
    with shardstream.Loader(manifest, batch_size=32, seed=3, **kw) as loader:
        for b in loader:
            seen += [int(v) for v in b["x.npy"][:, 0]]
    return seen


first = read("set/manifest.jsonl", shuffle_buffer=100)
assert sorted(first) == list(range(200)), "every sample once"
assert first != list(range(200)), "shuffled"
assert read("set/manifest.jsonl", shuffle_buffer=100) == first, "the same seed, the same order"
checks = ["200 samples read back once, shuffled, the same order twice"]

try:
    from PIL import Image
except ImportError:
    Image = None
if Image is not None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    with shardstream.ShardWriter("img", max_samples=10) as w:
        for ext, fmt, opts in (("jpg", "JPEG", {"quality": 90}), ("png", "PNG", {}),
                               ("webp", "WEBP", {"lossless": True})):
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, fmt, **opts)
            w.write({"__key__": ext, ext: buf.getvalue()})
    fields = [{"name": "jpg;png;webp", "decode": "image"}]
    with shardstream.Loader("img/manifest.jsonl", batch_size=1, fields=fields, shuffle=False) as loader:
        # The field takes its first alternative's name; without a size each image keeps its own.
        got = {b["__key__"][0]: np.asarray(b["jpg"][0]) for b in loader}
    assert sorted(got) == ["jpg", "png", "webp"], sorted(got)
    for ext in ("png", "webp"):
        assert np.array_equal(got[ext], pixels), f"{ext}: lossless pixels differ"
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    want = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    diff = np.abs(got["jpg"].astype(int) - want.astype(int)).max()
    assert diff <= 1, f"jpg: {diff} levels from Pillow's decode"
    checks.append(f"JPEG (within {diff} of Pillow), PNG and WebP decoded in C++")

handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=os.getcwd())
http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
try:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    urls = [f"{base}/set/{name}" for name in sorted(os.listdir("set")) if name.endswith(".tar")]
    over_http = read(urls, shuffle_buffer=100)
    assert sorted(over_http) == list(range(200)), "every sample once over http"
finally:
    server.shutdown()
checks.append(f"{len(urls)} shards read over http")

bindir = os.path.dirname(sys.executable)
r = subprocess.run([os.path.join(bindir, "shardstream"), "verify", "set/manifest.jsonl"],
                   capture_output=True, text=True)
assert r.returncode == 0, r.stdout + r.stderr
r = subprocess.run([sys.executable, "-m", "shardstream", "ls", "set/shard-000000.tar"],
                   capture_output=True, text=True)
assert r.returncode == 0 and "s0000" in r.stdout, r.stdout + r.stderr
r = subprocess.run([sys.executable, "-m", "shardstream", "verify", "missing/manifest.jsonl"],
                   capture_output=True, text=True)
assert r.returncode != 0 and "missing/manifest.jsonl" in r.stdout + r.stderr, r.stdout + r.stderr
checks.append("shardstream verify and python -m shardstream ls ran; a missing manifest is named")
try:
    import torch  # noqa: F401
except ImportError:
    try:
        import shardstream.torch  # noqa: F401
    except ImportError as e:
        assert 'pip install "shardstream[torch]"' in str(e), str(e)
        checks.append("without torch, importing shardstream.torch names the extra")
    else:
        raise AssertionError("shardstream.torch imported without torch")
print(f"  shardstream {shardstream.__version__} on Python {sys.version.split()[0]}:")
for c in checks:
    print(f"    {c}")
