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

import copy
import difflib
import inspect
import logging
import numbers
import os
import sys
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np
import torch
import torch.utils.data

from . import _core
from .errors import ConfigError
from .loader import FieldsArg, Loader, loader_options, merge_own_states, merge_states
from .transfer import share_node_budget

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


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"config: environment variable {name}={value!r} is not an integer") from None


def ranks_per_node(rank: int, world: int) -> int:
    """Ranks per node, for node-local shard affinity: torchrun's LOCAL_WORLD_SIZE,
    else SLURM's SLURM_NTASKS_PER_NODE (or the first count of
    SLURM_TASKS_PER_NODE), else 1 on a single rank. Checks that the rank
    agrees with torchrun's GROUP_RANK and LOCAL_RANK (ranks numbered node by
    node) and with torch.distributed; raises ConfigError naming the variable
    otherwise."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        env_rank = _env_int("RANK")
        if env_rank is not None and env_rank != torch.distributed.get_rank():
            raise ConfigError(f"config: RANK={env_rank} disagrees with torch.distributed's rank "
                              f"{torch.distributed.get_rank()}")
    local = _env_int("LOCAL_WORLD_SIZE")
    source = "LOCAL_WORLD_SIZE"
    if local is None:
        local = _env_int("SLURM_NTASKS_PER_NODE")
        source = "SLURM_NTASKS_PER_NODE"
    if local is None and os.environ.get("SLURM_TASKS_PER_NODE"):
        text = os.environ["SLURM_TASKS_PER_NODE"]
        digits = text.split("(")[0].split(",")[0]
        if not digits.isdigit():
            raise ConfigError(f"config: SLURM_TASKS_PER_NODE={text!r} has no task count")
        local, source = int(digits), "SLURM_TASKS_PER_NODE"
    if local is None:
        if world == 1:
            return 1
        raise ConfigError("config: node_local needs the ranks per node: set LOCAL_WORLD_SIZE "
                          "(torchrun does) or pass local_world_size")
    if local < 1 or world % local != 0:
        raise ConfigError(f"config: {source}={local} does not divide the world size {world}")
    group, local_rank = _env_int("GROUP_RANK"), _env_int("LOCAL_RANK")
    if group is not None and local_rank is not None and rank != group * local + local_rank:
        raise ConfigError(f"config: rank {rank} is not GROUP_RANK*LOCAL_WORLD_SIZE+LOCAL_RANK "
                          f"({group}*{local}+{local_rank}): node-local affinity needs ranks "
                          "numbered node by node, as torchrun numbers them")
    return local


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


# Loader options that ShardDataset passes through **kwargs (the less common
# ones); the common ones are its own keyword arguments.
_EXPLICIT_OPTIONS = ("fields", "tokens", "batch_size", "shuffle", "shuffle_buffer", "shuffle_size",
                     "seed", "epoch", "drop_last", "pad_remainder", "prefetch", "reader_threads",
                     "open_shards", "cache_dir", "cache_limit", "cache_mode", "pinned",
                     "error_policy", "memory_budget", "rank", "world_size", "node_local",
                     "local_world_size", "streams")
# ShardDataset's own arguments that are no Loader options.
_HOOK_ARGUMENTS = ("map", "batch_map")
_PASSTHROUGH_OPTIONS = tuple(
    name for name, p in inspect.signature(loader_options).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
    and name not in _EXPLICIT_OPTIONS + ("worker", "num_workers"))


def _dataloader_auto_collation(frame: Any) -> Optional[bool]:
    """Whether the DataLoader fetcher whose ``__init__`` is ``frame`` batches
    the data set's items itself (DataLoader ``batch_size`` not None); None when
    ``frame`` is not such a fetcher (a plain ``iter(ds)``, another torch)."""
    fetcher_cls = getattr(getattr(torch.utils.data, "_utils", None), "fetch", None)
    fetcher_cls = getattr(fetcher_cls, "_IterableDatasetFetcher", None)
    if fetcher_cls is None or frame is None or frame.f_code.co_name != "__init__":
        return None
    local = frame.f_locals
    if not isinstance(local.get("self"), fetcher_cls):
        return None
    auto = local.get("auto_collation", getattr(local["self"], "auto_collation", None))
    return None if auto is None else bool(auto)


def _dataloader_asking_len(frame: Any, dataset: Any) -> Optional[Tuple[int, Optional[int], bool]]:
    """``(num_workers, batch_size, drop_last)`` of the DataLoader whose
    ``__len__`` is ``frame`` and whose data set is ``dataset``; None when
    ``frame`` is not such a call. torch asks ``len(dataset)`` without saying
    how many worker processes will split the data set, and each worker's
    share ends in its own last batch."""
    if frame is None or frame.f_code.co_name != "__len__":
        return None
    loader = frame.f_locals.get("self")
    if not isinstance(loader, torch.utils.data.DataLoader) or loader.dataset is not dataset:
        return None
    return int(loader.num_workers), loader.batch_size, bool(loader.drop_last)


class ShardDataset(torch.utils.data.IterableDataset):
    """Batches (dicts of torch tensors) from a data set of tar shards.

    ``urls``: a manifest (.jsonl/.csv/.json; path, file://, http(s)://, s3://),
    a brace pattern such as ``"shards/data-{000000..000099}.tar"``, one shard,
    a directory or s3:// prefix of shards, or a list of these (docs/manifest.md).
    The keyword arguments are the :class:`shardstream.Loader` options, named as
    WebDataset and Streaming users know them (see ``__init__``); the less common
    ones (``mode``, ``shuffle_initial``, ``direct_reads``, ...; docs/options.md
    lists every option) pass through ``**kwargs``. A misspelt keyword raises
    TypeError.

    Each batch maps field output names to tensors ``[batch, ...]`` (lists for
    bytes/str fields) and carries ``__key__`` and ``__url__`` (lists, in row
    order). With ``batch_size=None`` the data set yields single samples (dicts
    of per-sample tensors, a str key and url), which a DataLoader with a
    ``batch_size`` may batch. A data set that batches itself needs a DataLoader
    with ``batch_size=None`` (``ds.dataloader()``); any other raises
    :class:`shardstream.ConfigError` when iteration starts.

    ``rank``/``world_size`` may be given; by default they come from
    torch.distributed or the environment when iteration starts, and the
    DataLoader worker's id and count from ``get_worker_info()``. Every consumer
    (rank x worker) gets a disjoint, equal share of each epoch.

    Iteration: each ``iter()`` starts a fresh pass over the current epoch from
    its beginning (so peeking with ``next(iter(ds))`` loses nothing, and a loop
    left with ``break`` is not continued by the next one); an older iterator of
    the same data set then raises RuntimeError if resumed. The current epoch is
    the one given by ``set_epoch(e)`` (like DistributedSampler), or after a
    completed pass the next one (a pass completed in DataLoader workers that are
    not persistent ends in their copies: call ``set_epoch`` every epoch then). A state loaded with ``load_state_dict()`` is
    resumed by the next ``iter()`` instead (StatefulDataLoader protocol).
    Pickling drops the native loader; it is reopened in the worker.

    ``map=fn`` runs ``fn(sample) -> sample`` on every sample and collates the
    results back into batches; ``batch_map=fn`` runs on each batch after it.
    Both run where the data set is iterated (DataLoader workers, when there
    are any) and keep the resume exact.
    """

    def __init__(self, urls: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]], None] = None, *,
                 fields: FieldsArg = None,
                 tokens: Optional[Mapping[str, Any]] = None,
                 batch_size: Optional[int] = 32,
                 shuffle: bool = True,
                 shuffle_buffer: Optional[int] = None,
                 shuffle_size: Optional[int] = None,
                 seed: int = 0,
                 epoch: int = 0,
                 drop_last: bool = False,
                 pad_remainder: bool = False,
                 prefetch: Optional[int] = None,
                 reader_threads: Optional[int] = None,
                 open_shards: Optional[int] = None,
                 cache_dir: Union[str, "os.PathLike[str]", None] = None,
                 cache_limit: Union[int, str, None] = None,
                 cache_mode: str = "rw",
                 pinned: bool = True,
                 error_policy: str = "raise",
                 memory_budget: Union[int, str, None] = None,
                 rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 node_local: bool = False,
                 local_world_size: Optional[int] = None,
                 streams: Optional[Sequence[Mapping[str, Any]]] = None,
                 map: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
                 batch_map: Optional[Callable[[Dict[str, Any]], Any]] = None,
                 **kwargs: Any) -> None:
        """
        Args:
            urls: a manifest (.jsonl/.csv/.json; path, file://, http(s)://, s3://), a brace
                pattern, a shard, a directory (s3:// prefix) of shards, or a list of these.
            fields: the sample fields that become tensors: names (``"tokens.npy"``), dicts
                (``{"name", "output", "decode", "dtype", "shape", "optional"}``) or
                ``{output: name}``.
            tokens: language-model token batches, e.g. ``{"field": "tokens.npy", "seq_len": 2048,
                "layout": "pack", "eod_token": 0}``.
            batch_size: samples per batch [32]; None: single samples (for a DataLoader that
                batches them).
            shuffle: the sample shuffle [True]; False turns the shuffle buffer off, but shards
                are still in the plan's seeded order and several are read at once, so samples
                do not come in file order: ``mode="eval"`` reads in manifest order.
            shuffle_buffer: samples in the shuffle buffer [None: 1000].
            shuffle_size: WebDataset's name for ``shuffle_buffer``.
            seed: the shuffle seed [0]; with the epoch it fixes the order.
            epoch: the epoch the first iteration reads [0].
            drop_last: drop each consumer's last partial batch [False].
            pad_remainder: pad the epoch's remainder instead of dropping it [False].
            prefetch: batches made ahead [None: 4].
            reader_threads: shard reader threads [None: 2].
            open_shards: shards read at once [None: 4].
            cache_dir: a node-local shard cache directory [None: no cache].
            cache_limit: bytes the cache may hold, e.g. ``"500GiB"`` (needed with ``cache_dir``).
            cache_mode: "rw", "ro" or "off" ["rw"].
            pinned: CUDA pinned batch buffers when a GPU is present [True].
            error_policy: "raise", "skip_shard" or "skip_sample" ["raise"].
            memory_budget: bytes the pipeline may hold, e.g. ``"2GiB"`` [None: no budget].
            rank: this rank [None: torch.distributed, else $RANK, else 0].
            world_size: the rank count [None: torch.distributed, else $WORLD_SIZE, else 1].
            node_local: assign shards to nodes once for all epochs, so each node's cache keeps
                serving it [False].
            local_world_size: ranks per node for ``node_local`` [None: $LOCAL_WORLD_SIZE
                (torchrun), else SLURM's tasks per node].
            streams: several data sets mixed in each epoch, instead of ``urls``: a list of
                ``{"inputs": url or [urls], "weight": w}`` (a share of ``epoch_size``), or with
                ``"repeat": r`` (r times the stream's samples) or ``"choose": n``; optional
                ``"name"`` (per-stream counts in ``stats()["stream_samples"]``) [None].
            map: ``fn(sample) -> sample``, run on every sample in the process that iterates
                the data set (a DataLoader worker with ``num_workers > 0``) [None]. A sample is a
                dict: tensor rows, bytes/str items, the str ``__key__`` and ``__url__``; ``fn``
                may change, add or drop keys. The results are collated back into the batch
                (equal-shape tensors stacked, numbers as tensors, anything else as lists);
                with ``batch_size=None`` each mapped sample is yielded as it is. Not with
                ``tokens`` (rows are not samples: use ``batch_map``).
            batch_map: ``fn(batch) -> batch``, run on each batch after ``map`` (a tokenizer over
                the captions, torchvision v2 on a uint8 batch) [None]; needs ``batch_size``.
                Both hooks are pickled into DataLoader workers: with spawn or forkserver they
                must be module-level functions (or other picklable callables), not lambdas.
            **kwargs: the less common :class:`shardstream.Loader` options, passed through.
        """
        super().__init__()
        for name, fn in (("map", map), ("batch_map", batch_map)):
            if fn is not None and not callable(fn):
                raise TypeError(f"ShardDataset {name} must be callable, not {type(fn).__name__}")
        if map is not None and tokens is not None:
            raise ConfigError("config: map runs on samples, and the rows of token batches are not "
                              "samples: use batch_map for token batches")
        if batch_map is not None and batch_size is None:
            raise ConfigError("config: batch_map runs on the data set's batches, and with "
                              "batch_size=None it yields single samples: use map, or the "
                              "DataLoader's collate_fn for the batches it makes")
        for k in ("worker", "num_workers"):
            if k in kwargs:
                raise TypeError(f"ShardDataset takes {k} from the DataLoader, not as an argument")
        for k in kwargs:
            if k not in _PASSTHROUGH_OPTIONS:
                close = difflib.get_close_matches(
                    k, _EXPLICIT_OPTIONS + _HOOK_ARGUMENTS + _PASSTHROUGH_OPTIONS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TypeError(f"ShardDataset() got an unexpected keyword argument {k!r}{hint}")
        # One input or a list (shards, directories, patterns, manifests).
        if urls is None and not streams:
            raise TypeError("ShardDataset needs urls, or streams to mix")
        self.urls = (None if urls is None
                     else os.fspath(urls) if isinstance(urls, (str, bytes, os.PathLike))
                     else [os.fspath(u) for u in urls])
        self.batch_size = batch_size
        self._kwargs: Dict[str, Any] = dict(
            fields=fields, tokens=tokens, shuffle=shuffle, shuffle_buffer=shuffle_buffer,
            shuffle_size=shuffle_size, seed=seed, drop_last=drop_last, pad_remainder=pad_remainder,
            prefetch=prefetch, reader_threads=reader_threads, open_shards=open_shards,
            cache_dir=cache_dir, cache_limit=cache_limit, cache_mode=cache_mode, pinned=pinned,
            error_policy=error_policy, memory_budget=memory_budget,
            streams=[dict(st) for st in streams] if streams else None, **kwargs)
        self._rank, self._world = rank, world_size
        self._node_local, self._local_world = node_local, local_world_size
        self._epoch = epoch            # the epoch the next __iter__ reads
        self._pending: Optional[Dict[str, Any]] = None  # a state dict to restore at the next __iter__
        self._iters_since_load = 0
        self._loader: Optional[Loader] = None
        self._pid: Optional[int] = None
        self._topo: Optional[Tuple[int, int, int, int]] = None
        self._active = False           # an epoch is under way (begun, not finished)
        self._me: Tuple[int, int] = (0, 1)  # (consumer, consumers) of the epoch under way
        self._ended: Optional[Dict[str, Any]] = None  # a worker's state after its epoch ended
        self._pass = 0                 # passes begun: an iterator of an older pass is stale
        # set_epoch/load_state_dict calls: a pass moves the data set on to the
        # next epoch only when none came since it began.
        self._epoch_set = 0
        self._map, self._batch_map = map, batch_map  # hooks, pickled into workers
        # Samples map dropped (returned None) or, under a skip policy, skipped
        # (raised), in this process (stats()).
        self._hook_counts = {"map_dropped": 0, "map_errors": 0}
        # With hooks: the state of a pass whose hook raised, which does not
        # count the failed batch as delivered (state_dict returns it).
        self._failed: Optional[Dict[str, Any]] = None

    # -- topology and the native loader ------------------------------------
    def _current_topology(self) -> Tuple[int, int, int, int]:
        rank, world, worker, workers = topology()
        if self._rank is not None:
            rank = self._rank
        if self._world is not None:
            world = self._world
        return rank, world, worker, workers

    def _native(self, solo: bool = False, workers: Optional[int] = None) -> Loader:
        # solo: a single-consumer loader, for a consumer that resumes its own
        # share from its own state (see __iter__). workers: the main process
        # counting for a DataLoader of that many workers (worker 0's loader).
        topo = (0, 1, 0, 1) if solo else self._current_topology()
        if workers is not None and not solo:
            topo = (topo[0], topo[1], 0, max(1, workers))
        if self._loader is not None and self._pid == os.getpid() and self._topo == topo:
            return self._loader
        if self._loader is not None and self._pid == os.getpid():
            self._loader.close()
        # A loader inherited through fork is left alone (its threads live in
        # the parent); the native side never touches it again.
        rank, world, worker, workers = topo
        node = self._node_options(rank, world) if not solo else {}
        # Every rank and DataLoader worker of the node reads remote shards through its own
        # transfer engine: each takes its share of the node's budget.
        local_world = self._local_world or int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        share_node_budget(local_world * max(1, workers))
        self._loader = Loader(self.urls, batch_size=self.batch_size or 1, rank=rank,
                              world_size=world, worker=worker, num_workers=workers,
                              epoch=self._epoch, **node, **self._kwargs)
        self._pid, self._topo = os.getpid(), topo
        return self._loader

    def _node_options(self, rank: int, world: int) -> Dict[str, Any]:
        if not self._node_local:
            return {}
        return {"node_local": True,
                "local_world_size": self._local_world or ranks_per_node(rank, world)}

    # -- iteration -----------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Reads epoch ``epoch`` from its beginning at the next iteration (drops a
        pending resume state). A pass under way goes on, but does not then move
        the data set on to the epoch after its own."""
        self._epoch = int(epoch)
        self._pending = None
        self._ended = None
        self._failed = None
        self._active = False
        self._epoch_set += 1

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads (or the one under way)."""
        return self._epoch

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        """This consumer's batches of a fresh pass over the current epoch, from its
        beginning; or, when a state was loaded, the rest of the saved epoch.

        Raises :class:`shardstream.ConfigError` when a DataLoader would batch
        the batches (a DataLoader ``batch_size`` with ``batch_size`` here not None).
        """
        if self.batch_size is not None:
            frame = sys._getframe(1)
            try:
                auto_collation = _dataloader_auto_collation(frame)
            finally:
                del frame
            if auto_collation:
                raise ConfigError(
                    f"ShardDataset batches itself (batch_size={self.batch_size}): give the "
                    "DataLoader batch_size=None (ds.dataloader() does), or make the data set "
                    "yield samples with ShardDataset(..., batch_size=None) and let the DataLoader "
                    "batch them")
        self._iters_since_load += 1
        if self._pending is not None and self._pending.get("ended") and self._iters_since_load > 1:
            # StatefulDataLoader restoring an epoch that had ended makes one
            # iterator from the restored state and drops it unstarted; the
            # next one starts the next epoch.
            self._epoch = int(self._pending["epoch"]) + 1
            self._pending = None
        return self._iterate()

    def _iterate(self) -> Iterator[Dict[str, Any]]:
        # Runs at the iterator's first next(): from here on the native loader
        # belongs to this pass, and an older iterator is stale.
        self._pass += 1
        this_pass, epoch_set = self._pass, self._epoch_set
        pending, self._pending = self._pending, None
        self._ended = None
        self._failed = None
        rank, world, worker, workers = self._current_topology()
        me = (rank * workers + worker, world * workers)
        if pending is not None and pending.get("ended"):
            # This consumer had finished the epoch: nothing is left of it.
            self._me = me
            self._end_epoch(int(pending["epoch"]), _merge_entries(pending["consumers"]))
            return
        loader = self._loader_for(pending, me)
        if pending is not None:
            self._epoch = loader.epoch
        self._me = me
        self._active = True
        epoch = self._epoch
        single = self.batch_size is None
        # Without sample counts (brace patterns without indexes) there is no
        # state to keep: the hooks then run without the snapshot.
        hooked = self._map is not None or self._batch_map is not None
        snapshot = hooked and loader.samples_per_epoch >= 0
        while True:
            # The native loader counts a batch delivered when it returns it;
            # with hooks, keep the state before it for a batch whose hook raises.
            before = loader.own_state() if snapshot else None
            parts = loader._next_parts()
            if parts is None:
                break
            batch = _to_torch(parts, single)
            if hooked:
                try:
                    batch = self._apply_hooks(batch, single)
                except Exception:
                    if before is not None:
                        self._failed = _state(epoch, [{"members": [me[0]], "of": me[1],
                                                       "state": before}])
                    raise
                if batch is None:
                    continue  # map dropped every sample: delivered, nothing to yield
            yield batch
            if self._pass != this_pass:
                raise RuntimeError(
                    "a newer iter() of this ShardDataset started a fresh pass over the epoch: "
                    "this older iterator cannot go on")
        if self._epoch_set != epoch_set:
            return  # set_epoch or load_state_dict since: they say what comes next
        in_worker = torch.utils.data.get_worker_info() is not None
        self._end_epoch(epoch, _own_share(me, loader) if in_worker else None)

    def _map_one(self, sample: Dict[str, Any], key: Any, url: Any) -> Optional[Mapping[str, Any]]:
        """``map`` on one sample: None when it returns None (dropped) or, under
        a skip policy, raises (skipped); both counted for stats()."""
        try:
            out = _call_map(self._map, sample, key, url)
        except _MapError as e:
            if self._kwargs.get("error_policy", "raise") == "raise":
                raise
            self._hook_counts["map_errors"] += 1
            if self._hook_counts["map_errors"] <= 3:
                logging.getLogger("shardstream").warning(
                    "%s; skipped (error_policy=%r)%s", e, self._kwargs["error_policy"],
                    "; later ones are counted in stats()['map_errors']"
                    if self._hook_counts["map_errors"] == 3 else "")
            return None
        if out is None:
            self._hook_counts["map_dropped"] += 1
        return out

    def _apply_hooks(self, batch: Dict[str, Any], single: bool) -> Any:
        """``map`` on each sample (collating a batch back), then ``batch_map``.
        None when ``map`` dropped or skipped every sample of it."""
        keys, urls = batch["__key__"], batch["__url__"]
        if self._map is not None:
            if single:
                return self._map_one(batch, keys, urls)
            mapped = [(self._map_one(_sample(batch, i), keys[i], urls[i]), keys[i], urls[i])
                      for i in range(len(keys))]
            mapped = [m for m in mapped if m[0] is not None]
            if not mapped:
                return None
            keys, urls = [m[1] for m in mapped], [m[2] for m in mapped]
            batch = _collate([m[0] for m in mapped], keys)
        if self._batch_map is not None:
            batch = _call_batch_map(self._batch_map, batch, keys, urls)
        return batch

    def _loader_for(self, pending: Optional[Dict[str, Any]], me: Tuple[int, int],
                    workers: Optional[int] = None) -> Loader:
        """The native loader, set to a fresh pass over the current epoch, or
        restored from ``pending`` (a state that has not ended). ``workers``:
        the main process counting for a DataLoader of that many workers."""
        if pending is None:
            # A fresh pass: the epoch from its beginning, dropping what an
            # earlier pass (a peek, a loop left with break) had in flight.
            loader = self._native()
            loader.set_epoch(self._epoch)
            return loader
        if int(pending["version"]) == 1:
            loader = self._native(workers=workers)
            loader.restore(pending["consumers"])
            return loader
        entry = _merge_entries(pending["consumers"])
        if entry["members"] == list(range(entry["of"])):
            # Every consumer's share: the rest is split over this topology.
            loader = self._native(workers=workers)
        elif entry["members"] == [me[0]] and entry["of"] == me[1]:
            # Only this consumer's own share (a DataLoader worker under
            # StatefulDataLoader, or a rank's own dict): read exactly it.
            loader = self._native(solo=True)
        else:
            raise ValueError(
                f"{STATE_FORMAT}: the state covers consumers {entry['members']} of "
                f"{entry['of']}, but consumer {me[0]} of {me[1]} needs either its own state or "
                "every consumer's (merge the ranks' and workers' states with merge_state_dicts "
                "or gather_state_dict)")
        loader.restore(entry["state"])
        return loader

    def _end_epoch(self, epoch: int, entry: Optional[Dict[str, Any]]) -> None:
        # In a DataLoader worker the state stays "this share of the epoch is
        # done" (with the share, so it merges): StatefulDataLoader may restore
        # it while other workers still read the epoch, when "next epoch" would
        # make this worker start reading the next one.
        self._active = False
        self._epoch = epoch + 1
        if entry is not None and torch.utils.data.get_worker_info() is not None:
            self._ended = _state(epoch, [entry], ended=True)

    def __len__(self) -> int:
        """Batches (or samples, when batch_size is None) per epoch for this process.

        Exactly what arrives: inside a DataLoader worker, that worker's share;
        in the main process, what every worker of the DataLoader that asks
        (``len(dataloader)``) yields together, each worker's share ending in
        its own last batch (called directly: for ``num_workers=0``); after
        load_state_dict(), what the resume reads. Token batches are counted
        from the documents' token counts (sample indexes). Raises TypeError
        when the counts are unknown (brace patterns without indexes, remote
        shards without indexes).
        """
        if self._active and self._loader is not None and self._pid == os.getpid():
            return len(self._loader)  # the epoch under way (perhaps a resumed share)
        frame = sys._getframe(1)
        try:
            asked = _dataloader_asking_len(frame, self)
        finally:
            del frame
        in_worker = torch.utils.data.get_worker_info() is not None
        if asked is not None and not in_worker and self.batch_size is None and asked[1]:
            # The DataLoader batches the samples, each worker its own share,
            # and divides what this returns by its batch_size: say what makes
            # its count the batches that arrive.
            workers, size, drop = asked
            rank, world, _, _ = self._current_topology()
            kw = dict(self._kwargs, drop_last=drop)
            with Loader(self.urls, batch_size=size, rank=rank, world_size=world, worker=0,
                        num_workers=max(1, workers), epoch=self._epoch,
                        **self._node_options(rank, world), **kw) as counting:
                n = counting.rank_batches_per_epoch()
            return size * n if drop else max(0, size * (n - 1) + 1)
        workers = asked[0] if asked is not None else None
        if in_worker or not workers:
            workers = None  # this process reads alone
        if self._pending is not None:
            # A loaded state: what its resume will read (the next iter() restores again).
            if self._pending.get("ended"):
                return 0
            rank, world, worker, n = self._current_topology()
            if workers is None:
                return len(self._loader_for(self._pending, (rank * n + worker, world * n)))
            loader = self._loader_for(self._pending, (rank * workers, world * workers),
                                      workers=workers)
            return _rank_len(loader)
        if workers is None:
            return len(self._native())
        return _rank_len(self._native(workers=workers))

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """This consumer's resume state (torchdata StatefulDataLoader protocol).

        ``{"format", "version": 2, "epoch", "consumers": [share, ...]}``; a
        share is ``{"members": [consumer, ...], "of": consumers, "state": JSON}``:
        the state of consumers ``members`` (rank * num_workers + worker) of a
        layout of ``of`` consumers, where everything those consumers do not
        still owe counts as delivered. Loaded alone into the same consumer it
        resumes exactly that consumer's rest (this is what StatefulDataLoader
        does per worker); merged over every consumer (:func:`merge_state_dicts`,
        :func:`gather_state_dict`) it resumes on any topology. Between epochs:
        no shares, ``epoch`` is the next one. A batch whose ``map`` or
        ``batch_map`` raised is not counted as delivered.
        """
        if self._pending is not None:
            return copy.deepcopy(self._pending)
        if self._failed is not None:
            return copy.deepcopy(self._failed)
        if self._active and self._loader is not None and self._pid == os.getpid():
            return _state(self._epoch, [_own_share(self._me, self._loader)])
        if self._ended is not None:
            return copy.deepcopy(self._ended)
        return _state(self._epoch, [])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from :meth:`state_dict` output at the next iteration.

        This consumer's own state resumes exactly its rest; a state merged over
        every consumer splits the undelivered samples over the current
        topology, which may differ from the saved one (other world size or
        worker count). A state of some consumers only is refused at the next
        iteration. Version 1 dicts (one state per consumer, merged by union)
        are still read.
        """
        state = _check_state_dict(state)
        self._epoch = int(state["epoch"])
        self._pending = state if state["consumers"] else None
        self._iters_since_load = 0
        self._ended = None
        self._failed = None
        self._active = False
        self._epoch_set += 1

    # -- pickling into DataLoader workers -----------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        d = self.__dict__.copy()
        d["_loader"] = None
        d["_pid"] = None
        d["_topo"] = None
        d["_failed"] = None
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)
        self.__dict__.setdefault("_pass", 0)
        self.__dict__.setdefault("_epoch_set", 0)
        self.__dict__.setdefault("_map", None)
        self.__dict__.setdefault("_batch_map", None)
        self.__dict__.setdefault("_failed", None)
        self.__dict__.setdefault("_hook_counts", {"map_dropped": 0, "map_errors": 0})

    def dataloader(self, **kwargs: Any) -> "torch.utils.data.DataLoader":
        """A DataLoader with the recommended settings: ``batch_size=None``,
        ``num_workers=0``, ``collate_fn=passthrough``; keyword arguments
        override them (e.g. ``num_workers=2, multiprocessing_context="spawn"``)."""
        kw: Dict[str, Any] = {"batch_size": None, "num_workers": 0, "collate_fn": passthrough}
        kw.update(kwargs)
        return torch.utils.data.DataLoader(self, **kw)

    # -- telemetry -------------------------------------------------------------
    def stats(self) -> Dict[str, Any]:
        """The native loader's counters in this process (empty before the first
        iteration), with ``map_dropped`` (samples ``map`` returned None for)
        and ``map_errors`` (samples whose ``map`` raised, skipped under a skip
        policy) when there is a ``map``."""
        if self._loader is None or self._pid != os.getpid():
            return {}
        out = self._loader.stats()
        if self._map is not None:
            out.update(self._hook_counts)
        return out

    def close(self) -> None:
        """Stops the native threads now (they also stop when the dataset is freed)."""
        if self._loader is not None and self._pid == os.getpid():
            self._loader.close()
        self._loader = None


def _state(epoch: int, consumers: List[Dict[str, Any]], version: int = 2,
           **extra: Any) -> Dict[str, Any]:
    """A state dict of this format (see :meth:`ShardDataset.state_dict`)."""
    return {"format": STATE_FORMAT, "version": version, "epoch": epoch, "consumers": consumers,
            **extra}


def _rank_len(loader: Loader) -> int:
    return loader.rank_batches_per_epoch()


def _own_share(me: Tuple[int, int], loader: Loader) -> Optional[Dict[str, Any]]:
    """Consumer ``me`` = (index, count)'s share: its own state, nothing owed by others. None
    when the plan has no resume state (sample counts unknown: remote shards without indexes),
    so a worker ends its epoch like any other rather than failing at the end."""
    try:
        state = loader.own_state()
    except ConfigError:
        return None
    return {"members": [me[0]], "of": me[1], "state": state}


def passthrough(batch: Any) -> Any:
    """A DataLoader ``collate_fn`` that returns the batch as it is.

    The batches are already dicts of torch tensors. DataLoader's default
    (``default_convert`` when ``batch_size=None``) walks every element of
    ``__key__`` and ``__url__`` in Python, which costs about a millisecond per
    256-sample batch: more than the whole native pipeline on small samples.
    """
    return batch


def _check_state_dict(state: Mapping[str, Any]) -> Dict[str, Any]:
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        raise ValueError(f"not a {STATE_FORMAT} dict")
    version = int(state.get("version", 0))
    if version not in (1, 2):
        raise ValueError(f"unsupported {STATE_FORMAT} version {state.get('version')}")
    out = copy.deepcopy(dict(state))
    out["consumers"] = list(out.get("consumers") or [])
    if version == 2:
        for entry in out["consumers"]:
            if not (isinstance(entry, Mapping) and {"members", "of", "state"} <= set(entry)):
                raise ValueError(f"{STATE_FORMAT}: malformed share {entry!r:.200}")
    return out


def _merge_entries(entries: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One share from the shares of disjoint consumers of one layout.

    A position is delivered when no consumer still owes it, so the delivered
    sets intersect (each share counts the others' positions as delivered).
    """
    entries = list(entries)
    if len(entries) == 1:
        e = entries[0]
        return {"members": sorted(int(m) for m in e["members"]), "of": int(e["of"]),
                "state": e["state"]}
    layouts = {int(e["of"]) for e in entries}
    if len(layouts) > 1:
        raise ValueError(f"{STATE_FORMAT}: shares of different layouts ({sorted(layouts)} consumers)")
    members = [int(m) for e in entries for m in e["members"]]
    if len(set(members)) != len(members):
        raise ValueError(f"{STATE_FORMAT}: a consumer's share given twice ({sorted(members)})")
    # Shares of different epochs or data sets raise ConfigError (a ValueError).
    return {"members": sorted(members), "of": layouts.pop(),
            "state": merge_own_states([e["state"] for e in entries])}


def merge_state_dicts(states: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One state dict from the state dicts of consumers (rank, worker) of an epoch.

    Merge every consumer's for a resume on another topology (merging in steps,
    e.g. a rank's workers and then the ranks, is fine).
    """
    states = [_check_state_dict(s) for s in states]
    if not states:
        raise ValueError("no state dicts to merge")
    epochs = {int(s["epoch"]) for s in states if s["consumers"]}
    if len(epochs) > 1:
        raise ValueError(f"state dicts of different epochs: {sorted(epochs)}")
    epoch = epochs.pop() if epochs else max(int(s["epoch"]) for s in states)
    versions = {int(s["version"]) for s in states if s["consumers"]}
    if versions == {1}:
        consumers = [c for s in states for c in s["consumers"]]
        return _state(epoch, [merge_states(consumers)], version=1)
    if len(versions) > 1:
        raise ValueError(f"{STATE_FORMAT}: cannot merge version 1 and version 2 dicts")
    live = [s for s in states if s["consumers"]]
    if not live:
        return _state(epoch, [])
    entry = _merge_entries([e for s in live for e in s["consumers"]])
    if all(s.get("ended") for s in live):
        if entry["members"] == list(range(entry["of"])):
            # Every consumer finished: between epochs.
            return _state(epoch + 1, [])
        return _state(epoch, [entry], ended=True)
    return _state(epoch, [entry])


def state_dict_from_stateful_dataloader(state: Mapping[str, Any]) -> Dict[str, Any]:
    """The data set's state, merged over the workers, from ``StatefulDataLoader.state_dict()``.

    Load it into the data set (``ds.load_state_dict``) before building a
    DataLoader with another worker count, which StatefulDataLoader's own
    ``load_state_dict`` refuses. Needs ``snapshot_every_n_steps=1`` (the
    default) with workers: an older worker snapshot would repeat samples.
    """
    if "_snapshot" not in state:  # num_workers=0: the data set's own state
        ds_state = state.get("dataset_state")
        if ds_state is None:
            raise ValueError("no data set state in this StatefulDataLoader state")
        return merge_state_dicts([ds_state])
    if int(state.get("_steps_since_snapshot", 0)) != 0:
        raise ValueError(f"the worker states are {state['_steps_since_snapshot']} batches older "
                         "than the state: use snapshot_every_n_steps=1")
    workers = state["_snapshot"]["_worker_snapshots"]
    dicts = [w["dataset_state"] for w in workers.values()]
    if any(d is None for d in dicts):
        raise ValueError("a worker's state has no data set state")
    return merge_state_dicts(dicts)


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


__all__ = ["ShardDataset", "topology", "local_topology", "ranks_per_node", "merge_state_dicts", "gather_state_dict",
           "state_dict_from_stateful_dataloader", "passthrough"]
