"""The Loader: a data set (manifest, shards, directory or pattern) in, batches of NumPy arrays out.

Reading, shuffling, decoding and batching happen on C++ threads that start at
the first ``next()``; the arrays of a batch are views over a pooled (pinned
when CUDA is present) host buffer, which goes back to the pool once the last
array or tensor viewing it is gone.
"""

from __future__ import annotations

import atexit
import difflib
import inspect
import numbers
import operator
import os
import weakref
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core, _logging
from .options import BY_NAME, OPTIONS

FieldsArg = Union[None, Sequence[Union[str, Mapping[str, Any]]], Mapping[str, Union[str, Mapping[str, Any]]]]

def parse_size(value: Union[int, str, None]) -> Optional[int]:
    """Bytes from an int or a text such as ``"512MiB"``, ``"0.2 GB"``.

    One parser for the command line, C++ and Python: ``KB``/``MB``/``GB``/``TB``/``PB``
    (and ``k``, ``M``, ``G``, ...) are powers of 1000, ``KiB``/``MiB``/``GiB``/``TiB``/``PiB``
    powers of 1024; decimals are allowed and rounded down to whole bytes. Raises
    :class:`shardstream.ConfigError` (a ``ValueError``) naming the text otherwise.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise _core_config_error(f"size {value!r}: expected a number of bytes or a text such as '512MiB'")
    if isinstance(value, numbers.Integral):  # int, numpy integers
        value = int(value)
        if value < 0:
            raise _core_config_error(f"size {value}: a size cannot be negative")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if not isinstance(value, str):
        raise _core_config_error(f"size {value!r}: expected a number of bytes or a text such as '512MiB'")
    return _core.parse_size(value)


def _core_config_error(message: str) -> Exception:
    from .errors import ConfigError
    return ConfigError(f"config: {message}")


def _dtype_text(dtype: Any) -> str:
    text = str(dtype)
    return text[len("torch."):] if text.startswith("torch.") else text


def normalize_fields(fields: FieldsArg) -> List[Dict[str, Any]]:
    """The ``fields`` argument as a list of field specs (dicts).

    Accepts ``["tokens.npy", "cls"]``, a list of dicts with ``name`` and
    optionally ``output``, ``decode`` (auto, npy, raw, bytes, str, label),
    ``dtype``, ``shape``, ``optional``; or a mapping ``{output: name or spec}``.
    """
    if fields is None:
        return []
    if isinstance(fields, str):
        fields = [fields]
    out: List[Dict[str, Any]] = []
    if isinstance(fields, Mapping):
        items = [(k, v) for k, v in fields.items()]
        for output, spec in items:
            d = {"name": spec} if isinstance(spec, str) else dict(spec)
            d.setdefault("output", output)
            out.append(d)
    else:
        for spec in fields:
            out.append({"name": spec} if isinstance(spec, str) else dict(spec))
    for d in out:
        if "dtype" in d:
            d["dtype"] = _dtype_text(d["dtype"])
    return out


UrlsArg = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


def _inputs(urls: UrlsArg) -> List[str]:
    """The data set inputs as a list of url strings (see :class:`Loader`)."""
    if isinstance(urls, (str, bytes, os.PathLike)):
        return [os.fsdecode(urls)]
    if isinstance(urls, Sequence):
        out = [os.fsdecode(u) for u in urls]
        if not out:
            raise _core_config_error("no data set given: the list of shards is empty")
        return out
    raise TypeError(f"urls: expected a path, url or list of them, not {type(urls).__name__}")


def parse_cpus(value: Union[str, Sequence[int], None]) -> Optional[List[int]]:
    """CPU numbers from a list or the kernel's list text (``"0-3,8"``, as
    ``taskset -c`` takes it). Raises :class:`shardstream.ConfigError` naming
    the part it cannot read; whether each CPU is one the process may use is
    checked when the loader is made."""
    if value is None:
        return None
    if isinstance(value, str):
        out: List[int] = []
        for part in value.replace(" ", "").split(","):
            lo, dash, hi = part.partition("-")
            try:
                a = int(lo)
                b = int(hi) if dash else a
            except ValueError:
                raise _core_config_error(
                    f"reader_cpus {value!r}: {part!r} is not a CPU or a range such as '0-3'") from None
            if a < 0 or b < a:
                raise _core_config_error(f"reader_cpus {value!r}: {part!r} is not a range of CPUs")
            out.extend(range(a, b + 1))
        return out
    try:
        cpus = [operator.index(c) for c in value]
    except TypeError:
        raise _core_config_error(
            f"reader_cpus {value!r}: expected CPU numbers or a text such as '0-3,8'") from None
    if any(c < 0 for c in cpus):
        raise _core_config_error(f"reader_cpus {value!r}: CPU numbers are not negative")
    return cpus


def loader_options(urls: UrlsArg, **options: Any) -> Dict[str, Any]:
    """The native options dict for these keyword arguments (see :class:`Loader`).

    The keywords are the rows of :data:`shardstream.options.OPTIONS` (and
    ``shuffle_size``, WebDataset's name for ``shuffle_buffer``); an option not
    given, or None, takes its row's default (docs/options.md). The signature
    is made from the table too.
    """
    for k in options:
        if k not in BY_NAME and k != "shuffle_size":
            close = difflib.get_close_matches(k, list(BY_NAME), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"loader_options() got an unexpected keyword argument {k!r}{hint}")
    given = {k: v for k, v in options.items() if v is not None}
    buf, alias = given.get("shuffle_buffer"), given.get("shuffle_size")
    if buf is not None and alias is not None and buf != alias:
        raise _core_config_error("give shuffle_buffer or its alias shuffle_size, not both")
    streams = given.get("streams")
    opts: Dict[str, Any] = {"manifest": "",
                            "inputs": [] if urls is None and streams else _inputs(urls)}
    for o in OPTIONS:
        if o.native is None:
            continue
        v = given.get(o.name)
        if v is not None and o.type == "size":
            v = parse_size(v)
        elif v is not None and o.type == "cpus":
            v = parse_cpus(v)
        elif v is not None and o.type == "path":
            v = os.fspath(v)
        opts[o.native] = v
    # The options whose Python form differs from the native one.
    opts["shuffle_buffer"] = buf if buf is not None else alias
    if not given.get("shuffle", True) or given.get("mode") == "eval":
        opts["shuffle_buffer"] = 0
    opts["fields"] = normalize_fields(given.get("fields"))
    if opts["tokens"] is not None:
        tok = dict(opts["tokens"])
        for k in ("dtype", "input_dtype"):
            if k in tok:
                tok[k] = _dtype_text(tok[k])
        opts["tokens"] = tok
    opts["streams"] = [dict(st) for st in streams] if streams else None
    if "cache_dir" in given:
        limit = parse_size(given.get("cache_limit"))
        mode = given.get("cache_mode", BY_NAME["cache_mode"].default)
        if limit is None and mode in ("rw", "read_write"):
            raise _core_config_error("cache_dir needs cache_limit (bytes the cache may hold)")
        opts["cache"] = {"dir": os.fspath(given["cache_dir"]), "limit_bytes": limit or 0,
                         "mode": mode}
    return opts


def _options_signature() -> inspect.Signature:
    P = inspect.Parameter
    params = [P("urls", P.POSITIONAL_OR_KEYWORD, annotation="UrlsArg")]
    for o in OPTIONS:
        params.append(P(o.name, P.KEYWORD_ONLY, default=o.default))
        if o.name == "shuffle_buffer":
            params.append(P("shuffle_size", P.KEYWORD_ONLY, default=None))
    return inspect.Signature(params, return_annotation="Dict[str, Any]")


loader_options.__signature__ = _options_signature()  # type: ignore[attr-defined]


Batch = Dict[str, Any]

# Loaders still open at interpreter exit are closed first, so no library
# thread is running while the process tears down its static objects.
_open_loaders: "weakref.WeakSet[Loader]" = weakref.WeakSet()


@atexit.register
def _close_open_loaders() -> None:
    for loader in list(_open_loaders):
        try:
            loader.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


class Loader:
    """Batches of one consumer's part of a data set, as dicts of NumPy arrays.

    ``urls`` is a manifest (.jsonl, .csv, .json; local path, file://, http(s)://,
    s3://), a brace pattern such as ``"data-{000000..000099}.tar"``, one shard
    (.tar, .tar.zst, .tar.gz), a directory or s3:// prefix of shards, an MDS set
    (a folder with index.json), JSON Lines or Parquet files read as rows (.jsonl,
    .jsonl.gz, .jsonl.zst, .parquet: docs/formats.md), or a list of any of these. Without a manifest the sample counts are learned from the
    shards' ``.idx`` sidecars (built and written for local shards that lack
    one: the first run reads them once), so the split stays exactly once. Each
    batch maps every field's output name to an array ``[batch, ...]`` (or a
    list of bytes/str for variable-length fields), plus ``__key__`` and
    ``__url__``: the samples' keys and shard urls, in row order.

    Keyword arguments (defaults in brackets): ``fields`` (which sample fields
    become tensors), ``tokens`` (language-model token batches: ``{"field":
    "tokens.npy", "seq_len": 2048, "layout": "pack", "eod_token": ...}``),
    ``batch_size`` [32], ``shuffle`` [True], ``shuffle_buffer`` (alias
    ``shuffle_size``) [1000], ``seed`` [0], ``epoch`` [0], ``rank`` [0],
    ``world_size`` [1], ``worker`` [0], ``num_workers`` [1], ``drop_last``
    [False], ``pad_remainder`` [False], ``prefetch`` [4], ``reader_threads``
    [2], ``open_shards`` [4], ``cache_dir`` / ``cache_limit`` (a node-local
    shard cache, e.g. ``"20GiB"``), ``pinned`` [True: CUDA pinned memory when
    a GPU is present], ``error_policy`` ["raise", "skip_shard",
    "skip_sample"], ``memory_budget``, ``direct_reads`` [True: token
    documents from uncompressed local shards with a version 2 sample index
    are read straight into the batch; see docs/pipeline.md],
    ``mapped_keep_bytes`` ["4GiB": with a sample shuffle, local token shards
    stay mapped across epochs up to this many bytes; 0: off].

    Iterating yields the rest of the current epoch; iterating again after an
    epoch ended starts the next one. Threads start at the first batch, so a
    Loader may be created before a fork. Not thread-safe: use it from one
    thread.
    """

    def __init__(self, urls: str, **kwargs: Any) -> None:
        self._options = loader_options(urls, **kwargs)
        _logging.sync_level()
        self._native = _core.Loader(self._options)
        self._ended = False
        _open_loaders.add(self)  # close() is a no-op on a copy inherited through fork

    @property
    def epoch(self) -> int:
        """The epoch being read."""
        return self._native.epoch

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch`` from its beginning (discards what is in flight)."""
        self._native.set_epoch(epoch)
        self._ended = False

    def _next_parts(self) -> Optional[tuple]:
        out = self._native.next()
        _logging.drain()
        if out is None:
            self._ended = True
        return out

    def next(self) -> Optional[Batch]:
        """The next batch, or None at the end of the epoch.

        Blocks without holding the GIL; Ctrl-C raises KeyboardInterrupt at once
        (the batch being fetched is then returned by the following call).
        bfloat16 tensors come as uint16 arrays of the same bits.
        """
        out = self._next_parts()
        if out is None:
            return None
        tensors, keys, urls, _ = out
        tensors["__key__"] = keys
        tensors["__url__"] = urls
        return tensors

    def __iter__(self) -> Iterator[Batch]:
        """The rest of the current epoch (the next epoch when it has ended)."""
        if self._ended:
            self.set_epoch(self.epoch + 1)
        while True:
            batch = self.next()
            if batch is None:
                return
            yield batch

    def __len__(self) -> int:
        """Batches of the current epoch for this consumer (TypeError when unknown)."""
        n = self._native.batches_per_epoch()
        if n < 0:
            raise TypeError("the number of batches is unknown (no sample counts in the manifest, "
                            "or for token batches no sample indexes with the documents' token "
                            "counts)")
        return n

    def rank_batches_per_epoch(self) -> int:
        """Batches of the current epoch for every worker of this rank together
        (``num_workers`` consumers, each ending in its own last batch): what a
        DataLoader with that many worker processes yields on this rank.
        TypeError when unknown, as ``len()``."""
        n = self._native.rank_batches_per_epoch()
        if n < 0:
            raise TypeError("the number of batches is unknown (no sample counts in the manifest, "
                            "or for token batches no sample indexes with the documents' token "
                            "counts)")
        return n

    @property
    def samples_per_epoch(self) -> int:
        """Samples this consumer gets per epoch, or -1 when unknown."""
        return self._native.samples_per_epoch()

    def state(self) -> str:
        """What of the epoch next() has returned so far, as JSON text (see restore)."""
        return self._native.state()

    def own_state(self) -> str:
        """This consumer's share, as JSON text: state() with every position
        outside this consumer's plan counted as delivered. Restored on a
        single-consumer Loader (world_size=1, num_workers=1) it reads exactly
        what this consumer still owes; the shares of all consumers of a plan
        join by intersecting their delivered sets (:func:`merge_own_states`;
        ``shardstream.torch`` does both)."""
        return self._native.own_state()

    def restore(self, state: Union[str, Sequence[str]]) -> None:
        """Resumes an epoch with exactly the samples not yet delivered.

        ``state`` is one state, or the states of every consumer of the epoch
        (every rank and worker), which are merged first; the remainder is split
        over this loader's topology, which may differ from the saved one.
        """
        if not isinstance(state, str):
            state = merge_states(state)
        self._native.restore(state)
        self._ended = False

    def stats(self) -> Dict[str, Any]:
        """Counters and timings (see :mod:`shardstream.metrics`)."""
        return self._native.stats()

    def close(self) -> None:
        """Stops and joins the threads; idempotent. Arrays already returned stay valid."""
        self._native.close()
        _logging.drain()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def merge_states(states: Sequence[str]) -> str:
    """Joins the JSON states of one epoch's consumers (e.g. every rank's) into one."""
    states = list(states)
    if len(states) == 1:
        return states[0]
    return _core.merge_states(states)


def merge_own_states(states: Sequence[str]) -> str:
    """Joins the JSON :meth:`Loader.own_state` shares of disjoint consumers of
    one epoch into one: a sample counts as delivered when no consumer still
    owes it. Joined over every consumer, the result restores on any topology."""
    states = list(states)
    if not states:
        raise ValueError("no states to merge")
    return _core.merge_own_states(states)

