"""ShardWriter: Python values in, WebDataset tar shards and a manifest out."""

from __future__ import annotations

import io
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np

from . import _core
from .loader import parse_size


def encode_field(name: str, value: Any) -> bytes:
    """The bytes stored for one field value.

    bytes/bytearray/memoryview are stored as they are; str as UTF-8; a NumPy
    array (or anything with ``__array__`` such as a CPU torch tensor) as .npy;
    a dict or list as JSON; an int as its decimal text (a WebDataset ``cls``
    label). The field name should carry the matching extension
    (``tokens.npy``, ``txt``, ``json``, ``cls``) so readers decode it.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool):
        raise TypeError(f"field '{name}': bool is ambiguous; store int(value) or a str")
    if isinstance(value, (int, np.integer)):
        return str(int(value)).encode()
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":")).encode("utf-8")
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(np.asarray(value)), allow_pickle=False)
        return buf.getvalue()
    raise TypeError(f"field '{name}': cannot store a {type(value).__name__} "
                    "(use bytes, str, int, dict/list or a numpy array)")


class ShardWriter:
    """Writes samples into tar shards (WebDataset layout) plus a manifest.

    ``ShardWriter(out_dir, max_bytes="512MiB", max_samples=0,
    pattern="shard-%06d.tar", compression="none" | "zstd" | "gzip",
    manifest_name="manifest.jsonl")``. ``write({"__key__": "s0",
    "tokens.npy": array, "txt": "caption", "cls": 3})`` appends a sample;
    ``close()`` finishes the last shard and writes the manifest (sizes, sample
    counts, xxh3 checksums). Shards are deterministic and appear atomically;
    leaving without close() (an exception in a ``with`` block) aborts: no
    partial shard and no manifest. One thread at a time.
    """

    def __init__(self, out_dir: Union[str, os.PathLike], *, max_bytes: Union[int, str] = "512MiB",
                 max_samples: int = 0, pattern: Optional[str] = None, compression: str = "none",
                 zstd_level: int = 3, manifest_name: str = "manifest.jsonl",
                 write_index: bool = False) -> None:
        self.out_dir = os.fspath(out_dir)
        self._manifest_name = manifest_name
        self._native = _core.ShardWriter(self.out_dir, pattern or "", parse_size(max_bytes),
                                         max_samples, compression, zstd_level, manifest_name,
                                         write_index)
        self._count = 0

    def write(self, sample: Mapping[str, Any]) -> None:
        """Appends a sample: ``__key__`` plus field name -> value (see encode_field)."""
        if "__key__" not in sample:
            raise KeyError("a sample needs '__key__'")
        key = str(sample["__key__"])
        fields: Dict[str, bytes] = {}
        for name, value in sample.items():
            if name.startswith("__"):
                continue
            fields[name] = encode_field(name, value)
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
