"""ShardDataset: the ``IterableDataset`` of batches over a Loader per consumer
(rank x DataLoader worker)."""

from __future__ import annotations

import copy
import difflib
import inspect
import logging
import os
import pickle
import sys
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.distributed
import torch.utils.data

from ..errors import ConfigError
from ..listing import shared_inputs, shared_streams
from ..loader import FieldsArg, Loader, loader_options
from ..transfer import share_node_budget
from .collate import (_call_batch_map, _call_map, _collate, _MapError, _sample, _to_torch,
                      passthrough)
from .state import STATE_FORMAT, _check_state_dict, _merge_entries, _own_share, _state
from .topology import ranks_per_node, topology


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
    a directory or s3:// prefix of shards, an MDS set, JSON Lines or Parquet files (rows),
    or a list of these (docs/manifest.md, docs/formats.md).
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
                pattern, a shard, a directory (s3:// prefix) of shards, an MDS set, JSON Lines
                or Parquet files (rows), or a list of these.
            fields: the sample fields that become tensors: names (``"tokens.npy"``), dicts
                (``{"name", "output", "decode", "dtype", "shape", "optional"}``) or
                ``{output: name}``.
            tokens: language-model token batches (a text field with ``"tokenizer": fn``),
                e.g. ``{"field": "tokens.npy", "seq_len": 2048,
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
        # An object-store prefix is listed once per job (shardstream.listing), not by every
        # rank and DataLoader worker; not where the options change how it resolves.
        if kwargs.get("learn_sample_counts", True) and not kwargs.get("index_dir"):
            self.urls = shared_inputs(self.urls)
            if streams:
                streams = shared_streams(streams)
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
        if not keys and self._kwargs.get("tokens") is None:
            # A batch of padding: no samples, rows of zeros, from a consumer
            # that skipped data under a skip policy (kept in step with the
            # other ranks). Yielded as the loader made it, for the training
            # loop to tell by its empty __key__; a hook would drop it (map)
            # or hide what it is.
            return batch
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
            return loader.rank_batches_per_epoch()
        if workers is None:
            return len(self._native())
        return self._native(workers=workers).rank_batches_per_epoch()

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
        override them (e.g. ``num_workers=2, multiprocessing_context="spawn"``).

        Workers in a process where ``torch.distributed`` is initialized come
        from a forkserver unless a context is given: a fork there can hang in
        the child (docs/python.md, "DataLoader settings"). A data set that
        does not pickle (a lambda ``map``) keeps fork, with a warning."""
        kw: Dict[str, Any] = {"batch_size": None, "num_workers": 0, "collate_fn": passthrough}
        kw.update(kwargs)
        if (kw["num_workers"] > 0 and kw.get("multiprocessing_context") is None
                and torch.distributed.is_available() and torch.distributed.is_initialized()):
            kw["multiprocessing_context"] = self._worker_context()
        return torch.utils.data.DataLoader(self, **kw)

    def _worker_context(self) -> Optional[str]:
        try:
            pickle.dumps(self)
        except Exception as e:  # noqa: BLE001 - whatever fails to pickle, a forkserver cannot start
            logging.getLogger("shardstream").warning(
                "dataloader: workers are forked, not started from a forkserver, because the data "
                "set does not pickle (%s); under torch.distributed a fork can hang in the child "
                "(docs/python.md, DataLoader settings): give map and batch_map module-level "
                "functions", e)
            return None
        return "forkserver"

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
