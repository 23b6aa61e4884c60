"""An object-store prefix listed once per job, not once per process.

Given a prefix (``s3://bucket/data/``), every process that opens a loader lists it and reads
each shard's sample index to learn its count: a node of 8 ranks x 2 DataLoader workers asks 16
times, and a prefix of 100,000 shards is 100 list pages and 100,000 index reads each time.
:func:`shared_inputs` resolves such an input once: the first rank of the job to get there lists
it and puts the result (a manifest with absolute urls and counts) in torch.distributed's store;
the other ranks take it from there. Each rank writes it to a local file that stands in for the
prefix, which its DataLoader workers then read. Without torch.distributed (one process, or before
``init_process_group``) the process lists once for itself and its workers.

Only a prefix of tar shards whose counts the indexes give is shared so: rows, Parquet and MDS
sets, and shards without indexes, are resolved by each process as before. The listing is of the
job's start: objects added under the prefix later are not read, as with a manifest. A listing that fails raises on the rank that listed and, with the same message, on every
rank that waited for it.
"""

import atexit
import contextlib
import datetime
import hashlib
import os
import tempfile
from typing import Any, List, Optional, Tuple

from . import _core, _logging

_KEY = "shardstream/listing/"
_ERROR = "error:"
_NONE = b"none"  # not a plain manifest: every process resolves the prefix itself
_WAIT = datetime.timedelta(hours=1)  # how long a rank waits for another's listing
_files: List[Tuple[int, str]] = []  # (the process that wrote it, path)


def _store() -> Optional[Any]:
    """torch.distributed's default store, when a process group with several ranks is up and
    this is a rank's own process (a forked DataLoader worker inherits the group's state but
    must not talk over its parent's store connection)."""
    try:
        import torch.distributed as dist
        import torch.utils.data
    except ImportError:
        return None
    if torch.utils.data.get_worker_info() is not None:
        return None
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    from torch.distributed import distributed_c10d
    try:
        return distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def _remove_files() -> None:
    # Forked DataLoader workers inherit this hook: only the writer removes its files.
    for pid, path in _files:
        if pid == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(path)


def _list(url: str) -> Optional[str]:
    _logging.sync_level()
    try:
        return _core.resolve_listing(url)
    finally:
        _logging.drain()  # what the credential chain said, for one


def _resolve(url: str) -> Optional[str]:
    """The manifest text of ``url``, listed here or by the job's first rank; None when the
    prefix holds more than tar shards of known counts (each process then resolves it)."""
    store = _store()
    if store is None:
        return _list(url)
    base = _KEY + hashlib.sha256(url.encode()).hexdigest()
    # A failed listing is not kept for the rest of the job: each failure moves the prefix on
    # to a fresh key, so a data set built again lists again.
    key = f"{base}/{store.add(base + '/failed', 0)}"
    if store.add(key + "/claim", 1) == 1:  # the first to get here lists; the rest wait
        try:
            text = _list(url)
        except BaseException as e:  # an interrupt too: the waiting ranks must not wait on
            store.set(key, (_ERROR + type(e).__name__ + ":" + str(e)).encode())
            store.add(base + "/failed", 1)
            raise
        store.set(key, _NONE if text is None else text.encode())
        return text
    try:  # a listing of 100,000 shards can take minutes: longer than a store's usual timeout
        store.wait([key], _WAIT)
    except Exception as e:
        raise TimeoutError(f"{url}: another rank lists it and has not answered in "
                           f"{_WAIT.total_seconds():.0f} s ({e})") from e
    got = store.get(key)
    if got == _NONE:
        return None
    got = got.decode()
    if got.startswith(_ERROR):
        kind, _, message = got[len(_ERROR):].partition(":")
        from . import errors
        raise getattr(errors, kind, RuntimeError)(f"{message} (listed by another rank)")
    return got


def shared_input(url: str) -> str:
    """``url`` itself, or for an object-store prefix a local manifest of what it lists."""
    if not isinstance(url, str) or not _core.is_store_prefix(url):
        return url
    text = _resolve(url)
    if text is None:
        return url
    fd, path = tempfile.mkstemp(prefix="shardstream-listing-", suffix=".jsonl")
    if not _files:
        atexit.register(_remove_files)
    _files.append((os.getpid(), path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def shared_inputs(urls: Any) -> Any:
    """``urls`` (one input or a list) with each object-store prefix resolved once per job."""
    if isinstance(urls, str):
        return shared_input(urls)
    if isinstance(urls, (list, tuple)):
        return [shared_input(u) for u in urls]
    return urls


def shared_streams(streams: Any) -> Any:
    """Mixing streams with their inputs (``inputs``, ``urls`` or ``manifest``) shared alike."""
    out = []
    for st in streams:
        st = dict(st)
        for k in ("inputs", "urls", "manifest"):
            if k in st:
                st[k] = shared_inputs(st[k])
        out.append(st)
    return out
