"""PyTorch integration: :class:`ShardDataset`, an ``IterableDataset`` of batches.

Recommended use: the dataset batches itself on C++ threads, so give the
DataLoader ``batch_size=None``, ``num_workers=0`` and ``collate_fn=passthrough``
(``ds.dataloader()`` does)::

    ds = ShardDataset("s3://bucket/data/manifest.jsonl", fields=["tokens.npy"],
                      batch_size=256, shuffle_buffer=10000, seed=1,
                      cache_dir="/nvme/cache", cache_limit="500GiB")
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0,
                                     collate_fn=passthrough)      # or ds.dataloader()
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in dl:
            x = batch["tokens.npy"].cuda(non_blocking=True)   # pinned: async copy

Tensors are zero-copy views of pooled host memory (CUDA pinned when a GPU is
present, so DataLoader's ``pin_memory=True`` is not needed); a buffer returns
to the pool when the last tensor viewing it is freed.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.utils.data

from . import _core
from .loader import Loader, merge_states

STATE_FORMAT = "shardstream-dataset-state"


def topology() -> Tuple[int, int, int, int]:
    """(rank, world_size, worker, num_workers) of the calling process.

    rank and world size come from torch.distributed when it is initialised,
    else from the RANK and WORLD_SIZE environment variables (torchrun's), else
    (0, 1); worker and num_workers from ``get_worker_info()`` inside a
    DataLoader worker, else (0, 1).
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
    info = torch.utils.data.get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank, world, worker, workers


def local_topology() -> Tuple[int, int]:
    """(local_rank, local_world_size) from LOCAL_RANK and LOCAL_WORLD_SIZE (default (0, 1))."""
    return int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def _to_torch(parts: tuple, single: bool) -> Dict[str, Any]:
    tensors, keys, urls, info = parts
    out: Dict[str, Any] = {}
    bf16 = set(info["bfloat16"])
    for name, value in tensors.items():
        if isinstance(value, np.ndarray):
            t = torch.from_numpy(value)
            if name in bf16:
                t = t.view(torch.bfloat16)
            # Single samples are copied: a sample is small, and users keep
            # many (list(ds)), which must not hold one pool slot each.
            out[name] = t[0].clone() if single else t
        else:
            out[name] = value[0] if single else value
    out["__key__"] = keys[0] if single and keys else keys
    out["__url__"] = urls[0] if single and urls else urls
    return out


class ShardDataset(torch.utils.data.IterableDataset):
    """Batches (dicts of torch tensors) from a manifest or a brace pattern.

    ``urls``: a manifest (.jsonl/.csv/.json; path, file://, http(s)://, s3://)
    or a brace pattern such as ``"shards/data-{000000..000099}.tar"``.
    Keyword arguments are the :class:`shardstream.Loader` options, named as
    WebDataset and Streaming users know them: ``fields``, ``tokens``,
    ``batch_size`` (None: single samples, as dicts of per-sample tensors,
    copied out of the pool so that any number may be kept),
    ``shuffle``, ``shuffle_buffer`` (alias ``shuffle_size``), ``seed``,
    ``epoch``, ``drop_last``, ``pad_remainder``, ``prefetch``,
    ``reader_threads``, ``cache_dir``, ``cache_limit``, ``pinned``,
    ``error_policy``, ...

    Each batch maps field output names to tensors ``[batch, ...]`` (lists for
    bytes/str fields) and carries ``__key__`` and ``__url__`` (lists, in row
    order). ``rank``/``world_size`` may be given; by default they come from
    torch.distributed or the environment when iteration starts, and the
    DataLoader worker's id and count from ``get_worker_info()``. Every consumer
    (rank x worker) gets a disjoint, equal share of each epoch.

    Epochs: ``set_epoch(e)`` before iterating (like DistributedSampler);
    without it each completed pass moves on to the next epoch. Resume:
    ``state_dict()`` / ``load_state_dict()`` (StatefulDataLoader protocol).
    Pickling drops the native loader; it is reopened in the worker.
    """

    def __init__(self, urls: str, *, batch_size: Optional[int] = 32, epoch: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 **loader_kwargs: Any) -> None:
        super().__init__()
        for k in ("worker", "num_workers"):
            if k in loader_kwargs:
                raise TypeError(f"ShardDataset takes {k} from the DataLoader, not as an argument")
        self.urls = os.fspath(urls)
        self.batch_size = batch_size
        self._kwargs = dict(loader_kwargs)
        self._rank, self._world = rank, world_size
        self._epoch = epoch            # the epoch the next __iter__ reads
        self._pending: Optional[List[str]] = None  # states to restore at the next __iter__
        self._loader: Optional[Loader] = None
        self._pid: Optional[int] = None
        self._topo: Optional[Tuple[int, int, int, int]] = None
        self._active = False           # an epoch is under way (begun, not finished)

    # -- topology and the native loader ------------------------------------
    def _current_topology(self) -> Tuple[int, int, int, int]:
        rank, world, worker, workers = topology()
        if self._rank is not None:
            rank = self._rank
        if self._world is not None:
            world = self._world
        return rank, world, worker, workers

    def _native(self) -> Loader:
        topo = self._current_topology()
        if self._loader is not None and self._pid == os.getpid() and self._topo == topo:
            return self._loader
        if self._loader is not None and self._pid == os.getpid():
            self._loader.close()
        # A loader inherited through fork is left alone (its threads live in
        # the parent); the native side never touches it again.
        rank, world, worker, workers = topo
        self._loader = Loader(self.urls, batch_size=self.batch_size or 1, rank=rank,
                              world_size=world, worker=worker, num_workers=workers,
                              epoch=self._epoch, **self._kwargs)
        self._pid, self._topo = os.getpid(), topo
        return self._loader

    # -- iteration -----------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Reads epoch ``epoch`` at the next iteration (drops a pending resume state)."""
        self._epoch = int(epoch)
        self._pending = None
        self._active = False

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads (or the one under way)."""
        return self._epoch

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        """This consumer's batches of the epoch (a pending resume state first)."""
        loader = self._native()
        if self._pending is not None:
            loader.restore(self._pending)
            self._pending = None
            self._epoch = loader.epoch
        elif not self._active or loader.epoch != self._epoch:
            loader.set_epoch(self._epoch)
        self._active = True
        single = self.batch_size is None
        while True:
            parts = loader._next_parts()
            if parts is None:
                break
            yield _to_torch(parts, single)
        self._active = False
        self._epoch += 1

    def __len__(self) -> int:
        """Batches (or samples, when batch_size is None) per epoch for this process.

        Inside a DataLoader worker: that worker's share. Raises TypeError when
        the manifest has no sample counts (brace patterns).
        """
        return len(self._native())

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """This consumer's resume state (torchdata StatefulDataLoader protocol).

        ``{"format", "version", "epoch", "consumers": [state JSON, ...]}``. An
        exactly-once resume needs the states of every consumer of the epoch:
        use :func:`gather_state_dict` under torch.distributed, or
        :func:`merge_state_dicts` on the ranks' saved dicts.
        """
        consumers: List[str] = []
        if self._pending is not None:
            consumers = list(self._pending)
        elif self._active and self._loader is not None and self._pid == os.getpid():
            consumers = [self._loader.state()]
        return {"format": STATE_FORMAT, "version": 1, "epoch": self._epoch,
                "consumers": consumers}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from :meth:`state_dict` output (possibly merged over ranks) at the next iteration.

        The not yet delivered samples are split over the current topology, which
        may differ from the saved one (other world size or worker count).
        """
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a {STATE_FORMAT} dict")
        if int(state.get("version", 0)) != 1:
            raise ValueError(f"unsupported {STATE_FORMAT} version {state.get('version')}")
        self._epoch = int(state["epoch"])
        consumers = list(state.get("consumers") or [])
        self._pending = consumers or None
        self._active = False

    # -- pickling into DataLoader workers -----------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        d = self.__dict__.copy()
        d["_loader"] = None
        d["_pid"] = None
        d["_topo"] = None
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)

    def dataloader(self, **kwargs: Any) -> "torch.utils.data.DataLoader":
        """A DataLoader with the recommended settings: ``batch_size=None``,
        ``num_workers=0``, ``collate_fn=passthrough``; keyword arguments
        override them (e.g. ``num_workers=2, multiprocessing_context="spawn"``)."""
        kw: Dict[str, Any] = {"batch_size": None, "num_workers": 0, "collate_fn": passthrough}
        kw.update(kwargs)
        return torch.utils.data.DataLoader(self, **kw)

    # -- telemetry -------------------------------------------------------------
    def stats(self) -> Dict[str, Any]:
        """The native loader's counters in this process (empty before the first iteration)."""
        if self._loader is None or self._pid != os.getpid():
            return {}
        return self._loader.stats()

    def close(self) -> None:
        """Stops the native threads now (they also stop when the dataset is freed)."""
        if self._loader is not None and self._pid == os.getpid():
            self._loader.close()
        self._loader = None


def passthrough(batch: Any) -> Any:
    """A DataLoader ``collate_fn`` that returns the batch as it is.

    The batches are already dicts of torch tensors. DataLoader's default
    (``default_convert`` when ``batch_size=None``) walks every element of
    ``__key__`` and ``__url__`` in Python, which costs about a millisecond per
    256-sample batch: more than the whole native pipeline on small samples.
    """
    return batch


def merge_state_dicts(states: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One state dict from the state dicts of every consumer (rank, worker) of an epoch."""
    states = list(states)
    if not states:
        raise ValueError("no state dicts to merge")
    epochs = {int(s["epoch"]) for s in states if s.get("consumers")}
    if len(epochs) > 1:
        raise ValueError(f"state dicts of different epochs: {sorted(epochs)}")
    consumers = [c for s in states for c in s.get("consumers") or []]
    epoch = epochs.pop() if epochs else max(int(s["epoch"]) for s in states)
    merged = [merge_states(consumers)] if consumers else []
    return {"format": STATE_FORMAT, "version": 1, "epoch": epoch, "consumers": merged}


def gather_state_dict(dataset: ShardDataset) -> Dict[str, Any]:
    """Every rank's state, merged (a collective: call it on every rank).

    With torch.distributed not initialised this is ``dataset.state_dict()``.
    """
    own = dataset.state_dict()
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return own
    all_states: List[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(all_states, own)
    return merge_state_dicts(all_states)


__all__ = ["ShardDataset", "topology", "local_topology", "merge_state_dicts", "gather_state_dict",
           "passthrough"]
