"""An ImageFolder tree in, image shards out: :func:`images_to_shards` (docs/convert.md).

The tree is ``src/<class>/<image>``, as torchvision's ``ImageFolder`` reads it. Each image
becomes a sample, in key order:

* key ``"<class>/<stem>"`` (dots in the stem become ``_``, as the tar key rules need);
* the image's bytes as they are, under its extension lowercased (``jpg``, ``png``, ...);
* ``cls``: the class's number, classes numbered in name order (as ImageFolder numbers them)
  and listed one per line in ``classes.txt``.

The shards are planned before any is written: from the files' sizes, by the writer's own rule
(a shard is closed before a sample would take its tar bytes past ``max_bytes``). Shard ``n`` is
then written by one task as ``part-<n:05d>-000000.tar``, named as ``text_to_shards`` names
its parts. The shards hold the same samples and the same bytes as ``shardstream pack
--image-folder`` writes, whatever the engine and the number of processes.
"""

from __future__ import annotations

import multiprocessing
import os
import stat
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from .errors import ConfigError, Error, IoError
from .loader import parse_size
from .writer import ShardWriter

__all__ = ["images_to_shards", "IMAGE_EXTENSIONS", "CLASSES_NAME"]

#: torchvision's ImageFolder extensions (lowercase; the match ignores case).
IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp"})
#: The class names, one per line in label order, beside the manifest.
CLASSES_NAME = "classes.txt"

_PATTERN = "part-{shard:05d}-%06d.tar"
_BLOCK = 512
_NAME_LEN = 100                 # a ustar name field; a longer member path takes a pax record
_MAX_OCTAL = 0o77777777777      # a larger member size takes a pax record


class _Image(NamedTuple):
    key: str
    field: str
    path: str
    size: int
    label: int


def _padded(n: int) -> int:
    return (n + _BLOCK - 1) // _BLOCK * _BLOCK


def _pax_record(key: str, value: str) -> int:
    """The length of a pax record "<len> key=value\\n" (its length counts its own digits)."""
    body = 1 + len(key.encode()) + 1 + len(value.encode()) + 1
    n = body + 1
    while len(str(n)) + body != n:
        n += 1
    return n


def _entry_bytes(path: str, size: int) -> int:
    """A member's tar bytes as the writer writes it (src/tar/shard_writer.cc EntryBytes)."""
    pax = 0
    if len(path.encode()) > _NAME_LEN:
        pax += _pax_record("path", path)
    if size > _MAX_OCTAL:
        pax += _pax_record("size", str(size))
    n = _BLOCK + _padded(size)
    if pax:
        n += _BLOCK + _padded(pax)
    return n


def _sample_bytes(image: _Image) -> int:
    return (_entry_bytes(f"{image.key}.{image.field}", image.size)
            + _entry_bytes(f"{image.key}.cls", len(str(image.label))))


def _list_tree(src: str) -> Tuple[List[_Image], List[str], int, int]:
    """The images of src in key order, the class names, and the files left out: those not
    at <class>/<image> with an image extension, and symlinks or special files (not followed,
    as `shardstream pack` does not)."""
    found: Dict[str, Tuple[str, str, int]] = {}
    classes = set()
    unkeyed = not_regular = 0
    for root, dirs, files in os.walk(src, onerror=_raise, followlinks=False):
        rel_root = os.path.relpath(root, src)
        depth = 0 if rel_root == "." else rel_root.count(os.sep) + 1
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                not_regular += 1   # os.walk does not enter it
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError as e:
                raise IoError(f"cannot read {path}: {e.strerror}") from e
            if not stat.S_ISREG(st.st_mode):
                not_regular += 1
                continue
            stem, ext = os.path.splitext(name)
            if depth != 1 or len(ext) < 2 or ext[1:].lower() not in IMAGE_EXTENSIONS:
                unkeyed += 1
                continue
            cls = rel_root
            key = f"{cls}/{stem.replace('.', '_')}"
            if key in found:
                raise ConfigError(f"two images of one sample key {key}: {found[key][1]} and "
                                  f"{path}; rename one")
            found[key] = (ext[1:].lower(), path, st.st_size)
            classes.add(cls)
    names = sorted(classes)
    label = {name: i for i, name in enumerate(names)}
    images = [_Image(key, field, path, size, label[key[:key.index("/")]])
              for key, (field, path, size) in sorted(found.items())]
    return images, names, unkeyed, not_regular


def _raise(e: OSError) -> None:
    raise IoError(f"cannot read {e.filename}: {e.strerror}") from e


def _plan(images: List[_Image], max_bytes: int, max_samples: int) -> List[List[_Image]]:
    """The shards the writer would cut, from the sizes (its rule: closed before a sample
    would take its tar bytes, plus the two end blocks, past max_bytes)."""
    shards: List[List[_Image]] = []
    current: List[_Image] = []
    tar_bytes = 0
    for image in images:
        n = _sample_bytes(image)
        if current and (tar_bytes + n + 2 * _BLOCK > max_bytes or
                        (max_samples and len(current) >= max_samples)):
            shards.append(current)
            current, tar_bytes = [], 0
        current.append(image)
        tar_bytes += n
    if current:
        shards.append(current)
    return shards


def _write_shard(job: Tuple[int, str, List[_Image], int, int, bool]) -> Dict[str, Any]:
    """Writes one planned shard (in a worker process or a Ray task). A retried task
    replaces its own shard."""
    number, out_dir, images, max_bytes, max_samples, write_index = job
    writer = ShardWriter(out_dir, max_bytes=max_bytes, max_samples=max_samples,
                         pattern=_PATTERN.format(shard=number), manifest_name="",
                         write_index=write_index, overwrite=True)
    try:
        for image in images:
            try:
                with open(image.path, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise IoError(f"cannot read {image.path}: {e.strerror}") from e
            if len(data) != image.size:
                raise ConfigError(f"{image.path}: {len(data)} bytes, {image.size} when the tree "
                                  "was listed: the file changed during the conversion")
            writer.write({"__key__": image.key, image.field: data, "cls": image.label})
        writer.close()
    except BaseException:
        writer.abort()
        raise
    shards = writer.shards
    if len(shards) != 1 or int(shards[0]["nsamples"]) != len(images):
        raise Error(f"internal: shard {number} was planned with {len(images)} images and "
                    f"written as {[int(s['nsamples']) for s in shards]}")
    s = shards[0]
    return {"url": s["url"], "size": int(s["size"]), "nsamples": int(s["nsamples"]),
            "checksum": s["checksum"]}


def images_to_shards(src: Union[str, "os.PathLike[str]"], out_dir: Union[str, "os.PathLike[str]"],
                     *, max_bytes: Union[int, str] = "512MiB", max_samples: int = 0,
                     processes: Optional[int] = None, write_index: bool = True,
                     overwrite: bool = False, engine: str = "processes",
                     start_method: str = "spawn") -> Dict[str, Any]:
    """Packs an ImageFolder tree (``src/<class>/<image>``) into image shards plus
    ``out_dir/manifest.jsonl`` and ``out_dir/classes.txt``.

    Each image is a sample ``{"__key__": "<class>/<stem>", "<ext>": the file's bytes,
    "cls": label}``, samples in key order, classes numbered in name order; files elsewhere
    in the tree, with other extensions, and symlinks are left out and counted. Shards of at
    most ``max_bytes`` tar bytes (and ``max_samples`` samples when not 0) are planned from
    the files' sizes, then each is written by one task on ``processes`` worker processes
    (default: the CPUs this process may use), or with ``engine="ray"`` by Ray tasks on every
    node of the cluster this process is connected to (``src`` and ``out_dir`` must then be
    folders every node sees). The bytes are the same whatever the engine and processes, and
    the same as ``shardstream pack --image-folder`` writes (shard ``n`` is named
    ``part-<n:05d>-000000.tar``), with ``.idx`` sample indexes when ``write_index``.

    An unreadable file is an IoError, and a file that changes size during the conversion,
    two images of one key (``a.jpg`` and ``a.png``) or a tree with no image a ConfigError,
    each naming the file; then the shards written are removed and no manifest is written. A
    lost worker is an Error (Ray retries a task twice first). ``out_dir`` must not hold a
    manifest or shards of an earlier conversion unless ``overwrite`` (which removes them).

    Returns a summary: ``out_dir``, ``manifest``, ``images``, ``classes``, ``shards``,
    ``bytes``, ``left_out`` (files not taken), ``engine``, ``processes``, ``seconds``,
    ``images_per_s``.
    """
    from . import convert  # the output-folder and worker-pool rules text_to_shards uses
    t0 = time.perf_counter()
    src = os.fspath(src)
    if not os.path.isdir(src):
        raise ConfigError(f"src {src}: not a folder")
    max_bytes_n = parse_size(max_bytes)
    if not max_bytes_n:
        raise ConfigError("max_bytes must be > 0")
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 0:
        raise ConfigError(f"max_samples {max_samples!r}: expected an integer >= 0")
    ray_pool, processes = convert._engine(engine, processes)

    images, classes, unkeyed, not_regular = _list_tree(src)
    if not images:
        raise ConfigError(f"no <class>/<image> files under {src} (image extensions: "
                          f"{', '.join(sorted(IMAGE_EXTENSIONS))})")
    plan = _plan(images, max_bytes_n, max_samples)

    out_dir = os.fspath(out_dir)
    created = convert._claim(out_dir, overwrite, [CLASSES_NAME])

    jobs = [(n, out_dir, shard, max_bytes_n, max_samples, bool(write_index))
            for n, shard in enumerate(plan)]
    workers = min(processes, len(jobs))
    pool: Any = None
    try:
        if ray_pool is not None:
            pool = ray_pool(None, None)
        elif workers > 1:
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(start_method))
        if pool is None:
            shards = [_write_shard(job) for job in jobs]
        else:
            pending = [pool.submit(_write_shard, job) for job in jobs]
            shards = []
            for job, fut in zip(jobs, pending):  # in order: the first failing one is reported
                first = job[2][0]
                shards.append(convert._result(fut, f"shard {job[0]} (from {first.path})"))
            pool.shutdown(wait=True)
            pool = None
        convert._write_text(os.path.join(out_dir, CLASSES_NAME), "".join(name + "\n" for name in classes))
        manifest = convert._write_manifest(out_dir, shards)
    except BaseException:
        convert._abandon(out_dir, created, pool, [CLASSES_NAME])
        raise

    seconds = time.perf_counter() - t0
    return {
        "out_dir": out_dir, "manifest": manifest, "images": len(images), "classes": len(classes),
        "shards": len(shards), "bytes": sum(s["size"] for s in shards),
        "left_out": unkeyed + not_regular, "engine": engine,
        "processes": workers,
        "seconds": seconds, "images_per_s": len(images) / seconds if seconds > 0 else 0.0,
    }
