"""ShardWriter: Python values in, WebDataset tar shards and a manifest out."""

from __future__ import annotations

import io
import json
import math
import os
import sys
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np

from . import _core
from .loader import parse_size

# Field extension (the part after the last dot, lower-cased) -> Pillow format,
# as WebDataset's TarWriter encodes images (webdataset.writer.make_handlers),
# plus .webp and .bmp.
_IMAGE_FORMATS = {
    "jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "webp": "WEBP", "ppm": "PPM", "pgm": "PPM",
    "pbm": "PPM", "bmp": "BMP", "tiff": "TIFF", "tif": "TIFF",
}
_JSON_EXTS = ("json", "jsn")
JPEG_QUALITY = 90
WEBP_QUALITY = 90
# Pillow modes each format saves as they are; other modes are converted first.
_SAVE_MODES = {
    "JPEG": ("L", "RGB"),
    "PNG": ("1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"),
    "WEBP": ("RGB", "RGBA"),
    "BMP": ("1", "L", "P", "RGB", "RGBA"),
    "TIFF": None,  # everything
}
_ACCEPTED = ("bytes/bytearray/memoryview (stored as they are), str (UTF-8), int/float/bool and "
             "NumPy scalars (decimal text; a 0-d array in .npy fields), dict/list (JSON), NumPy "
             "arrays and torch tensors (.npy, .npz, or an image for image fields), PIL images "
             "(image fields: " + " ".join("." + e for e in _IMAGE_FORMATS) + ")")


def _extension(name: str) -> str:
    """The field's extension as WebDataset picks it: after the last dot, lower-cased."""
    return name.rsplit(".", 1)[-1].lower()


def _where(name: str, key: Optional[str]) -> str:
    return f"sample '{key}', field '{name}'" if key is not None else f"field '{name}'"


def _refuse(name: str, key: Optional[str], value: Any, hint: str = "") -> TypeError:
    kind = type(value)
    tname = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return TypeError(f"{_where(name, key)}: cannot store a {tname}"
                     f"{'; ' + hint if hint else ''} (accepted: {_ACCEPTED})")


def _pil_image_type() -> Optional[type]:
    """PIL.Image.Image if Pillow is already imported (a PIL image implies it is); never imports it."""
    mod = sys.modules.get("PIL.Image")
    return getattr(mod, "Image", None) if mod is not None else None


def _torch_to_numpy(value: Any, name: str, key: Optional[str]) -> Any:
    """A torch tensor as a NumPy array; anything else unchanged. Never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, getattr(torch, "Tensor", ())):
        return value
    t = value.detach()
    if t.dtype == torch.bfloat16:
        raise TypeError(f"{_where(name, key)}: NumPy has no bfloat16; store t.float() or "
                        "t.view(torch.uint16)")
    return t.cpu().numpy()


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def _scalar_text(value: Any) -> bytes:
    """Decimal text: ints as "3", bools as "1"/"0", floats so that they round-trip
    (Python floats by repr, NumPy floats by their shortest text for their dtype)."""
    if isinstance(value, (bool, np.bool_)):
        return b"1" if value else b"0"
    if isinstance(value, (int, np.integer)):
        return str(int(value)).encode()
    if isinstance(value, np.floating):  # before float: np.float64 is a float subclass
        return str(value).encode()
    return float.__repr__(float(value)).encode()


def _npy_bytes(value: Any, name: str, key: Optional[str]) -> bytes:
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError) as e:
        raise _refuse(name, key, value, f"it does not make an array ({e})") from e
    if arr.dtype.hasobject:
        raise _refuse(name, key, value, "its array has dtype object (ragged lists, "
                      "ints past int64 or mixed types do not make an .npy array)")
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr, order="C"), allow_pickle=False)
    return buf.getvalue()


def _npz_bytes(value: Any, name: str, key: Optional[str]) -> bytes:
    """np.savez_compressed's format, with fixed zip timestamps so that shards stay
    deterministic. A dict gives named arrays, anything else one array "arr_0"."""
    items = value.items() if isinstance(value, Mapping) else [("arr_0", value)]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for k, v in items:
            if not isinstance(k, str):
                raise TypeError(f"{_where(name, key)}: .npz array names must be str, "
                                f"not {type(k).__name__}")
            info = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as f:
                f.write(_npy_bytes(_torch_to_numpy(v, name, key), name, key))
    return buf.getvalue()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, getattr(torch, "Tensor", ())):
        return obj.detach().cpu().tolist()
    raise TypeError(f"a {type(obj).__name__} is not JSON serializable")


def _json_bytes(value: Any, name: str, key: Optional[str]) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":"), default=_json_default).encode("utf-8")
    except TypeError as e:
        raise TypeError(f"{_where(name, key)}: cannot store this {type(value).__name__} as "
                        f"JSON: {e}") from e


def _array_to_image(arr: np.ndarray, name: str, key: Optional[str]) -> Any:
    """A uint8 HxW / HxWx1 / HxWx3 / HxWx4 array (or a float one in [0, 1], scaled by 255
    as WebDataset does) as a PIL image."""
    try:
        from PIL import Image
    except ImportError as e:
        raise ImportError(f"{_where(name, key)}: encoding an array as an image needs Pillow "
                          "(pip install pillow), or store encoded bytes") from e
    if arr.dtype.kind == "f":
        lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
        if lo <= -0.001 or hi >= 1.001 or math.isnan(lo) or math.isnan(hi):
            raise ValueError(f"{_where(name, key)}: a float image must be in [0, 1], "
                             f"got values in [{lo}, {hi}]")
        arr = np.array(np.clip(arr, 0.0, 1.0) * 255.0, np.uint8)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.dtype != np.uint8 or not (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] in (3, 4))):
        raise TypeError(f"{_where(name, key)}: an image array must be uint8 (or float in "
                        "[0, 1]) with shape HxW, HxWx1, HxWx3 or HxWx4, not "
                        f"{arr.dtype} {tuple(arr.shape)}")
    return Image.fromarray(np.ascontiguousarray(arr))


def _has_alpha(image: Any) -> bool:
    return image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        image.mode == "P" and "transparency" in image.info)


def _image_bytes(image: Any, fmt: str, ext: str) -> bytes:
    mode = image.mode
    if fmt == "PPM":
        target = {"pgm": ("L",), "pbm": ("1",)}.get(ext, ("1", "L", "RGB"))
    else:
        target = _SAVE_MODES[fmt]
    if target is not None and mode not in target:
        if fmt == "PPM" and ext in ("pgm", "pbm"):
            want = target[0]
        elif fmt == "JPEG":
            want = "RGB"  # alpha is dropped; a palette is expanded
        else:
            want = "RGBA" if _has_alpha(image) and "RGBA" in target else "RGB"
        if mode in ("P", "PA") and want != "RGBA" and _has_alpha(image):
            image = image.convert("RGBA")  # Pillow warns on P+transparency -> RGB directly
        image = image.convert(want)
    opts: Dict[str, Any] = {}
    if fmt == "JPEG":
        opts["quality"] = JPEG_QUALITY
    elif fmt == "WEBP":
        opts["quality"] = WEBP_QUALITY
    with io.BytesIO() as out:
        image.save(out, format=fmt, **opts)
        return out.getvalue()


def encode_field(name: str, value: Any, key: Optional[str] = None) -> bytes:
    """The bytes stored for one field value, chosen by the field's extension
    (the part of ``name`` after its last dot, lower-cased), as WebDataset's
    ``TarWriter`` encodes them:

    * bytes/bytearray/memoryview: as they are; str: UTF-8 (any field);
    * PIL images and uint8 NumPy arrays (HxW, HxWx3, HxWx4) in image fields
      (``jpg``/``jpeg``: JPEG quality 90, RGB, alpha dropped; ``png``, ``webp``
      (quality 90), ``ppm``/``pgm``/``pbm``, ``bmp``, ``tiff``/``tif``). Pillow
      is imported only when such a value comes;
    * ``npy``: NumPy arrays, scalars and lists as an .npy file (a scalar as a
      0-d array); ``npz``: a dict of arrays (or one array) as a compressed .npz;
    * ``json``/``jsn``: ``json.dumps`` of dicts, lists, numbers, bools, None
      (NumPy values inside become lists and numbers);
    * other fields: int/float/bool and NumPy scalars as decimal text ("3",
      floats by repr so they round-trip, bools "1"/"0"), dicts/lists as JSON,
      arrays as .npy;
    * torch tensors are stored as their NumPy array (torch is never imported
      here; a tensor means it already is).

    Anything else raises ``TypeError`` naming the sample ``key`` (when given),
    the field and the value's type.
    """
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    ext = _extension(name)
    value = _torch_to_numpy(value, name, key)
    image_type = _pil_image_type()
    is_image = image_type is not None and isinstance(value, image_type)
    fmt = _IMAGE_FORMATS.get(ext)
    if fmt is not None:
        if not is_image and (isinstance(value, np.ndarray) or hasattr(value, "__array__")):
            value = _array_to_image(np.asarray(value), name, key)
            is_image = True
        if not is_image:
            raise _refuse(name, key, value, f"a .{ext} field takes a PIL image, a uint8 "
                          "NumPy array or encoded bytes")
        return _image_bytes(value, fmt, ext)
    if ext == "npy":
        if is_image or _is_scalar(value) or isinstance(value, (np.ndarray, np.generic, list, tuple)) \
                or hasattr(value, "__array__"):
            return _npy_bytes(value, name, key)
        raise _refuse(name, key, value)
    if ext == "npz":
        if isinstance(value, Mapping) or isinstance(value, np.ndarray) or hasattr(value, "__array__"):
            return _npz_bytes(value, name, key)
        raise _refuse(name, key, value, "an .npz field takes a dict of arrays or an array")
    if is_image:
        raise _refuse(name, key, value, "a PIL image needs an image field ("
                      + " ".join("." + e for e in _IMAGE_FORMATS) + ") or .npy")
    if ext in _JSON_EXTS:
        if value is None or _is_scalar(value) or isinstance(value, (dict, list, tuple, np.ndarray)):
            return _json_bytes(value, name, key)
        raise _refuse(name, key, value)
    if _is_scalar(value):
        return _scalar_text(value)
    if isinstance(value, (dict, list)):
        return _json_bytes(value, name, key)
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        arr = np.asarray(value)
        if arr.ndim == 0 and _is_scalar(arr[()]):  # e.g. a 0-d tensor as a label
            return _scalar_text(arr[()])
        return _npy_bytes(arr, name, key)
    raise _refuse(name, key, value)


class ShardWriter:
    """Writes samples into tar shards (WebDataset layout) plus a manifest.

    ``ShardWriter(out_dir, max_bytes="512MiB", max_samples=0,
    pattern="shard-%06d.tar", compression="none" | "zstd" | "gzip",
    manifest_name="manifest.jsonl")``. ``write({"__key__": "s0",
    "tokens.npy": array, "txt": "caption", "cls": 3})`` appends a sample;
    ``close()`` finishes the last shard and writes the manifest (sizes, sample
    counts, xxh3 checksums). An ``out_dir`` that already holds shards, ``.idx``
    files or the manifest raises ConfigError (a read of the folder would take
    them beside the new shards) unless ``overwrite=True``, which removes them
    first. Shards are deterministic and appear atomically;
    leaving without close() (an exception in a ``with`` block) aborts: no
    partial shard and no manifest. One thread at a time.
    """

    def __init__(self, out_dir: Union[str, os.PathLike], *, max_bytes: Union[int, str] = "512MiB",
                 max_samples: int = 0, pattern: Optional[str] = None, compression: str = "none",
                 zstd_level: int = 3, manifest_name: str = "manifest.jsonl",
                 write_index: bool = False, overwrite: bool = False) -> None:
        self.out_dir = os.fspath(out_dir)
        self._manifest_name = manifest_name
        self._native = _core.ShardWriter(self.out_dir, pattern or "", parse_size(max_bytes),
                                         max_samples, compression, zstd_level, manifest_name,
                                         write_index, overwrite)
        self._count = 0

    def write(self, sample: Mapping[str, Any]) -> None:
        """Appends a sample: ``__key__`` plus field name -> value, each encoded by the
        field's extension (see encode_field: PIL images and uint8 arrays for image
        fields, numbers as text or 0-d .npy, dicts as JSON). A value it cannot store
        raises TypeError naming the key and the field; nothing of that sample is written."""
        if "__key__" not in sample:
            raise KeyError("a sample needs '__key__'")
        key = str(sample["__key__"])
        fields: Dict[str, bytes] = {}
        for name, value in sample.items():
            if name.startswith("__"):
                continue
            fields[name] = encode_field(name, value, key)
        self._native.write(key, fields)
        self._count += 1

    @property
    def samples_written(self) -> int:
        """Samples written so far."""
        return self._count

    @property
    def shards(self) -> List[Dict[str, Any]]:
        """The finished shards: url (relative to out_dir), size, nsamples, checksum."""
        return self._native.shards()

    @property
    def manifest_path(self) -> str:
        """Where close() writes the manifest."""
        return os.path.join(self.out_dir, self._manifest_name)

    def close(self) -> None:
        """Finishes the last shard, syncs the directory and writes the manifest."""
        self._native.close()

    def abort(self) -> None:
        """Drops the shard in progress; no manifest is written."""
        self._native.abort()

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
