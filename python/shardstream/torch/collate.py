"""Batches as torch sees them: native batches to dicts of tensors, single
samples, the collation of mapped samples, and the ``map``/``batch_map`` hooks' calls."""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch


def _to_torch(parts: tuple, single: bool) -> Dict[str, Any]:
    tensors, keys, urls, info = parts
    out: Dict[str, Any] = {}
    bf16 = set(info["bfloat16"])
    ragged = info.get("ragged", {})
    for name, value in tensors.items():
        if name in ragged:
            rows = [torch.from_numpy(a) for a in value]
            if name in bf16:
                rows = [r.view(torch.bfloat16) for r in rows]
            shapes = torch.from_numpy(tensors[name + ".shape"])
            if ragged[name] == "pad":
                out[name] = _pad(rows, shapes)
                out[name + ".lengths"] = shapes[:, 0] if shapes.shape[1] == 1 else shapes
            else:
                out[name] = rows
        elif name.endswith(".shape") and name[:-6] in ragged:
            continue
        elif isinstance(value, np.ndarray):
            t = torch.from_numpy(value)
            out[name] = t.view(torch.bfloat16) if name in bf16 else t
        else:
            out[name] = value
    out["__key__"] = keys
    out["__url__"] = urls
    # Single samples are copied: a sample is small, and users keep many
    # (list(ds)), which must not hold one pool slot each.
    return _sample(out, 0, clone=True) if single else out


def _pad(rows: List[torch.Tensor], shapes: torch.Tensor) -> torch.Tensor:
    """Ragged rows padded with zeros to the batch's largest shape: [B, *max]."""
    dtype = rows[0].dtype if rows else torch.uint8
    big = shapes.max(dim=0).values.tolist() if len(rows) else []
    out = torch.zeros([len(rows)] + [int(n) for n in big], dtype=dtype)
    for i, r in enumerate(rows):
        out[(i,) + tuple(slice(0, n) for n in r.shape)] = r
    return out


def _sample(batch: Mapping[str, Any], i: int, clone: bool = False) -> Dict[str, Any]:
    """Row ``i`` of a batch as a sample: tensor rows (views of the batch, copies
    when ``clone``), list items, the str key and url."""
    out: Dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, torch.Tensor):
            out[name] = value[i].clone() if clone else value[i]
        elif name in ("__key__", "__url__") and not value:
            out[name] = value  # a token row without documents carries no key
        else:
            item = value[i]  # bytes, str, or a ragged field's row tensor
            out[name] = item.clone() if clone and isinstance(item, torch.Tensor) else item
    return out


class _MapError(RuntimeError):
    """An exception ``map`` raised, naming the sample (a skip policy skips it)."""


def _call_map(fn: Callable[[Dict[str, Any]], Any], sample: Dict[str, Any], key: Any,
              url: Any) -> Optional[Mapping[str, Any]]:
    """``fn(sample)``; None drops the sample (WebDataset's ``select``); an
    exception it raises becomes a _MapError naming the sample."""
    try:
        out = fn(sample)
    except Exception as e:
        raise _MapError(f"ShardDataset map raised {type(e).__name__} on sample {key!r} "
                        f"(shard {url}): {e}") from e
    if out is None:
        return None
    if not isinstance(out, Mapping):
        raise TypeError(f"ShardDataset map must return the sample as a dict, but returned "
                        f"{type(out).__name__} for sample {key!r} (shard {url})")
    return out


def _collate_values(name: str, values: List[Any]) -> Any:
    """One batch entry from the samples' values: equal-shape tensors stacked,
    numbers as a tensor (Python floats as float64), anything else (and keys,
    urls) a list."""
    if name in ("__key__", "__url__"):
        return values
    v0 = values[0]
    if isinstance(v0, torch.Tensor):
        if all(isinstance(v, torch.Tensor) and v.shape == v0.shape and v.dtype == v0.dtype
               and v.device == v0.device for v in values):
            return torch.stack(values)
        return values
    if all(isinstance(v, numbers.Number) for v in values):
        # As DataLoader's default_collate: Python floats as float64.
        real = all(isinstance(v, numbers.Real) for v in values)
        dtype = torch.float64 if real and any(isinstance(v, float) for v in values) else None
        try:
            return torch.tensor(values, dtype=dtype)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            return values  # e.g. an int beyond int64
    return values


def _collate(samples: List[Mapping[str, Any]], keys: Sequence[Any]) -> Dict[str, Any]:
    """A batch from the mapped samples (``keys``: their original keys, for errors)."""
    first = samples[0]
    for sample, key in zip(samples, keys):
        if sample.keys() != first.keys():
            raise ValueError(f"ShardDataset map returned the keys {list(first)} for sample "
                             f"{keys[0]!r} but {list(sample)} for sample {key!r}: the samples "
                             "of a batch need the same keys")
    return {name: _collate_values(name, [s[name] for s in samples]) for name in first}


def _call_batch_map(fn: Callable[[Dict[str, Any]], Any], batch: Dict[str, Any],
                    keys: Sequence[Any], urls: Sequence[Any]) -> Any:
    """``fn(batch)``; an exception it raises becomes a RuntimeError naming the samples."""
    try:
        return fn(batch)
    except Exception as e:
        named = ", ".join(repr(k) for k in keys[:3]) + (", ..." if len(keys) > 3 else "")
        raise RuntimeError(f"ShardDataset batch_map raised {type(e).__name__} on the batch of "
                           f"{len(keys)} samples {named} (first from shard "
                           f"{urls[0] if urls else None}): {e}") from e


def passthrough(batch: Any) -> Any:
    """A DataLoader ``collate_fn`` that returns the batch as it is.

    The batches are already dicts of torch tensors. DataLoader's default
    (``default_convert`` when ``batch_size=None``) walks every element of
    ``__key__`` and ``__url__`` in Python, which costs about a millisecond per
    256-sample batch: more than the whole native pipeline on small samples.
    """
    return batch
